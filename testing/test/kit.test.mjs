// The test kit's own tests (SPEC §21): the real worker on Miniflare, driven over HTTP, with the
// test clock and the webhook sink. Run by scripts/test after scripts/build-kit.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { Gatehouse, statements } from '../index.mjs';

let gh;

before(async () => {
  gh = await Gatehouse.start();
});

after(() => gh?.stop());

async function call(method, path, { key, body, idem } = {}) {
  const headers = {};
  if (key) headers.authorization = `Bearer ${key}`;
  if (idem) headers['idempotency-key'] = idem;
  if (body !== undefined) headers['content-type'] = 'application/json';
  const res = await fetch(gh.url + path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await res.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return { status: res.status, headers: res.headers, json, text };
}

test('start answers a ready project: a key of each type, each allowed what its type allows', async () => {
  assert.match(gh.url, /^http:\/\/127\.0\.0\.1:\d+$/);
  assert.match(gh.project.id, /^prj_/);
  const me = await call('GET', '/public/v1/me', { key: gh.project.keys.owner });
  assert.equal(me.status, 200, me.text);
  assert.equal(me.json.project_id, gh.project.id);
  // The kit's setup used nothing of the owner key's window nor of the project's quota.
  assert.equal(me.json.rate_limit.remaining, me.json.rate_limit.limit - 1);
  assert.equal(me.json.quota.used, 1);
  for (const type of ['owner', 'server', 'browser', 'cicd']) assert.match(gh.project.keys[type], /^gh_/, type);
  const keys = await call('GET', '/public/v1/keys', { key: gh.project.keys.owner });
  assert.equal(keys.status, 200, keys.text);
  assert.deepEqual(keys.json.data.map((k) => k.type).sort(), ['browser', 'cicd', 'owner', 'server']);
});

test("the clock rolls a rate window: the 31st request of a trial key's minute is 429 until the clock moves a minute", async () => {
  await gh.reset();
  const key = gh.project.keys.server;
  const statuses = [];
  // The window is the clock's minute: start at the beginning of one, so the 31 cannot straddle two.
  await gh.clock.advance(60 - gh.clock.now().getUTCSeconds());
  for (let i = 0; i < 31; i++) statuses.push((await call('GET', '/public/v1/me', { key })).status);
  assert.equal(statuses.filter((s) => s === 200).length, 30, statuses.join());
  const refused = await call('GET', '/public/v1/me', { key });
  assert.equal(refused.status, 429);
  assert.ok(Number(refused.headers.get('retry-after')) <= 60);
  await gh.clock.advance(Number(refused.headers.get('retry-after')));
  assert.equal((await call('GET', '/public/v1/me', { key })).status, 200);
});

test('the clock expires keys and lapses idempotency entries', async () => {
  await gh.reset();
  const owner = gh.project.keys.owner;
  const expiresAt = new Date(gh.clock.now().getTime() + 3_600_000).toISOString();
  const made = await call('POST', '/public/v1/keys', { key: owner, body: { type: 'server', expires_at: expiresAt } });
  assert.equal(made.status, 201, made.text);
  assert.equal((await call('GET', '/public/v1/me', { key: made.json.key })).status, 200);

  const create = () => call('POST', '/public/v1/contacts', { key: made.json.key, body: { name: 'Ada' }, idem: 'order-1' });
  const first = await create();
  assert.equal(first.status, 201, first.text);
  const replay = await create();
  assert.equal(replay.headers.get('idempotent-replayed'), '1');
  assert.equal(replay.json.id, first.json.id);

  await gh.clock.advance(3_601);
  const expired = await call('GET', '/public/v1/me', { key: made.json.key });
  assert.equal(expired.status, 401);
  assert.equal(expired.json.error.details.reason, 'expired');

  // A day later the Idempotency-Key is a new request (IDEMPOTENCY_TTL_SECONDS is a day).
  const server = gh.project.keys.server;
  const again = () => call('POST', '/public/v1/contacts', { key: server, body: { name: 'Bob' }, idem: 'order-2' });
  const before = await again();
  assert.equal(before.status, 201, before.text);
  assert.equal((await again()).json.id, before.json.id);
  await gh.clock.advance(86_401);
  const after = await again();
  assert.equal(after.status, 201, after.text);
  assert.equal(after.headers.get('idempotent-replayed'), null);
  assert.notEqual(after.json.id, before.json.id);
});

test('the sink receives verified deliveries; a failed one is attempted again when the clock reaches its retry', async () => {
  await gh.reset();
  const owner = gh.project.keys.owner;
  const hook = await gh.webhooks.subscribe(['contact.created']);
  assert.match(hook.secret, /^whsec_/);
  const made = await call('POST', '/public/v1/contacts', { key: gh.project.keys.server, body: { name: 'Ada' } });
  assert.equal(made.status, 201, made.text);
  const delivered = await gh.webhooks.next({ type: 'contact.created' });
  assert.equal(delivered.verified, true);
  assert.equal(delivered.data.id, made.json.id);
  assert.equal(delivered.attempt, 1);

  gh.webhooks.fail(1);
  const second = await call('POST', '/public/v1/contacts', { key: gh.project.keys.server, body: { name: 'Bob' } });
  // The first attempt is answered 500, and the next one is 30 s ± 10 % away on Gatehouse's clock.
  const deadline = Date.now() + 10_000;
  while (!gh.webhooks.all().some((d) => d.answered === 500) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
  assert.ok(gh.webhooks.all().some((d) => d.answered === 500 && d.data.id === second.json.id));
  await gh.clock.advance(34);
  const retried = await gh.webhooks.next({ type: 'contact.created', timeout: 1 });
  assert.equal(retried.data.id, second.json.id);
  assert.equal(retried.attempt, 2);
  assert.equal(retried.verified, true);
  const listed = await call('GET', `/public/v1/webhooks/${hook.id}/deliveries`, { key: owner });
  const delivery = listed.json.data.find((d) => d.id === retried.id);
  assert.equal(delivery.status, 'delivered');
  assert.equal(delivery.attempts.length, 2);

  // SPEC §25: a v1a subscription's deliveries verify with its public key (no secret is shown).
  const v1a = await gh.webhooks.subscribe(['contact.created'], { path: '/v1a', signature: 'v1a' });
  assert.equal(v1a.secret, undefined);
  assert.match(v1a.public_key, /^whpk_/);
  const signed = await call('POST', '/public/v1/contacts', { key: gh.project.keys.server, body: { name: 'Ed' } });
  // Both subscriptions take it: the v1 one's delivery and the v1a one's, each verified.
  const both = [await gh.webhooks.next({ type: 'contact.created' }), await gh.webhooks.next({ type: 'contact.created' })];
  const signedV1a = both.find((d) => d.headers['webhook-signature'].startsWith('v1a,'));
  assert.ok(signedV1a, both.map((d) => d.headers['webhook-signature']).join(' | '));
  assert.equal(signedV1a.data.id, signed.json.id);
  assert.deepEqual(both.map((d) => d.verified), [true, true]);
  // Gone again, so the schedule below is the v1 subscription's alone.
  assert.equal((await call('DELETE', `/public/v1/webhooks/${v1a.id}`, { key: owner })).status, 200);

  // One advance runs the whole schedule that falls inside it, in order (30 s, then 5 min): two
  // failures and the third attempt delivered. One stop per advance missed the third attempt.
  gh.webhooks.fail(2);
  const third = await call('POST', '/public/v1/contacts', { key: gh.project.keys.server, body: { name: 'Cy' } });
  const failedOnce = Date.now() + 10_000;
  while (!gh.webhooks.all().some((d) => d.answered === 500 && d.data.id === third.json.id) && Date.now() < failedOnce) {
    await new Promise((r) => setTimeout(r, 20));
  }
  await gh.clock.advance(30 * 60);
  const attempts = gh.webhooks.all().filter((d) => d.data.id === third.json.id);
  assert.deepEqual(attempts.map((d) => [d.attempt, d.answered]), [[1, 500], [2, 500], [3, 200]]);
});

test('only the sink is a private target the kit allows: another loopback receiver is refused', async () => {
  const other = createServer((req, res) => res.end('should never be called'));
  let calls = 0;
  other.on('request', () => calls++);
  await new Promise((r) => other.listen(0, '127.0.0.1', r));
  try {
    const url = `http://127.0.0.1:${other.address().port}/hook`;
    const res = await call('POST', '/public/v1/webhooks', { key: gh.project.keys.owner, body: { url, events: ['contact.created'] } });
    assert.equal(res.status, 422, res.text);
    assert.equal(calls, 0);
  } finally {
    other.close();
  }
});

test('reset leaves an empty state with a fresh project, the old keys refused at once, and the clock keeps its time', async () => {
  await call('POST', '/public/v1/contacts', { key: gh.project.keys.server, body: { name: 'Old' } });
  const old = gh.project.id;
  const oldKey = gh.project.keys.server;
  const clockBefore = gh.clock.now().getTime();
  await gh.reset();
  assert.notEqual(gh.project.id, old);
  // The previous test's key is 401 now (its guard still held its record: a write was a
  // retryable 503 until the record went stale, 10 minutes of the clock).
  const stale = await call('POST', '/public/v1/contacts', { key: oldKey, body: { name: 'Late' } });
  assert.equal(stale.status, 401, stale.text);
  assert.equal(stale.json.error.code, 'INVALID_API_KEY');
  assert.ok(gh.clock.now().getTime() >= clockBefore);
  assert.deepEqual(gh.webhooks.all(), []);
  const list = await call('GET', '/public/v1/contacts', { key: gh.project.keys.server });
  assert.equal(list.status, 200, list.text);
  assert.deepEqual(list.json.data, []);
});

test('the clock never moves back', async () => {
  await assert.rejects(gh.clock.set(new Date(Date.now() - 60_000)), RangeError);
  await assert.rejects(gh.clock.advance(-1), RangeError);
});

test('two kits run side by side, each with its own port, state and settings (SERVER_TIMING=off)', async () => {
  const other = await Gatehouse.start({ plans: { trial: { per_minute: 2, monthly_quota: 100 } }, vars: { SERVER_TIMING: 'off' } });
  try {
    assert.notEqual(other.url, gh.url);
    const me = (kit) => fetch(`${kit.url}/public/v1/me`, { headers: { authorization: `Bearer ${kit.project.keys.server}` } });
    const statuses = [];
    for (let i = 0; i < 3; i++) statuses.push((await me(other)).status);
    assert.deepEqual(statuses, [200, 200, 429]);
    const answer = await me(gh);
    assert.equal(answer.status, 200);
    assert.match(answer.headers.get('server-timing') ?? '', /^gateway;dur=\d+/, 'on by default');
    assert.equal((await me(other)).headers.get('server-timing'), null, 'SERVER_TIMING=off leaves it out');
    // Each kit's keys are its own.
    const foreign = await fetch(`${gh.url}/public/v1/me`, { headers: { authorization: `Bearer ${other.project.keys.server}` } });
    assert.equal(foreign.status, 401);
  } finally {
    await other.stop();
  }
});

test('migration files split into statements at semicolons outside quotes and comments', () => {
  const sql = "-- a comment; not a statement\nCREATE TABLE t (a TEXT DEFAULT 'x;y');\n\nINSERT INTO t VALUES ('it''s'); -- trailing\n";
  assert.deepEqual(statements(sql), ["CREATE TABLE t (a TEXT DEFAULT 'x;y')", "INSERT INTO t VALUES ('it''s')"]);
});
