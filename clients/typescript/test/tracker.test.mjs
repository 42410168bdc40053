// The tracker (SPEC §24) in Node against the real gateway (the test kit): a lost answer, a
// restart, the 47 h rule, per-item rejections, a whole-request refusal and a 429, each checked in
// what the gateway stored (GET /public/v1/events).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Gatehouse as Kit } from '@gatehouse/testing';
import { Tracker, MAX_AGE_MS } from '../dist/tracker/index.js';
import { FileQueue } from '../dist/node.js';

let kit;
let dir;
before(async () => {
  kit = await Kit.start({ plans: { trial: { per_minute: 1000, monthly_quota: 1000000 } } });
  dir = mkdtempSync(join(tmpdir(), 'gh-tracker-'));
});
after(async () => {
  await kit?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const instant = () => Promise.resolve();
const keys = () => kit.project.keys;
const tracker = (options = {}) =>
  new Tracker({ apiKey: keys().server, baseUrl: kit.url, autoFlush: false, sleep: instant, ...options });

/** Every stored event named `event` (all pages). */
async function stored(event) {
  const out = [];
  let cursor = null;
  do {
    const q = new URLSearchParams({ event, limit: '200', ...(cursor ? { cursor } : {}) });
    const res = await fetch(`${kit.url}/public/v1/events?${q}`, { headers: { authorization: `Bearer ${keys().owner}` } });
    assert.equal(res.status, 200, await res.clone().text());
    const page = await res.json();
    out.push(...page.data);
    cursor = page.next_cursor;
  } while (cursor);
  return out;
}

/** The stored events named `event` once `count` are there (the events queue takes a moment), and a while after. */
async function storedOnce(event, count, timeout = 15_000) {
  const deadline = Date.now() + timeout;
  let rows = await stored(event);
  while (rows.length < count && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 200));
    rows = await stored(event);
  }
  // A second copy would come through the same queue: give it the time the first ones took.
  await new Promise((r) => setTimeout(r, 1000));
  return stored(event);
}

/** Ids that occur more than once. */
const twice = (ids) => ids.filter((id, i) => ids.indexOf(id) !== i);

