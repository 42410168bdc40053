// SPEC §4 end to end: the per-key window in the KeyGuard Durable Object, its headers, overrides,
// quotas, the per-address limit on failed authentication, and the hot-path budget of SPEC §12.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  ADMIN_TOKEN, assertError, call, createKey, createProject, freshWindow, monthSeconds, randomIp, sleep, workerLog,
} from './harness.mjs';

function rateHeaders(res) {
  const h = (name) => res.headers.get(name);
  return {
    limit: Number(h('x-ratelimit-limit')),
    remaining: Number(h('x-ratelimit-remaining')),
    reset: Number(h('x-ratelimit-reset')),
    policy: h('ratelimit-policy'),
    rate: h('ratelimit'),
  };
}

test('a trial key counts down 29…0, then the 31st request is 429 with Retry-After', async () => {
  const { owner } = await createProject();
  const key = await createKey(owner.key, 'server');
  const other = await createKey(owner.key, 'server');
  await freshWindow();
  const seen = [];
  for (let i = 0; i < 30; i++) {
    const res = await call('GET', '/public/v1/me', { key: key.key });
    assert.equal(res.status, 200, res.text);
    seen.push(rateHeaders(res));
  }
  assert.deepEqual(seen.map((h) => h.remaining), Array.from({ length: 30 }, (_, i) => 29 - i));
  const first = seen[0];
  assert.equal(first.limit, 30);
  assert.equal(first.reset % 60, 0, 'X-RateLimit-Reset is a minute boundary');
  assert.ok(first.reset * 1000 > Date.now() && first.reset * 1000 <= Date.now() + 60_000);
  // The trial plan of tests/e2e/gateway-vars.json: 30 a minute, 200 a month.
  assert.equal(first.policy, `"minute";q=30;w=60, "month";q=200;w=${monthSeconds()}`);
  assert.match(first.rate, /^"minute";r=29;t=([1-9]|[1-5]\d|60)$/);

  const denied = await call('GET', '/public/v1/me', { key: key.key });
  const e = assertError(denied, 429, 'RATE_LIMIT_EXCEEDED');
  assert.equal(e.retryable, true);
  const retryAfter = Number(denied.headers.get('retry-after'));
  assert.ok(retryAfter >= 1 && retryAfter <= 60, `Retry-After ${retryAfter}`);
  const h = rateHeaders(denied);
  assert.equal(h.remaining, 0);
  assert.equal(h.reset, first.reset);
  assert.equal(h.rate, `"minute";r=0;t=${retryAfter}`);
  // The details say the same as the headers, for a caller whose client kept only the error.
  assert.deepEqual(e.details, { window: 'minute', limit: 30, remaining: 0, reset: first.reset });

  // A refused request does not consume: still refused, still 0 left, same window.
  assert.equal((await call('GET', '/public/v1/me', { key: key.key })).status, 429);
  // Another key of the same project has its own window.
  const res = await call('GET', '/public/v1/me', { key: other.key });
  assert.equal(res.status, 200);
  assert.equal(rateHeaders(res).remaining, 29);
});

test('every authenticated response carries the rate headers, errors included', async () => {
  const { owner } = await createProject();
  const server = await createKey(owner.key, 'server');
  const responses = [
    await call('GET', '/public/v1/keys', { key: server.key }), // 403
    await call('POST', '/public/v1/keys', { key: owner.key, body: '{' }), // 400
    await call('DELETE', '/public/v1/keys/key_nope', { key: owner.key }), // 404
  ];
  assert.deepEqual(responses.map((r) => r.status), [403, 400, 404]);
  for (const res of responses) {
    const h = rateHeaders(res);
    assert.ok(h.limit > 0 && h.reset > 0 && h.policy && h.rate, JSON.stringify(h));
  }
  // Unauthenticated answers have none.
  const anonymous = await call('GET', '/public/v1/me');
  assert.equal(anonymous.headers.get('x-ratelimit-limit'), null);
});

