// SPEC §20 end to end: limits beyond one key's object — the project's quota shared by its keys
// (credit leases from the project's authority to each key's guard), several windows at once.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { assertError, call, createKey, createProject, freshWindow, monthSeconds, sleep } from './harness.mjs';

const statusCounts = (responses) => responses.reduce((n, r) => ({ ...n, [r.status]: (n[r.status] ?? 0) + 1 }), {});

test('two keys share the project\'s monthly quota exactly, and a third key adds nothing', async () => {
  // The test PLANS give "shared" 10 requests a month, for the whole project.
  const { owner } = await createProject('shared quota', { plan: 'shared' });
  const a = await createKey(owner.key, 'server');
  const b = await createKey(owner.key, 'server');
  const c = await createKey(owner.key, 'server');
  // The owner's three createKey calls took 3: 7 are left for everyone, however many keys ask.
  const burst = await Promise.all(Array.from({ length: 20 }, (_, i) => call('GET', '/public/v1/me', { key: (i % 2 ? a : b).key })));
  assert.deepEqual(statusCounts(burst), { 200: 7, 429: 13 }, burst.map((r) => r.status).join());
  for (const refused of burst.filter((r) => r.status === 429)) {
    const e = assertError(refused, 429, 'QUOTA_EXCEEDED');
    assert.equal(e.retryable, false);
  }
  // A key minted before the burst, never used: its first request finds the quota used up.
  assertError(await call('GET', '/public/v1/me', { key: c.key }), 429, 'QUOTA_EXCEEDED');
  assertError(await call('GET', '/public/v1/me', { key: owner.key }), 429, 'QUOTA_EXCEEDED');
});

// SPEC §23 (found by an adversarial run: a quota of 40 over two keys used in turn admitted 39): a
// level refuses only when no credit is left anywhere. Key a is used until its guard holds a grant
// it has not used all of; then key b asks until refused: the project's authority asks a's credits
// back before it refuses b, so the keys together get every request of the quota.
test('a quota is used to the last request even while another key\'s guard holds credits of it', async () => {
  const { owner } = await createProject('parked credits', { plan: 'shared' });
  const a = await createKey(owner.key, 'server');
  const b = await createKey(owner.key, 'server');
  // The owner's two createKey calls took 2: 8 are left.
  const statuses = [];
  for (let i = 0; i < 3; i++) statuses.push((await call('GET', '/public/v1/me', { key: a.key })).status);
  for (let i = 0; i < 10; i++) statuses.push((await call('GET', '/public/v1/me', { key: b.key })).status);
  assert.deepEqual(statusCounts(statuses.map((status) => ({ status }))), { 200: 8, 429: 5 }, statuses.join());
  assert.deepEqual(statuses.slice(0, 8), Array(8).fill(200), statuses.join());
});

test('per_second and per_minute together under 20 parallel requests: each window exact, the 429 names it', async () => {
  // The test PLANS give "windows" 5 a second and 8 a minute per key.
  const { owner } = await createProject('two windows', { plan: 'windows' });
  const key = await createKey(owner.key, 'server');
  await freshWindow(20);
  // Start at the beginning of a second, so the first burst most likely falls in one.
  await sleep(1000 - (Date.now() % 1000));
  const first = await Promise.all(Array.from({ length: 20 }, () => call('GET', '/public/v1/me', { key: key.key })));
  const passedFirst = first.filter((r) => r.status === 200).length;
  // Five a second; a burst that straddled a second's end may pass up to the minute's 8.
  assert.ok(passedFirst >= 5 && passedFirst <= 8, `first burst passed ${passedFirst}`);
  const windowsNamed = new Set(first.filter((r) => r.status === 429).map((r) => assertError(r, 429, 'RATE_LIMIT_EXCEEDED').details.window));
  assert.ok([...windowsNamed].every((w) => w === 'second' || w === 'minute'), [...windowsNamed].join());
  const limited = first.find((r) => r.status === 429);
  assert.equal(limited.headers.get('ratelimit-policy'), `"second";q=5;w=1, "minute";q=8;w=60, "month";q=100000;w=${monthSeconds()}`);
  await sleep(1100);
  const second = await Promise.all(Array.from({ length: 20 }, () => call('GET', '/public/v1/me', { key: key.key })));
  const passed = passedFirst + second.filter((r) => r.status === 200).length;
  assert.equal(passed, 8, 'the minute admits exactly 8 over both bursts');
  const last = second.filter((r) => r.status === 429).at(-1);
  const e = assertError(last, 429, 'RATE_LIMIT_EXCEEDED');
  assert.equal(e.details.window, 'minute');
  assert.match(e.message, /8 requests per minute/);
  assert.equal(last.headers.get('x-ratelimit-limit'), '8', 'the headers advertise the window that refused');
  assert.equal(last.headers.get('x-ratelimit-remaining'), '0');
  assert.match(last.headers.get('ratelimit'), /^"minute";r=0;t=\d+$/);
  const retryAfter = Number(last.headers.get('retry-after'));
  assert.ok(retryAfter >= 1 && retryAfter <= 60, `Retry-After ${retryAfter}`);
});