test('20 events whose first answer is lost are each stored once, under the id track() returned', async () => {
  let calls = 0;
  const lossy = async (url, init) => {
    calls += 1;
    const res = await fetch(url, init);
    if (calls === 1) {
      await res.arrayBuffer();
      throw new TypeError('network error: the answer was lost');
    }
    return res;
  };
  const t = tracker({ fetch: lossy });
  const ids = Array.from({ length: 20 }, (_, i) => t.track('lost-answer', { i }, { userId: 'u-lost' }));
  assert.equal(new Set(ids).size, 20);
  for (const id of ids) assert.match(id, /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
  const r = await t.flush();
  assert.deepEqual(r, { sent: 0, duplicates: 20, rejected: 0, dropped: 0, remaining: 0 });
  assert.equal(calls, 2, 'one lost send, one resend');
  const rows = await storedOnce('lost-answer', 20);
  const got = rows.map((e) => e.event_id);
  assert.deepEqual(twice(got), []);
  assert.deepEqual([...got].sort(), [...ids].sort());
  assert.ok(rows.every((e) => e.generated_id === false && e.user_id === 'u-lost'));
  // Nothing is left to send.
  assert.deepEqual(await t.flush(), { sent: 0, duplicates: 0, rejected: 0, dropped: 0, remaining: 0 });
  assert.equal(calls, 2);
  await t.close();
});

test('a FileQueue survives a restart: the new Tracker resends the same ids, with the same anonymous id', async () => {
  const path = join(dir, 'queue.json');
  // The first process: its one send reaches the gateway but the answer is lost, then it is offline.
  let calls = 0;
  const first = tracker({
    queue: new FileQueue(path),
    maxAttempts: 3,
    fetch: async (url, init) => {
      calls += 1;
      if (calls === 1) await (await fetch(url, init)).arrayBuffer();
      throw new TypeError('offline');
    },
  });
  const ids = [];
  for (let i = 0; i < 3; i += 1) ids.push(first.track('restart', { i }));
  const r1 = await first.flush();
  assert.equal(calls, 3);
  assert.deepEqual(r1, { sent: 0, duplicates: 0, rejected: 0, dropped: 0, remaining: 3 });
  for (let i = 3; i < 5; i += 1) ids.push(first.track('restart', { i }));
  const anon = await first.anonymousId();
  await first.close();
  const onDisk = JSON.parse(readFileSync(path, 'utf8'));
  assert.deepEqual(onDisk.items.map((i) => i.id).sort(), [...ids].sort());

  // The next process, on the same file.
  const second = tracker({ queue: new FileQueue(path) });
  assert.equal(await second.anonymousId(), anon);
  const r2 = await second.flush();
  assert.deepEqual(r2, { sent: 2, duplicates: 3, rejected: 0, dropped: 0, remaining: 0 });
  const rows = await storedOnce('restart', 5);
  assert.deepEqual(rows.map((e) => e.event_id).sort(), [...ids].sort());
  assert.ok(rows.every((e) => e.anonymous_id === anon && e.user_id === null));
  assert.deepEqual(JSON.parse(readFileSync(path, 'utf8')).items, []);
  await second.close();
});

test('events older than 47 h are dropped with a count, the others sent', async () => {
  let clock = Date.now() - 48 * 3600 * 1000;
  const drops = [];
  const t = tracker({ now: () => clock, onDrop: (n, reason) => drops.push([n, reason]) });
  const old = [t.track('aged'), t.track('aged'), t.track('aged')];
  clock = Date.now() - MAX_AGE_MS + 60_000; // 1 minute inside the rule
  const young = [t.track('aged'), t.track('aged')];
  clock = Date.now();
  const r = await t.flush();
  assert.deepEqual(r, { sent: 2, duplicates: 0, rejected: 0, dropped: 3, remaining: 0 });
  assert.deepEqual(drops, [[3, 'EXPIRED']]);
  const rows = await storedOnce('aged', 2);
  assert.deepEqual(rows.map((e) => e.event_id).sort(), [...young].sort());
  assert.ok(!rows.some((e) => old.includes(e.event_id)));
  await t.close();
});

test('a rejected item is reported and removed, never sent again; the rest of its batch is stored', async () => {
  const rejected = [];
  let calls = 0;
  const t = tracker({
    onRejected: (item, error) => rejected.push([item.id, error.code]),
    fetch: (url, init) => ((calls += 1), fetch(url, init)),
  });
  const good = t.track('mixed-batch', { n: 1 });
  const blank = t.track('   ');
  const huge = t.track('mixed-batch', { blob: 'x'.repeat(70 * 1024) });
  const good2 = t.track('mixed-batch', { n: 2 });
  const r = await t.flush();
  assert.deepEqual(r, { sent: 2, duplicates: 0, rejected: 2, dropped: 0, remaining: 0 });
  assert.deepEqual(rejected.sort(), [[blank, 'VALIDATION_ERROR'], [huge, 'VALIDATION_ERROR']].sort());
  assert.equal(calls, 1);
  assert.deepEqual(await t.flush(), { sent: 0, duplicates: 0, rejected: 0, dropped: 0, remaining: 0 });
  assert.equal(calls, 1, 'a rejected item is not sent again');
  const rows = await storedOnce('mixed-batch', 2);
  assert.deepEqual(rows.map((e) => e.event_id).sort(), [good, good2].sort());
  await t.close();
});

test('a request the gateway refuses for good (alias with a browser key: 403) is dropped with its code, not retried', async () => {
  const drops = [];
  let calls = 0;
  const t = tracker({
    apiKey: keys().browser,
    onDrop: (n, reason) => drops.push([n, reason]),
    fetch: (url, init) => ((calls += 1), fetch(url, init)),
  });
  t.alias('anon-1', 'user-1');
  const id = t.track('after-alias');
  const r = await t.flush();
  assert.deepEqual(r, { sent: 1, duplicates: 0, rejected: 0, dropped: 1, remaining: 0 });
  assert.deepEqual(drops, [[1, 'FORBIDDEN']]);
  assert.equal(calls, 2);
  const rows = await storedOnce('after-alias', 1);
  assert.deepEqual(rows.map((e) => e.event_id), [id]);
  assert.equal(rows[0].key_type, 'browser');
  await t.close();
});

test('identify links the anonymous id and later events carry the user id', async () => {
  const t = tracker();
  const anon = await t.anonymousId();
  const before = t.track('before-identify');
  t.identify('user-42', { plan: 'pro' });
  const afterId = t.track('after-identify');
  const r = await t.flush();
  assert.deepEqual(r, { sent: 3, duplicates: 0, rejected: 0, dropped: 0, remaining: 0 });
  const [b] = await storedOnce('before-identify', 1);
  assert.deepEqual([b.event_id, b.anonymous_id, b.user_id], [before, anon, null]);
  const [i] = await storedOnce('identify', 1);
  assert.deepEqual([i.anonymous_id, i.user_id, i.properties], [anon, 'user-42', { plan: 'pro' }]);
  const [a] = await storedOnce('after-identify', 1);
  assert.deepEqual([a.event_id, a.user_id], [afterId, 'user-42']);
  await t.close();
});

test("a 429 is waited out: Retry-After through the injected sleep, then the events are stored once", async () => {
  const res = await fetch(`${kit.url}/public/v1/keys`, {
    method: 'POST',
    headers: { authorization: `Bearer ${keys().owner}`, 'content-type': 'application/json' },
    body: JSON.stringify({ type: 'server', name: 'slow', rate_limit_per_minute: 1 }),
  });
  assert.equal(res.status, 201, await res.clone().text());
  const { key } = await res.json();
  const waits = [];
  const statuses = [];
  const t = tracker({
    apiKey: key,
    random: () => 0,
    fetch: async (url, init) => {
      const answer = await fetch(url, init);
      statuses.push([answer.status, answer.headers.get('retry-after')]);
      return answer;
    },
    sleep: async (ms) => {
      waits.push(ms);
      await kit.clock.advance(Math.ceil(ms / 1000));
    },
  });
  const first = t.track('paced');
  assert.equal((await t.flush()).sent, 1);
  const second = [t.track('paced'), t.track('paced')];
  const r = await t.flush();
  assert.deepEqual(r, { sent: 2, duplicates: 0, rejected: 0, dropped: 0, remaining: 0 });
  assert.equal(statuses[1][0], 429);
  const retryAfter = Number(statuses[1][1]);
  assert.ok(retryAfter >= 1 && retryAfter <= 60, `Retry-After ${statuses[1][1]}`);
  assert.deepEqual(waits, [retryAfter * 1000], 'the wait is the Retry-After (random 0: no jitter)');
  assert.deepEqual(statuses.map((s) => s[0]), [202, 429, 202]);
  const rows = await storedOnce('paced', 3);
  assert.deepEqual(rows.map((e) => e.event_id).sort(), [first, ...second].sort());
  await t.close();
});
