// SPEC §20 "hot keys", end to end, on a gateway of this file's own where every key leases
// (`LEASE_ABOVE_PER_SECOND=0`): a key's guard grants the isolate blocks of the key's credits, the
// isolate admits from them without a Durable Object call, gives back what it did not use, and a
// revoked key is refused everywhere within a second.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, readdir, readFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { assertError, call, createKey, createProject, freshWindow, guardRows, sleep, startGateway } from './harness.mjs';

let gateway;
let state;

before(async () => {
  state = join(await mkdtemp(join(tmpdir(), 'gatehouse-leases-')), 'state');
  gateway = await startGateway(state, { vars: { LEASE_ABOVE_PER_SECOND: '0' } });
});

after(() => gateway?.stop());

const me = (key) => call('GET', '/public/v1/me', { key, base: gateway.base });

/** The request log lines (`REQUEST_LOG=all`) of this file's gateway. */
async function requestLines() {
  const text = await readFile(gateway.log, 'utf8');
  return text.split('\n').flatMap((line) => {
    const start = line.indexOf('{"request_id"');
    if (start < 0) return [];
    try { return [JSON.parse(line.slice(start))]; } catch { return []; }
  });
}

test('with leases, 100 parallel requests at 30 a minute pass exactly 30, and a lease hit makes no Durable Object call', async () => {
  const { owner } = await createProject('hot key', { base: gateway.base });
  const key = await createKey(owner.key, 'server', {}, { base: gateway.base });
  await freshWindow(20);
  const burst = await Promise.all(Array.from({ length: 100 }, () => me(key.key)));
  const statuses = burst.map((r) => r.status);
  assert.equal(statuses.filter((s) => s === 200).length, 30, statuses.join());
  assert.equal(statuses.filter((s) => s === 429).length, 70);
  for (const refused of burst.filter((r) => r.status === 429)) assertError(refused, 429, 'RATE_LIMIT_EXCEEDED');
  // One isolate: each admission, from a lease or from the guard, shows its own slot.
  const remaining = burst.filter((r) => r.status === 200).map((r) => Number(r.headers.get('x-ratelimit-remaining')));
  assert.deepEqual(remaining.sort((a, b) => a - b), Array.from({ length: 30 }, (_, i) => i), 'each slot shown once');
  // Some of the 30 were admitted from the isolate's lease: their log line counts no object call.
  const ids = new Set(burst.filter((r) => r.status === 200).map((r) => r.headers.get('x-request-id')));
  const lines = (await requestLines()).filter((l) => ids.has(l.request_id));
  assert.equal(lines.length, 30);
  const hits = lines.filter((l) => l.durable_object_calls === 0);
  assert.ok(hits.length > 0, `lease hits: ${JSON.stringify(lines.map((l) => l.durable_object_calls))}`);
  assert.ok(hits.every((l) => l.d1_queries === 0 && l.kv_operations === 0));
});