test('/me lists every window and advertises the one closest to refusing', async () => {
  const { owner } = await createProject('me windows', { plan: 'windows' });
  const key = await createKey(owner.key, 'server');
  await freshWindow(10);
  await sleep(1000 - (Date.now() % 1000));
  const me = await call('GET', '/public/v1/me', { key: key.key });
  assert.equal(me.status, 200, me.text);
  const { rate_limit } = me.body;
  assert.deepEqual(rate_limit.windows.map((w) => [w.window, w.limit, w.remaining]), [['second', 5, 4], ['minute', 8, 7]]);
  // 4 left of the second, 7 of the minute: the second is closest to refusing.
  assert.deepEqual([rate_limit.window, rate_limit.limit, rate_limit.remaining], ['second', 5, 4]);
  assert.deepEqual([me.headers.get('x-ratelimit-limit'), me.headers.get('x-ratelimit-remaining')], ['5', '4']);
});

test('two keys of an identity share its limit exactly; its 429 names the window', async () => {
  const { owner } = await createProject('identity limits', { plan: 'business' });
  const created = await call('POST', '/public/v1/identities', {
    key: owner.key, body: { external_id: `customer-${Date.now()}`, limits: { per_minute: 10 } },
  });
  assert.equal(created.status, 201, created.text);
  const identity = created.body;
  const a = await createKey(owner.key, 'server', { identity_id: identity.id });
  const b = await createKey(owner.key, 'server', { identity_id: identity.id });
  const loner = await createKey(owner.key, 'server');
  await freshWindow(20);
  // 15 each at once: the identity's 10 a minute is shared, exactly, whichever key asks.
  const burst = await Promise.all(Array.from({ length: 30 }, (_, i) => call('GET', '/public/v1/me', { key: (i % 2 ? a : b).key })));
  assert.deepEqual(statusCounts(burst), { 200: 10, 429: 20 }, burst.map((r) => r.status).join());
  const e = assertError(burst.find((r) => r.status === 429), 429, 'RATE_LIMIT_EXCEEDED');
  assert.equal(e.details.window, 'minute');
  // A key outside the identity runs on its plan alone.
  assert.equal((await call('GET', '/public/v1/me', { key: loner.key })).status, 200);
});

test('an identity\'s monthly quota is shared by its keys, within the project\'s', async () => {
  const { owner } = await createProject('identity quota', { plan: 'business' });
  const created = await call('POST', '/public/v1/identities', {
    key: owner.key, body: { external_id: `metered-${Date.now()}`, limits: { monthly_quota: 6 } },
  });
  assert.equal(created.status, 201, created.text);
  const a = await createKey(owner.key, 'server', { identity_id: created.body.id });
  const b = await createKey(owner.key, 'server', { identity_id: created.body.id });
  const burst = await Promise.all(Array.from({ length: 12 }, (_, i) => call('GET', '/public/v1/me', { key: (i % 2 ? a : b).key })));
  assert.deepEqual(statusCounts(burst), { 200: 6, 429: 6 }, burst.map((r) => r.status).join());
  const e = assertError(burst.find((r) => r.status === 429), 429, 'QUOTA_EXCEEDED');
  assert.equal(e.retryable, false);
  // The owner's own key is not in the identity: it goes on.
  assert.equal((await call('GET', '/public/v1/me', { key: owner.key })).status, 200);
});
