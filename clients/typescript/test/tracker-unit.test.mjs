// The tracker's decisions without a gateway: what one request may carry (500 items, 512 KiB, the
// 64 KB keepalive budget), answers the kit does not give on demand (413, EVENT_IN_FLIGHT, a 202
// without its per-item answer), and one Tracker never sending two requests at once.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Tracker, MemoryQueue, pack, KEEPALIVE_BUDGET, BODY_BUDGET } from '../dist/tracker/index.js';

const item = (i, size = 10, kind = 'track') => ({
  id: `id-${i}`,
  kind,
  at: i,
  seq: 0,
  body: { event_id: `id-${i}`, event: 'e', user_id: 'u', properties: { pad: 'x'.repeat(size) } },
});
const bodySize = (items) => new TextEncoder().encode(JSON.stringify({ batch: items.map((i) => i.body) })).length;

test('pack: at most max items, within the byte budget, an identify alone', () => {
  const small = Array.from({ length: 600 }, (_, i) => item(i));
  assert.equal(pack(small, 500, BODY_BUDGET, false).length, 500);
  assert.equal(pack(small, 7, BODY_BUDGET, false).length, 7);
  const big = Array.from({ length: 10 }, (_, i) => item(i, 20_000));
  const keepalive = pack(big, 500, KEEPALIVE_BUDGET, true);
  assert.equal(keepalive.length, 2);
  assert.ok(bodySize(keepalive) <= KEEPALIVE_BUDGET && bodySize(big.slice(0, 3)) > KEEPALIVE_BUDGET);
  assert.ok(KEEPALIVE_BUDGET < 64 * 1024);
  // One event over the keepalive budget waits for a normal send; a normal send takes it alone.
  const huge = [item(0, 70_000), item(1)];
  assert.deepEqual(pack(huge, 500, KEEPALIVE_BUDGET, true), []);
  assert.deepEqual(pack(huge, 500, BODY_BUDGET, false).map((i) => i.id), ['id-0', 'id-1']);
  assert.deepEqual(pack(huge, 500, 1000, false).map((i) => i.id), ['id-0']);
  const mixed = [item(0), item(1), item(2, 10, 'identify'), item(3)];
  assert.deepEqual(pack(mixed, 500, BODY_BUDGET, false).map((i) => i.id), ['id-0', 'id-1']);
  assert.deepEqual(pack(mixed.slice(2), 500, BODY_BUDGET, false).map((i) => i.id), ['id-2']);
});

/** A gateway in a function: `answer(batch, n)` returns [status, body, headers?]; records every request. */
function fake(answer) {
  const calls = [];
  let open = 0;
  let most = 0;
  const fetch = async (url, init) => {
    open += 1;
    most = Math.max(most, open);
    const body = JSON.parse(init.body);
    calls.push({ url, body, headers: init.headers, keepalive: init.keepalive });
    await new Promise((r) => setTimeout(r, 5));
    open -= 1;
    const [status, json, headers = {}] = answer(body.batch ?? body, calls.length);
    return new Response(json === undefined ? '' : JSON.stringify(json), { status, headers });
  };
  return { fetch, calls, most: () => most };
}
const accept = (batch) => ({ accepted: batch.map((b, index) => ({ index, event_id: b.event_id })), duplicates: [], rejected: [] });
const tracker = (f, options = {}) =>
  new Tracker({ apiKey: 'gh_s_test', baseUrl: 'http://127.0.0.1:9', fetch: f.fetch, autoFlush: false, sleep: async () => {}, queue: new MemoryQueue(), ...options });