test('100 parallel requests against a 30/min key: exactly 30 pass and 70 get 429', async () => {
  const { owner } = await createProject();
  const key = await createKey(owner.key, 'server');
  await freshWindow(20);
  const results = await Promise.all(
    Array.from({ length: 100 }, () => call('GET', '/public/v1/me', { key: key.key })),
  );
  const statuses = results.map((r) => r.status);
  assert.equal(statuses.filter((s) => s === 200).length, 30, statuses.join(','));
  assert.equal(statuses.filter((s) => s === 429).length, 70);
  const remaining = results.filter((r) => r.status === 200).map((r) => rateHeaders(r).remaining).sort((a, b) => a - b);
  assert.deepEqual(remaining, Array.from({ length: 30 }, (_, i) => i), 'each slot handed out once');
});

test('a per-key override set with PATCH applies to the next request; null restores the plan', async () => {
  const { owner } = await createProject();
  const key = await createKey(owner.key, 'server');
  await freshWindow();
  assert.equal(rateHeaders(await call('GET', '/public/v1/me', { key: key.key })).limit, 30);

  const patched = await call('PATCH', `/public/v1/keys/${key.id}`, { key: owner.key, body: { rate_limit_per_minute: 5 } });
  assert.equal(patched.status, 200, patched.text);
  assert.equal(patched.body.rate_limit_per_minute, 5);
  assert.equal(patched.body.name, key.name, 'fields left out keep their value');

  const statuses = [];
  for (let i = 0; i < 5; i++) {
    const res = await call('GET', '/public/v1/me', { key: key.key });
    statuses.push(res.status);
    assert.equal(rateHeaders(res).limit, 5);
  }
  // One request was made under the plan limit in this window already: 4 more pass, then 429.
  assert.deepEqual(statuses, [200, 200, 200, 200, 429]);

  const cleared = await call('PATCH', `/public/v1/keys/${key.id}`, { key: owner.key, body: { rate_limit_per_minute: null } });
  assert.equal(cleared.body.rate_limit_per_minute, null);
  const back = await call('GET', '/public/v1/me', { key: key.key });
  assert.equal(back.status, 200);
  assert.deepEqual([rateHeaders(back).limit, rateHeaders(back).remaining], [30, 24]);

  assertError(await call('PATCH', `/public/v1/keys/${key.id}`, { key: owner.key, body: { rate_limit_per_minute: 0 } }), 400, 'VALIDATION_ERROR');
  // Lower, never higher than the plan (trial: 30 in the test PLANS), and never another plan.
  const raised = await call('PATCH', `/public/v1/keys/${key.id}`, { key: owner.key, body: { rate_limit_per_minute: 31 } });
  assert.equal(assertError(raised, 403, 'FORBIDDEN').details.plan_per_minute, 30);
  assertError(await call('PATCH', `/public/v1/keys/${key.id}`, { key: owner.key, body: { plan: 'business' } }), 403, 'FORBIDDEN');
  assert.equal((await call('PATCH', `/public/v1/keys/${key.id}`, { key: owner.key, body: { plan: 'trial', rate_limit_per_minute: 30 } })).status, 200);
  assertError(await call('PATCH', '/public/v1/keys/key_nope', { key: owner.key, body: { name: 'x' } }), 404, 'NOT_FOUND');
});

test('/me reports the window and the monthly quota', async () => {
  const { owner } = await createProject('me', { plan: 'business' });
  const key = await createKey(owner.key, 'browser');
  await freshWindow();
  await call('GET', '/public/v1/me', { key: key.key });
  const me = await call('GET', '/public/v1/me', { key: key.key });
  assert.equal(me.status, 200, me.text);
  const { rate_limit, quota } = me.body;
  assert.equal(rate_limit.limit, 2000);
  assert.equal(rate_limit.remaining, 1998);
  assert.equal(Date.parse(rate_limit.reset) / 1000, Number(me.headers.get('x-ratelimit-reset')));
  // The quota is the project's (SPEC §20): the owner's createKey and these two, and the one
  // credit the key holds of its last grant (a key's guard counts what it holds as used).
  assert.equal(quota.used, 3);
  assert.equal(quota.limit, 10_000_000);
  assert.deepEqual(rate_limit.windows.map((w) => [w.window, w.limit, w.remaining]), [['minute', 2000, 1998]]);
  assert.equal(rate_limit.window, 'minute');
  const resets = new Date(quota.resets_at);
  assert.equal(resets.getUTCDate(), 1);
  assert.equal(resets.getUTCHours(), 0);
  assert.ok(resets > new Date());
});