// SPEC §23 (found by an adversarial run: 48 connections on a 50/s key got 1,063 × 200 and no 429,
// p99 2.8 s; 30 parallel requests on a 5/s key waited up to 20 s): a request that cannot be admitted
// now is a 429 now, with Retry-After — a wait for leases to come back never outlasts the window that
// refused it, nor a quarter of a second.
test('a leasing key over its per-second limit answers 429 at once, not after a wait', async () => {
  const { owner } = await createProject('hot second', { plan: 'windows', base: gateway.base });
  const key = await createKey(owner.key, 'server', {}, { base: gateway.base });
  await freshWindow(20);
  await sleep(1000 - (Date.now() % 1000));
  const started = Date.now();
  const burst = await Promise.all(Array.from({ length: 30 }, async () => {
    const t0 = Date.now();
    const r = await me(key.key);
    return { status: r.status, ms: Date.now() - t0, retryAfter: r.headers.get('retry-after'), at: Date.now() - started, id: r.headers.get('x-request-id') };
  }));
  // The gateway's own time for each answer (its log line's `ms`): what the promise is about. The
  // client's clock also counts a busy machine's scheduling (the whole suite runs lanes side by
  // side), so it only has to stay far below the 20 s waits of the bug.
  let byId = new Map();
  for (let tries = 0; tries < 20 && !burst.every((r) => byId.has(r.id)); tries++) {
    if (tries) await sleep(100);
    byId = new Map((await requestLines()).map((l) => [l.request_id, l]));
  }
  const slow = burst.filter((r) => !byId.has(r.id) || byId.get(r.id).ms > 1_000);
  assert.deepEqual(slow, [], 'every answer within a second of the gateway\'s time');
  assert.deepEqual(burst.filter((r) => r.ms > 5_000), [], 'no answer waited for the window');
  const passed = burst.filter((r) => r.status === 200).length;
  assert.ok(passed >= 5 && passed <= 8, `${passed} passed: 5 a second, 8 a minute`);
  for (const r of burst.filter((x) => x.status !== 200)) {
    assert.equal(r.status, 429);
    assert.ok(Number(r.retryAfter) >= 1, JSON.stringify(r));
  }
});

test('a sequential client of a leasing key counts down 29…0 across lease renewals, then 429', async () => {
  const { owner } = await createProject('renewed hot key', { base: gateway.base });
  const key = await createKey(owner.key, 'server', {}, { base: gateway.base });
  await freshWindow(20);
  const remaining = [];
  for (let i = 0; i < 30; i++) {
    const res = await me(key.key);
    assert.equal(res.status, 200, res.text);
    remaining.push(Number(res.headers.get('x-ratelimit-remaining')));
  }
  assert.deepEqual(remaining, Array.from({ length: 30 }, (_, i) => 29 - i));
  assertError(await me(key.key), 429, 'RATE_LIMIT_EXCEEDED');
});

test('sequential requests of a leasing key count down exactly, and the rest of a lease comes back', async () => {
  const { owner } = await createProject('steady hot key', { base: gateway.base });
  const key = await createKey(owner.key, 'server', {}, { base: gateway.base });
  await freshWindow(20);
  const remaining = [];
  for (let i = 0; i < 8; i++) {
    const res = await me(key.key);
    assert.equal(res.status, 200, res.text);
    remaining.push(Number(res.headers.get('x-ratelimit-remaining')));
  }
  assert.deepEqual(remaining, [29, 28, 27, 26, 25, 24, 23, 22]);
  // The isolate holds credits it did not use (its leases grow: 1, 2, 4): once its lease ends it
  // gives them back, and the window has exactly 22 left for anyone.
  await sleep(1_500);
  const burst = await Promise.all(Array.from({ length: 40 }, () => me(key.key)));
  assert.equal(burst.filter((r) => r.status === 200).length, 22, burst.map((r) => r.status).join());
});

test('a revoked hot key is refused everywhere within a second', async () => {
  const { owner } = await createProject('revoked hot key', { plan: 'business', base: gateway.base });
  const key = await createKey(owner.key, 'server', {}, { base: gateway.base });
  for (let i = 0; i < 5; i++) assert.equal((await me(key.key)).status, 200);
  const revoked = await call('DELETE', `/public/v1/keys/${key.id}`, { key: owner.key, base: gateway.base });
  assert.equal(revoked.status, 200, revoked.text);
  const at = Date.now();
  // One request every 150 ms: a refused key's requests are failed authentications, and an
  // address makes at most 20 a minute before it is answered 429.
  const after = [];
  while (Date.now() - at < 1_600) {
    after.push([Date.now() - at, (await me(key.key)).status]);
    await sleep(150);
  }
  const late = after.filter(([ms]) => ms > 1_050);
  assert.ok(late.length > 0);
  assert.ok(late.every(([, s]) => s === 401), JSON.stringify(after));
});