test('one Tracker never has two requests in the air, and no event is in two of them', async () => {
  const f = fake((batch) => [202, accept(batch)]);
  const t = tracker(f, { maxBatch: 3 });
  const ids = Array.from({ length: 10 }, () => t.track('e', {}, { userId: 'u' }));
  const results = await Promise.all([t.flush(), t.flush(), t.flush()]);
  assert.equal(f.most(), 1);
  const sent = f.calls.flatMap((c) => c.body.batch.map((b) => b.event_id));
  assert.deepEqual(sent, ids);
  assert.deepEqual(results.map((r) => r.sent), [10, 0, 0]);
  assert.equal(f.calls[0].headers.authorization, 'Bearer gh_s_test');
  assert.equal(f.calls[0].headers['content-type'], 'application/json');
});

test('a 413 halves the batch until it fits; one item still refused is dropped with its code', async () => {
  const f = fake((batch) => {
    if (batch.some((b) => b.properties?.poison)) return batch.length > 1 ? [413, { error: { code: 'PAYLOAD_TOO_LARGE', retryable: false } }] : [413, { error: { code: 'PAYLOAD_TOO_LARGE', retryable: false } }];
    return batch.length > 2 ? [413, { error: { code: 'PAYLOAD_TOO_LARGE', retryable: false } }] : [202, accept(batch)];
  });
  const drops = [];
  const t = tracker(f, { onDrop: (n, why) => drops.push([n, why]) });
  for (let i = 0; i < 4; i += 1) t.track('e', { i }, { userId: 'u' });
  t.track('e', { poison: true }, { userId: 'u' });
  const r = await t.flush();
  assert.deepEqual(r, { sent: 4, duplicates: 0, rejected: 0, dropped: 1, remaining: 0 });
  assert.deepEqual(drops, [[1, 'PAYLOAD_TOO_LARGE']]);
});

test('EVENT_IN_FLIGHT is not a rejection: the item stays queued and is sent again', async () => {
  const f = fake((batch, n) =>
    n === 1
      ? [202, { accepted: [{ index: 0, event_id: batch[0].event_id }], duplicates: [], rejected: [{ index: 1, code: 'EVENT_IN_FLIGHT', message: 'retry' }] }]
      : [202, { accepted: [], duplicates: batch.map((b, index) => ({ index, event_id: b.event_id })), rejected: [] }],
  );
  const rejected = [];
  const t = tracker(f, { onRejected: (i, e) => rejected.push(e.code) });
  const [a, b] = [t.track('e', {}, { userId: 'u' }), t.track('e', {}, { userId: 'u' })];
  const r = await t.flush();
  assert.deepEqual(r, { sent: 1, duplicates: 1, rejected: 0, dropped: 0, remaining: 0 });
  assert.deepEqual(rejected, []);
  assert.deepEqual(f.calls.map((c) => c.body.batch.map((x) => x.event_id)), [[a, b], [b]]);
});

test('a 202 without its per-item answer removes nothing; retryable failures keep everything, however many', async () => {
  let n = 0;
  const f = fake((batch) => ((n += 1), n === 1 ? [202, undefined] : [503, { error: { code: 'UNAVAILABLE', retryable: true } }]));
  const waits = [];
  const t = tracker(f, { maxAttempts: 4, random: () => 1, sleep: async (ms) => void waits.push(ms) });
  t.track('e', {}, { userId: 'u' });
  const r = await t.flush();
  assert.deepEqual(r, { sent: 0, duplicates: 0, rejected: 0, dropped: 0, remaining: 1 });
  assert.equal(f.calls.length, 4);
  assert.deepEqual(waits, [1000, 2000, 4000], 'backoff from 1 s, doubling (random 1: no reduction)');
  assert.ok(new Set(f.calls.map((c) => c.body.batch[0].event_id)).size === 1, 'the same event_id each time');
});

test('without ids, events carry the queue\'s anonymous id, kept across Trackers on one queue', async () => {
  const f = fake((batch) => [202, accept(batch)]);
  const queue = new MemoryQueue();
  const one = tracker(f, { queue });
  one.track('e');
  await one.flush();
  const two = tracker(f, { queue });
  two.track('e');
  await two.flush();
  const anon = f.calls.map((c) => c.body.batch[0].anonymous_id);
  assert.equal(anon[0], await one.anonymousId());
  assert.equal(anon[1], anon[0]);
  assert.equal(f.calls[0].body.batch[0].user_id, undefined);
});

