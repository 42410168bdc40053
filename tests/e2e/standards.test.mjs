// SPEC §25 end to end: the standards integrators' tools speak. Problem details (RFC 9457) when a
// client asks for them — the §3 envelope otherwise —, the monthly quota as a RateLimit policy,
// Idempotency-Key as any sf-string (what a browser adds), and the CORS a page needs for both.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { assertError, call, createKey, createProject, freshWindow, idemKey, monthSeconds } from './harness.mjs';

const PROBLEM = 'application/problem+json';

/** Asserts an RFC 9457 document of `status` and `code` and answers it. */
function assertProblem(res, status, code) {
  assert.equal(res.status, status, res.text);
  assert.equal(res.headers.get('content-type'), PROBLEM);
  const p = res.body;
  const id = res.headers.get('x-request-id');
  assert.deepEqual([p.status, p.code, p.request_id, p.instance], [status, code, id, `urn:uuid:${id}`], res.text);
  for (const member of ['type', 'title', 'detail']) assert.equal(typeof p[member], 'string', member);
  assert.equal(typeof p.retryable, 'boolean');
  assert.equal(typeof p.details, 'object');
  assert.equal(p.error, undefined, 'not the envelope');
  return p;
}

test('errors are problem details when Accept asks for them, the envelope otherwise; the type of each resolves to its section', async () => {
  const { owner } = await createProject('problem details');
  const server = await createKey(owner.key, 'server');
  const problem = { accept: `application/json;q=0.5, ${PROBLEM}` };
  // 404: an unknown contact.
  const missing = assertProblem(await call('GET', '/public/v1/contacts/ct_nope', { key: server.key, headers: problem }), 404, 'NOT_FOUND');
  assert.match(missing.type, /^http:\/\/127\.0\.0\.1:\d+\/errors#not-found$/);
  const page = await fetch(missing.type);
  assert.equal(page.status, 200);
  assert.match(page.headers.get('content-type'), /^text\/html/);
  assert.match(await page.text(), /<section id="not-found">/);
  // 422: a message to a contact that does not exist, the field named in details.
  const bad = assertProblem(await call('POST', '/public/v1/messages', { key: server.key, body: { contact_id: 'ct_nope', text: 'hi' }, headers: problem }), 422, 'VALIDATION_ERROR');
  assert.ok(bad.type.endsWith('/errors#validation-error'), bad.type);
  assert.equal(bad.retryable, false);
  // The same errors without the header (or with one that prefers JSON): the §3 envelope, unchanged.
  for (const headers of [{}, { accept: '*/*' }, { accept: `application/json, ${PROBLEM};q=0.9` }, { accept: 'text/html' }]) {
    assertError(await call('GET', '/public/v1/contacts/ct_nope', { key: server.key, headers }), 404, 'NOT_FOUND');
  }
  // A 401 before any key is known is a problem too.
  assertProblem(await call('GET', '/public/v1/me', { key: 'gh_s_nope', headers: { accept: PROBLEM } }), 401, 'INVALID_API_KEY');
});

test("a window's 429 is the RateLimit draft's quota-exceeded with violated-policies; the month is a policy", async () => {
  const { owner } = await createProject('quota exceeded');
  const key = await createKey(owner.key, 'server', { rate_limit_per_minute: 2 });
  await freshWindow();
  const seen = [];
  for (let i = 0; i < 3; i++) seen.push(await call('GET', '/public/v1/me', { key: key.key, headers: { accept: PROBLEM } }));
  assert.deepEqual(seen.map((r) => r.status), [200, 200, 429]);
  const p = assertProblem(seen[2], 429, 'RATE_LIMIT_EXCEEDED');
  assert.equal(p.type, 'https://iana.org/assignments/http-problem-types#quota-exceeded');
  assert.deepEqual(p['violated-policies'], ['minute']);
  assert.equal(p.retryable, true);
  assert.ok(Number(seen[2].headers.get('retry-after')) >= 1);
  // Every policy violated is one RateLimit-Policy lists; the month is listed with its seconds.
  const policy = seen[2].headers.get('ratelimit-policy');
  // The trial plan of tests/e2e/gateway-vars.json: a quota of 200 a month.
  assert.equal(policy, `"minute";q=2;w=60, "month";q=200;w=${monthSeconds()}`);
  for (const name of p['violated-policies']) assert.ok(policy.includes(`"${name}";`), policy);
  assert.match(seen[0].headers.get('ratelimit'), /^"minute";r=1;t=\d+$/);
});

test('Idempotency-Key may be any sf-string, as a browser sends it; the CORS preflight allows it and trace context', async () => {
  const { owner } = await createProject('sf-string keys');
  const server = await createKey(owner.key, 'server');
  const sent = `"browser key ${crypto.randomUUID()}, with \\"quotes\\""`;
  const first = await call('POST', '/public/v1/contacts', { key: server.key, body: { name: 'Ada' }, idem: sent });
  assert.equal(first.status, 201, first.text);
  const again = await call('POST', '/public/v1/contacts', { key: server.key, body: { name: 'Ada' }, idem: sent });
  assert.equal(again.status, 201, again.text);
  assert.equal(again.headers.get('idempotent-replayed'), '1');
  assert.equal(again.body.id, first.body.id);
  // Sent twice (the runtime joins them with ", "), or unterminated: 422 naming the header.
  for (const bad of [`"a", "b"`, '"open', idemKey() + ', ' + idemKey()]) {
    const e = assertError(await call('POST', '/public/v1/contacts', { key: server.key, body: { name: 'x' }, idem: bad }), 422, 'VALIDATION_ERROR');
    assert.equal(e.details.header, 'Idempotency-Key');
  }
  const preflight = await call('OPTIONS', '/v1/track', {
    headers: { origin: 'https://shop.example', 'access-control-request-method': 'POST', 'access-control-request-headers': 'authorization, content-type, idempotency-key, traceparent, tracestate' },
  });
  assert.equal(preflight.status, 204);
  const allowed = preflight.headers.get('access-control-allow-headers').split(/,\s*/);
  for (const name of ['authorization', 'content-type', 'idempotency-key', 'traceparent', 'tracestate']) assert.ok(allowed.includes(name), allowed.join());
  assert.ok(preflight.headers.get('access-control-expose-headers').split(/,\s*/).includes('server-timing'));
});

test('every answer carries Server-Timing: the gateway\'s own time, the guard\'s round trip when one was made, the origin\'s on a proxied route (SPEC §16)', async () => {
  const member = (res, name) => {
    const value = res.headers.get('server-timing') ?? '';
    const found = new RegExp(`(?:^|, )${name};dur=(\\d+)(?:,|$)`).exec(value);
    return found ? Number(found[1]) : undefined;
  };
  const health = await call('GET', '/health');
  assert.match(health.headers.get('server-timing') ?? '', /^gateway;dur=\d+/, 'a public route');
  const { owner } = await createProject('timing', { plan: 'business' });
  const server = await createKey(owner.key, 'server');
  // A new key's first request asks its guard.
  const first = await call('GET', '/public/v1/me', { key: server.key });
  assert.equal(first.status, 200);
  assert.ok(member(first, 'gateway') !== undefined && member(first, 'guard') !== undefined, first.headers.get('server-timing'));
  assert.equal(member(first, 'origin'), undefined, 'no origin on a built-in route');
  // An error answer too, and a proxied route's (here an origin that refuses connections: 502).
  const refused = await call('GET', '/public/v1/me', { key: 'gh_s_' + 'x'.repeat(40) });
  assert.equal(refused.status, 401);
  assert.notEqual(member(refused, 'gateway'), undefined);
  const proxied = await call('GET', '/e2e/down/timing', { key: server.key });
  assert.equal(proxied.status, 502);
  assert.notEqual(member(proxied, 'origin'), undefined, proxied.headers.get('server-timing'));
  const total = ['gateway', 'guard', 'origin'].reduce((sum, name) => sum + (member(proxied, name) ?? 0), 0);
  assert.ok(total <= 2_500, `the parts add up to the answer's time (${proxied.headers.get('server-timing')})`);
  // A page may read it (CORS), on the ingestion routes.
  const preflight = await call('OPTIONS', '/v1/track', { headers: { origin: 'https://shop.example', 'access-control-request-method': 'POST' } });
  assert.match(preflight.headers.get('access-control-expose-headers') ?? '', /server-timing/);
});