test('a 403 takes nothing of the window or the monthly quota (SPEC §4, §19)', async () => {
  const { owner } = await createProject();
  const browser = await createKey(owner.key, 'browser');
  const cicd = await createKey(owner.key, 'cicd');
  await freshWindow(20);
  for (const key of [browser, cicd]) {
    const before = await call('GET', '/public/v1/me', { key: key.key });
    assert.equal(before.status, 200, before.text);
    assert.equal(rateHeaders(before).remaining, 29);
    // The resource API is for server and owner keys: each call is 403 and counts for nothing,
    // with an Idempotency-Key too, and still carries the window as it stands.
    for (let i = 0; i < 6; i++) {
      const idem = i % 2 ? `forbidden-${crypto.randomUUID()}` : undefined;
      const refused = i % 3 === 2
        ? await call('POST', '/public/v1/contacts', { key: key.key, body: { name: 'Ada' }, idem })
        : await call('GET', '/public/v1/contacts', { key: key.key, idem });
      const e = assertError(refused, 403, 'FORBIDDEN');
      assert.equal(e.details.key_type, key.type);
      assert.equal(rateHeaders(refused).remaining, 29, `${key.type} call ${i}`);
    }
    const after = await call('GET', '/public/v1/me', { key: key.key });
    assert.equal(after.status, 200, after.text);
    // The project's quota moved by this key's second /me alone.
    assert.deepEqual([rateHeaders(after).remaining, after.body.quota.used - before.body.quota.used], [28, 1], `${key.type}: ${after.text}`);
  }
});

test('a used-up monthly quota is 429 QUOTA_EXCEEDED, not retryable, with details.resets_at', async () => {
  const { owner } = await createProject('tiny', { plan: 'tiny' });
  // 3 a month in the test PLANS, for the project (SPEC §20): the owner's createKey takes one.
  const key = await createKey(owner.key, 'server');
  for (let i = 0; i < 2; i++) assert.equal((await call('GET', '/public/v1/me', { key: key.key })).status, 200);
  const res = await call('GET', '/public/v1/me', { key: key.key });
  const e = assertError(res, 429, 'QUOTA_EXCEEDED');
  assert.equal(e.retryable, false);
  assert.equal(res.headers.get('retry-after'), null);
  assert.ok(Date.parse(e.details.resets_at) > Date.now());
  assert.ok(res.headers.get('x-ratelimit-limit'), 'rate headers on the quota refusal too');
});