test('background sends back off across intervals while the network is down, and start over when it answers', async () => {
  let down = true;
  const f = fake((batch) => [202, accept(batch)]);
  const fetch = (url, init) => (down ? Promise.reject(new TypeError('offline')) : f.fetch(url, init));
  let clock = 1_000_000;
  const t = tracker({ fetch }, { now: () => clock, random: () => 1 });
  t.track('e', {}, { userId: 'u' });
  const tick = async () => {
    t.tick(); // what the interval does (private in TypeScript)
    await t.running;
  };
  const gaps = [];
  for (let i = 0; i < 4; i += 1) {
    await tick();
    gaps.push(t.notBefore - clock);
    await tick(); // inside the wait: nothing is sent
    clock = t.notBefore;
  }
  assert.deepEqual(gaps, [1000, 2000, 4000, 8000]);
  down = false;
  await tick();
  assert.equal(f.calls.length, 1);
  assert.equal(await t.queue.count(), 0);
  assert.equal(t.streak, 0);
});

test('a request not answered in time is abandoned and retried with the same ids', async () => {
  let n = 0;
  const seen = [];
  const fetch = (url, init) => {
    n += 1;
    seen.push(JSON.parse(init.body).batch[0].event_id);
    if (n === 1) {
      // A gateway that never answers: only the signal ends the wait.
      return new Promise((_, reject) => init.signal.addEventListener('abort', () => reject(init.signal.reason)));
    }
    const batch = JSON.parse(init.body).batch;
    return Promise.resolve(new Response(JSON.stringify(accept(batch)), { status: 202 }));
  };
  const t = tracker({ fetch }, { timeoutMs: 50 });
  const id = t.track('e', {}, { userId: 'u' });
  const alive = setTimeout(() => {}, 5000); // AbortSignal.timeout's timer does not hold the event loop
  const r = await t.flush();
  clearTimeout(alive);
  assert.equal(r.sent, 1);
  assert.deepEqual(seen, [id, id]);
});

test('properties JSON cannot carry throw at track(), and the queue goes on', async () => {
  const f = fake((batch) => [202, accept(batch)]);
  const t = tracker(f);
  const loop = {};
  loop.self = loop;
  assert.throws(() => t.track('e', loop, { userId: 'u' }), TypeError);
  assert.throws(() => t.track('e', { n: 1n }, { userId: 'u' }), TypeError);
  const id = t.track('e', { at: new Date(0), skip: () => 1 }, { userId: 'u' });
  assert.equal((await t.flush()).sent, 1);
  assert.deepEqual(f.calls[0].body.batch[0].properties, { at: '1970-01-01T00:00:00.000Z' });
  assert.equal(f.calls[0].body.batch[0].event_id, id);
});

test('keepalive with a browser key: ?key= and text/plain; a gateway that answers 401 to it gets the header from then on', async () => {
  const f = fake((batch, n) => (n === 1 ? [401, { error: { code: 'INVALID_API_KEY', retryable: false } }] : [202, accept(batch)]));
  const drops = [];
  const t = tracker(f, { apiKey: 'gh_b_browser', onDrop: (n, why) => drops.push([n, why]) });
  const id = t.track('e', {}, { userId: 'u' });
  await t.writing;
  t.unload(); // what pagehide does (private in TypeScript)
  await new Promise((r) => setTimeout(r, 30));
  assert.equal(f.calls.length, 1);
  const [unload] = f.calls;
  assert.equal(unload.keepalive, true);
  assert.equal(unload.url, 'http://127.0.0.1:9/v1/track?key=gh_b_browser');
  assert.deepEqual(unload.headers, { 'content-type': 'text/plain' });
  assert.equal(await t.queue.count(), 1, 'a 401 to ?key= drops nothing');
  assert.deepEqual(await t.flush(), { sent: 1, duplicates: 0, rejected: 0, dropped: 0, remaining: 0 });
  assert.equal(f.calls[1].url, 'http://127.0.0.1:9/v1/track');
  assert.equal(f.calls[1].headers.authorization, 'Bearer gh_b_browser');
  assert.equal(f.calls[1].keepalive, undefined);
  assert.equal(f.calls[1].body.batch[0].event_id, id);
  t.track('e', {}, { userId: 'u' });
  await t.writing;
  t.unload();
  await new Promise((r) => setTimeout(r, 30));
  assert.equal(f.calls[2].keepalive, true);
  assert.equal(f.calls[2].url, 'http://127.0.0.1:9/v1/track', 'the header from then on');
  assert.deepEqual(drops, []);
});