/** How many key-guard objects (guards, authorities, claim objects) have storage in the local state. */
const guardObjects = async () => (await readdir(join(state, 'v3/do/gatehouse-KeyGuardObject')))
  .filter((f) => f.endsWith('.sqlite') && f !== 'metadata.sqlite').length;

/** FNV-1a (64 bits), as the gateway spreads a key's claims by `Idempotency-Key`. */
function fnv1a(text) {
  let h = 0xcbf29ce484222325n;
  for (const byte of Buffer.from(text)) h = ((h ^ BigInt(byte)) * 0x100000001b3n) & 0xffffffffffffffffn;
  return h;
}

test("a leasing key's idempotent requests take their claims in its claim objects, spread by Idempotency-Key; retries replay and nothing runs twice", async () => {
  const { owner } = await createProject('hot idempotent key', { plan: 'business', base: gateway.base });
  const key = await createKey(owner.key, 'server', {}, { base: gateway.base });
  assert.equal((await me(key.key)).status, 200);
  await sleep(300);
  const before = await guardObjects();
  const keys = Array.from({ length: 24 }, (_, i) => `order-${i}`);
  const post = (idem, name) => call('POST', '/public/v1/contacts', {
    key: key.key, base: gateway.base, body: { name }, headers: { 'Idempotency-Key': idem },
  });
  const created = [];
  for (const [i, idem] of keys.entries()) {
    const res = await post(idem, `Customer ${i}`);
    assert.equal(res.status, 201, res.text);
    created.push(res.body.id);
  }
  // Shard 0 of a key's claims is its guard; every other shard its Idempotency-Keys reach is an
  // object of its own (CLAIM_SHARDS is 32 by default, and the key was made with it).
  const shards = new Set(keys.map((k) => Number(fnv1a(k) % 32n)).filter((s) => s !== 0));
  assert.ok(shards.size >= 4, `the test's keys reach ${shards.size} claim objects`);
  const deadline = Date.now() + 10_000;
  while ((await guardObjects()) - before < shards.size && Date.now() < deadline) await sleep(100);
  assert.equal((await guardObjects()) - before, shards.size, 'one new object per claim shard used');
  // A claim object holds only the claims' tables, none of the other roles' (empty pages each).
  const inList = `(${keys.map((k) => `'${k}'`).join(',')})`;
  const holders = guardRows(state, `SELECT (SELECT group_concat(name, ',') FROM (SELECT name FROM sqlite_master
      WHERE type = 'table' AND name NOT LIKE '\\_%' ESCAPE '\\' ORDER BY name)) AS tables,
    (SELECT COUNT(*) FROM idempotency_claims WHERE idempotency_key IN ${inList}) AS n`).filter((o) => o.rows[0].n > 0);
  // The key's guard (shard 0) counts its requests and holds its leases.
  const claimObjects = holders.filter((o) => !/\b(limit_counters|isolate_leases|applied)\b/.test(o.rows[0].tables));
  assert.equal(claimObjects.length, shards.size, JSON.stringify(holders.map((o) => o.rows[0])));
  for (const o of claimObjects) assert.equal(o.rows[0].tables, 'claim_bodies,idempotency_claims', o.object);
  // Retries, in parallel: each replays its own first answer.
  const retried = await Promise.all(keys.map((idem, i) => post(idem, `Customer ${i}`)));
  for (const [i, res] of retried.entries()) {
    assert.equal(res.status, 201, res.text);
    assert.equal(res.headers.get('idempotent-replayed'), '1', keys[i]);
    assert.equal(res.body.id, created[i]);
  }
  const list = await call('GET', '/public/v1/contacts?limit=100', { key: key.key, base: gateway.base });
  assert.equal(list.status, 200, list.text);
  assert.equal(list.body.data.length, keys.length, 'nothing executed twice');
});