test('the operator moves a project to trial: its keys run under trial at once, and its quota refusal is TRIAL_QUOTA_EXCEEDED', async () => {
  const { projectId, owner } = await createProject('downgraded', { plan: 'business' });
  // The test PLANS give trial 200 requests a month: use them on business, where the rate allows it.
  const key = await createKey(owner.key, 'server');
  for (let batch = 0; batch < 4; batch++) {
    const statuses = await Promise.all(Array.from({ length: 50 }, () => call('GET', '/public/v1/me', { key: key.key })));
    assert.ok(statuses.every((r) => r.status === 200), statuses.map((r) => r.status).join());
  }
  const admin = { authorization: `Bearer ${ADMIN_TOKEN}` };
  const path = `/admin/v1/projects/${projectId}`;
  assertError(await call('PATCH', path, { body: { plan: 'trial' } }), 401, 'INVALID_API_KEY');
  assertError(await call('PATCH', path, { body: { plan: 'trial' }, key: owner.key }), 401, 'INVALID_API_KEY');
  assert.equal(assertError(await call('PATCH', path, { body: { plan: 'platinum' }, headers: admin }), 422, 'VALIDATION_ERROR').details.field, 'plan');
  assertError(await call('PATCH', '/admin/v1/projects/prj_missing', { body: { plan: 'trial' }, headers: admin }), 404, 'NOT_FOUND');
  const moved = await call('PATCH', path, { body: { plan: 'trial' }, headers: admin });
  assert.equal(moved.status, 200, moved.text);
  assert.deepEqual(moved.body, { project_id: projectId, name: 'downgraded', plan: 'trial', keys: 2, keys_told: 2 });
  // The quota is the project's (SPEC §20): the owner key finds it used up too.
  assertError(await call('GET', '/public/v1/keys', { key: owner.key }), 429, 'TRIAL_QUOTA_EXCEEDED');

  // The batches made the key hot (SPEC §20): its isolate may admit from the credits it leased
  // under the old plan for up to a second.
  await sleep(1_100);
  const refused = await call('GET', '/public/v1/me', { key: key.key });
  const e = assertError(refused, 429, 'TRIAL_QUOTA_EXCEEDED');
  assert.equal(refused.headers.get('x-ratelimit-limit'), '30', 'the trial rate applies from the next request');
  assert.equal(e.retryable, false);
  assert.ok(e.details.resets_at);
});

test('failed authentication is limited per client address: the 21st failure in a minute is 429', async () => {
  const { owner } = await createProject();
  const unseen = await createKey(owner.key, 'server');
  const ip = randomIp();
  const headers = { 'cf-connecting-ip': ip };
  await freshWindow();
  // A key in use from the address before it goes over its limit.
  assert.equal((await call('GET', '/public/v1/me', { key: owner.key, headers })).status, 200);
  const bad = 'gh_s_' + 'B'.repeat(40);
  for (let i = 0; i < 20; i++) {
    const res = await call('GET', '/public/v1/me', { key: i % 2 ? bad : 'garbage', headers });
    assertError(res, 401, 'INVALID_API_KEY');
  }
  const limited = await call('GET', '/public/v1/me', { key: bad, headers });
  assertError(limited, 429, 'RATE_LIMIT_EXCEEDED');
  const retryAfter = Number(limited.headers.get('retry-after'));
  assert.ok(retryAfter >= 1 && retryAfter <= 60);
  // Another address is not affected, and the key in use from the limited one still works; a
  // valid key not seen from it recently waits for the window like an unknown one (docs/api/rate-limits.md, "Abuse").
  assertError(await call('GET', '/public/v1/me', { key: bad, headers: { 'cf-connecting-ip': randomIp() } }), 401, 'INVALID_API_KEY');
  assert.equal((await call('GET', '/public/v1/me', { key: owner.key, headers })).status, 200);
  assertError(await call('GET', '/public/v1/me', { key: unseen.key, headers }), 429, 'RATE_LIMIT_EXCEEDED');
});

test('hot path: a steady /me makes one Durable Object round trip, no D1 query, no KV operation', async () => {
  const { owner } = await createProject();
  const key = await createKey(owner.key, 'server');
  // The guard's own load of the record is counted against the request that caused it.
  const first = (await call('GET', '/public/v1/me', { key: key.key })).headers.get('x-request-id');
  const ids = [];
  for (let i = 0; i < 5; i++) ids.push((await call('GET', '/public/v1/me', { key: key.key })).headers.get('x-request-id'));
  await sleep(300); // let wrangler flush its log
  const log = await workerLog();
  const load = log.find((l) => l.request_id === first);
  assert.deepEqual([load?.durable_object_calls, load?.d1_queries], [1, 1], JSON.stringify(load));
  const lines = log.filter((l) => ids.includes(l.request_id));
  assert.equal(lines.length, 5, 'one log line per request');
  for (const l of lines) {
    assert.deepEqual([l.status, l.durable_object_calls, l.d1_queries, l.kv_operations], [200, 1, 0, 0], JSON.stringify(l));
  }
});