test('a flush waits for the answer to an unload\'s request still in flight: its events removed when stored, sent again when it failed', async () => {
  for (const [status, sentByFlush] of [[202, 2], [503, 4]]) {
    let release;
    const late = new Promise((r) => { release = r; });
    const calls = [];
    const fetch = async (url, init) => {
      const { batch } = JSON.parse(init.body);
      calls.push(batch.map((b) => b.event_id));
      if (init.keepalive) {
        await late; // the unload's request is answered late (a loaded machine)
        if (status !== 202) return new Response(JSON.stringify({ error: { code: 'UNAVAILABLE', retryable: true } }), { status });
      }
      return new Response(JSON.stringify(accept(batch)), { status: 202 });
    };
    const t = tracker({ fetch });
    // Two of them fill the unload's 64 KB budget.
    const ids = Array.from({ length: 4 }, (_, i) => t.track('e', { i, pad: 'x'.repeat(25_000) }, { userId: 'u' }));
    await t.writing;
    t.unload(); // what pagehide does (private in TypeScript)
    const flushed = t.flush();
    await new Promise((r) => setTimeout(r, 50));
    release();
    const r = await flushed;
    assert.deepEqual([r.sent, r.remaining], [sentByFlush, 0], `the unload answered ${status}`);
    assert.deepEqual(calls[0], ids.slice(0, 2), 'the unload took the oldest');
    assert.deepEqual(calls[1], ids.slice(2), 'the flush did not send what the unload\'s request held');
    assert.deepEqual(calls.slice(2), status === 202 ? [] : [ids.slice(0, 2)], 'what the unload could not send, the flush did');
  }
});

test('the wait for an unload\'s answer ends with the request timeout, even when fetch ignores its signal', async () => {
  const fetch = async (url, init) => {
    if (init.keepalive) return new Promise(() => {}); // never answered, never aborted
    return new Response(JSON.stringify(accept(JSON.parse(init.body).batch)), { status: 202 });
  };
  const t = tracker({ fetch }, { timeoutMs: 100 });
  for (let i = 0; i < 4; i += 1) t.track('e', { i, pad: 'x'.repeat(25_000) }, { userId: 'u' });
  await t.writing;
  t.unload();
  const started = Date.now();
  const r = await t.flush();
  assert.deepEqual([r.sent, r.remaining], [2, 2], 'the unload\'s events stay queued');
  assert.ok(Date.now() - started < 5_000, `${Date.now() - started} ms`);
});

test('a server key never goes in the query', async () => {
  const f = fake((batch) => [202, accept(batch)]);
  const t = tracker(f);
  t.track('e', {}, { userId: 'u' });
  await t.writing;
  t.unload();
  await new Promise((r) => setTimeout(r, 30));
  assert.equal(f.calls[0].url, 'http://127.0.0.1:9/v1/track');
  assert.equal(f.calls[0].keepalive, true);
  assert.equal(f.calls[0].headers.authorization, 'Bearer gh_s_test');
});