test('a hot key driven for 80 s: its lease rows stop growing after the first minute, and its claim bodies are kept only minutes after the response store took them, not the TTL (replays still answer)', async () => {
  const base = gateway.base;
  const { owner } = await createProject('long-running hot key', { plan: 'business', base });
  const key = await createKey(owner.key, 'server', {}, { base });
  // 200 idempotent creates, 10 at a time.
  const idems = Array.from({ length: 200 }, (_, i) => `keep-${i}-${crypto.randomUUID()}`);
  const post = (idem) => call('POST', '/public/v1/contacts', {
    key: key.key, base, body: { name: idem }, headers: { 'Idempotency-Key': idem },
  });
  const created = new Map();
  for (let i = 0; i < idems.length; i += 10) {
    const batch = await Promise.all(idems.slice(i, i + 10).map(post));
    batch.forEach((res, j) => {
      assert.equal(res.status, 201, res.text);
      created.set(idems[i + j], res.body.id);
    });
  }
  const inList = `(${idems.map((k) => `'${k}'`).join(',')})`;
  const count = (sql) => guardRows(state, sql).reduce((n, o) => n + o.rows[0].n, 0);
  const bodies = () => count(`SELECT COUNT(*) AS n FROM claim_bodies WHERE idempotency_key IN ${inList}`);
  const claims = () => count(`SELECT COUNT(*) AS n FROM idempotency_claims WHERE idempotency_key IN ${inList}`);
  assert.equal(claims(), 200, 'a claim per key');
  assert.ok(bodies() > 0, 'bodies are kept while the response store may not show them');
  const latest = (table) => guardRows(state, `SELECT MAX(keep_until_ms) AS t FROM ${table} WHERE idempotency_key IN ${inList}`)
    .reduce((t, o) => Math.max(t, o.rows[0].t ?? 0), 0);
  assert.ok(latest('idempotency_claims') > Date.now() + 23 * 3_600_000, 'claims stay for the TTL');
  // Drive the key: 4 clients, one request each at a time, for 80 s; count its lease rows every 5 s.
  const leaseRows = () => count('SELECT COUNT(*) AS n FROM isolate_leases');
  const start = Date.now();
  const samples = [];
  let driving = true;
  const client = async () => {
    while (driving) {
      assert.equal((await me(key.key)).status, 200);
      await sleep(150);
    }
  };
  const clients = Array.from({ length: 4 }, client);
  while (Date.now() - start < 80_000) {
    await sleep(5_000);
    samples.push([Math.round((Date.now() - start) / 1000), leaseRows()]);
  }
  driving = false;
  await Promise.all(clients);
  const at = (s) => samples.filter(([t]) => t >= s).map(([, n]) => n);
  const early = Math.max(...at(65).slice(0, 1), 1);
  const last = samples.at(-1)[1];
  assert.ok(samples.find(([t]) => t >= 20)[1] > 0, `leases were made: ${JSON.stringify(samples)}`);
  assert.ok(last <= early * 1.25, `lease rows stop growing after the first minute: ${JSON.stringify(samples)}`);
  // Nothing is kept more than one purge interval (10 s) past its keeping.
  const stale = count(`SELECT COUNT(*) AS n FROM isolate_leases WHERE keep_until_ms < ${Date.now() - 15_000}`);
  assert.equal(stale, 0, 'no lease row past its keeping');
  // Each body goes 10 minutes after the claim's object wrote it to KV (it was kept for the whole
  // 24 h TTL); the object writes that down with its next command, or by its alarm at most 3 s
  // later, before the runtime evicts the idle object. (The purge is the lease rows' above.)
  assert.ok(latest('claim_bodies') <= Date.now() + 11 * 60_000, `bodies go within minutes: ${latest('claim_bodies') - Date.now()} ms`);
  // Every claim still stands (for its TTL), so a retry replays its first answer: from KV now (the
  // inline copy is past its minute).
  assert.equal(claims(), 200);
  for (const idem of idems.slice(0, 20)) {
    const again = await post(idem);
    assert.equal(again.status, 201, again.text);
    assert.equal(again.headers.get('idempotent-replayed'), '1');
    assert.equal(again.body.id, created.get(idem));
  }
});
