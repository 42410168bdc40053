// SPEC §2 and §3 end to end: bootstrap, keys, authentication, scopes, request ids, error contract.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ADMIN_TOKEN, assertError, assertRequestId, call, createKey, createProject, eventually } from './harness.mjs';

test('admin bootstrap creates a project with an owner key shown once', async () => {
  const res = await call('POST', '/admin/v1/projects', {
    body: { name: 'Acme' },
    headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
  });
  assert.equal(res.status, 201, res.text);
  assertRequestId(res);
  const { project_id, owner_key } = res.body;
  assert.match(project_id, /^prj_[0-9a-z]{26}$/);
  assert.match(owner_key.id, /^key_[0-9a-z]{26}$/);
  assert.match(owner_key.key, /^gh_o_[0-9A-Za-z]{40}$/);
  assert.equal(owner_key.prefix, owner_key.key.slice(0, 12));

  const me = await call('GET', '/public/v1/me', { key: owner_key.key });
  assert.equal(me.status, 200, me.text);
  assert.equal(me.body.project_id, project_id);
});

test('wrong, missing or malformed ADMIN_TOKEN is 401 and creates nothing', async () => {
  for (const headers of [{ authorization: 'Bearer not-the-admin-token' }, {}, { authorization: ADMIN_TOKEN }]) {
    const res = await call('POST', '/admin/v1/projects', { body: { name: 'x' }, headers });
    assertError(res, 401, 'INVALID_API_KEY');
  }
});

test('bootstrap validates its input: malformed JSON and a missing name are 400', async () => {
  const headers = { authorization: `Bearer ${ADMIN_TOKEN}` };
  assertError(await call('POST', '/admin/v1/projects', { body: '{"name":', headers }), 400, 'VALIDATION_ERROR');
  assertError(await call('POST', '/admin/v1/projects', { body: {}, headers }), 400, 'VALIDATION_ERROR');
  assertError(await call('POST', '/admin/v1/projects', { body: { name: '  ' }, headers }), 400, 'VALIDATION_ERROR');
});

test('a key is shown once at creation; the list shows only its prefix', async () => {
  const { owner } = await createProject('keys', { plan: 'business' });
  const created = await createKey(owner.key, 'server', { name: 'backend', rate_limit_per_minute: 120 });
  assert.match(created.key, /^gh_s_[0-9A-Za-z]{40}$/);
  assert.equal(created.prefix, created.key.slice(0, 12));
  assert.deepEqual(
    { type: created.type, name: created.name, plan: created.plan, rate: created.rate_limit_per_minute, status: created.status },
    { type: 'server', name: 'backend', plan: 'business', rate: 120, status: 'active' },
  );
  assert.match(created.created_at, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);

  const list = await call('GET', '/public/v1/keys', { key: owner.key });
  assert.equal(list.status, 200, list.text);
  assert.equal(list.body.next_cursor, null);
  assert.equal(list.body.data.length, 2);
  assert.ok(!list.text.includes(created.key), 'the list must not contain a secret');
  assert.ok(!list.text.includes(owner.key), 'the list must not contain a secret');
  assert.ok(!list.text.includes('hash'), 'the list must not show key hashes');
  const listed = list.body.data.find((k) => k.id === created.id);
  assert.equal(listed.prefix, created.prefix);
  assert.equal(listed.key, undefined);
});

test('keys take their project\'s plan (trial by default); owners cannot choose a plan; bad fields are refused', async () => {
  const { owner } = await createProject();
  const k = await createKey(owner.key, 'browser', { plan: 'trial' });
  assert.equal(k.plan, 'trial');
  assert.equal(k.rate_limit_per_minute, null);
  for (const plan of ['business', 'platinum']) {
    const res = await call('POST', '/public/v1/keys', { key: owner.key, body: { type: 'server', plan } });
    assert.deepEqual(assertError(res, 403, 'FORBIDDEN').details, { field: 'plan', plan: 'trial' });
  }
  assertError(await call('POST', '/public/v1/keys', { key: owner.key, body: { type: 'root' } }), 400, 'VALIDATION_ERROR');
  assertError(await call('POST', '/public/v1/keys', { key: owner.key, body: { type: 'server', rate_limit_per_minute: 0 } }), 400, 'VALIDATION_ERROR');
  assertError(await call('POST', '/public/v1/keys', { key: owner.key, body: { type: 'server', extra: 1 } }), 400, 'VALIDATION_ERROR');
  assertError(await call('POST', '/public/v1/keys', { key: owner.key, body: '{"type": "server"' }), 400, 'VALIDATION_ERROR');
});

test('listing pages with limit and cursor, newest first, each key exactly once', async () => {
  const { owner } = await createProject();
  const made = [];
  for (let i = 0; i < 5; i++) made.push((await createKey(owner.key, 'server', { name: `k${i}` })).id);
  const seen = [];
  let cursor = null;
  do {
    const q = cursor ? `?limit=2&cursor=${encodeURIComponent(cursor)}` : '?limit=2';
    const page = await call('GET', `/public/v1/keys${q}`, { key: owner.key });
    assert.equal(page.status, 200, page.text);
    assert.ok(page.body.data.length <= 2);
    seen.push(...page.body.data);
    cursor = page.body.next_cursor;
  } while (cursor);
  const ids = seen.map((k) => k.id);
  assert.equal(ids.length, 6);
  assert.deepEqual(new Set(ids), new Set([...made, owner.id]));
  const times = seen.map((k) => Date.parse(k.created_at));
  assert.deepEqual(times, [...times].sort((x, y) => y - x), 'newest first');
  assertError(await call('GET', '/public/v1/keys?limit=0', { key: owner.key }), 400, 'VALIDATION_ERROR');
  assertError(await call('GET', '/public/v1/keys?cursor=garbage!', { key: owner.key }), 400, 'VALIDATION_ERROR');
});

test('missing, malformed, unknown and revoked keys are 401 INVALID_API_KEY, not retryable', async () => {
  const { owner } = await createProject();
  const server = await createKey(owner.key, 'server');
  assert.equal((await call('GET', '/public/v1/me', { key: server.key })).status, 200);

  const unknown = 'gh_s_' + 'A'.repeat(40);
  const cases = [
    await call('GET', '/public/v1/me'),
    await call('GET', '/public/v1/me', { headers: { authorization: `Basic ${server.key}` } }),
    await call('GET', '/public/v1/me', { key: 'not-a-key' }),
    await call('GET', '/public/v1/me', { key: server.key.slice(0, -1) }),
    await call('GET', '/public/v1/me', { key: unknown }),
  ];
  for (const res of cases) assert.equal(assertError(res, 401, 'INVALID_API_KEY').retryable, false);

  const revoked = await call('DELETE', `/public/v1/keys/${server.id}`, { key: owner.key });
  assert.equal(revoked.status, 200, revoked.text);
  assert.equal(revoked.body.status, 'revoked');
  assert.ok(revoked.body.revoked_at);
  // Revocation applies at once: the very next request with that key is refused.
  assertError(await call('GET', '/public/v1/me', { key: server.key }), 401, 'INVALID_API_KEY');
  // Revoking again answers the same record; the list shows it revoked.
  const again = await call('DELETE', `/public/v1/keys/${server.id}`, { key: owner.key });
  assert.equal(again.status, 200);
  assert.equal(again.body.revoked_at, revoked.body.revoked_at);
  const list = await call('GET', '/public/v1/keys', { key: owner.key });
  assert.equal(list.body.data.find((k) => k.id === server.id).status, 'revoked');
});

test('scopes: only owner keys manage keys (403 FORBIDDEN); every type may read /me', async () => {
  const { owner } = await createProject();
  for (const type of ['server', 'browser', 'cicd']) {
    const k = await createKey(owner.key, type);
    const e = assertError(await call('GET', '/public/v1/keys', { key: k.key }), 403, 'FORBIDDEN');
    assert.equal(e.retryable, false);
    assertError(await call('POST', '/public/v1/keys', { key: k.key, body: { type: 'owner' } }), 403, 'FORBIDDEN');
    assert.equal((await call('GET', '/public/v1/me', { key: k.key })).status, 200);
  }
});

test('/me shows the key id, prefix, type, project and plan', async () => {
  const { projectId, owner } = await createProject('me', { plan: 'business' });
  const k = await createKey(owner.key, 'cicd');
  const me = await call('GET', '/public/v1/me', { key: k.key });
  assert.equal(me.status, 200, me.text);
  assert.deepEqual(
    { key_id: me.body.key_id, prefix: me.body.prefix, type: me.body.type, project_id: me.body.project_id, plan: me.body.plan },
    { key_id: k.id, prefix: k.key.slice(0, 12), type: 'cicd', project_id: projectId, plan: 'business' },
  );
  assert.ok(!me.text.includes(k.key));
});

test('keys of another project are 404; the last active owner key cannot be revoked', async () => {
  const a = await createProject('a');
  const b = await createProject('b');
  const bKey = await createKey(b.owner.key, 'server');
  assertError(await call('DELETE', `/public/v1/keys/${bKey.id}`, { key: a.owner.key }), 404, 'NOT_FOUND');
  assert.equal((await call('GET', '/public/v1/me', { key: bKey.key })).status, 200);
  assertError(await call('DELETE', '/public/v1/keys/key_doesnotexist', { key: a.owner.key }), 404, 'NOT_FOUND');

  assertError(await call('DELETE', `/public/v1/keys/${a.owner.id}`, { key: a.owner.key }), 422, 'VALIDATION_ERROR');
  const second = await createKey(a.owner.key, 'owner');
  const res = await call('DELETE', `/public/v1/keys/${a.owner.id}`, { key: second.key });
  assert.equal(res.status, 200, res.text);
  assertError(await call('GET', '/public/v1/keys', { key: a.owner.key }), 401, 'INVALID_API_KEY');
});

test('unknown routes are JSON 404, wrong methods JSON 405 with Allow', async () => {
  const nf = await call('GET', '/no/such/route');
  assertError(nf, 404, 'NOT_FOUND');
  const na = await call('PATCH', '/admin/v1/projects');
  assertError(na, 405, 'METHOD_NOT_ALLOWED');
  assert.equal(na.headers.get('allow'), 'POST');
  // A literal segment is its own resource: /contacts/bulk is not the contact "bulk".
  for (const method of ['GET', 'PUT']) {
    const bulk = await call(method, '/public/v1/contacts/bulk');
    assertError(bulk, 405, 'METHOD_NOT_ALLOWED');
    assert.equal(bulk.headers.get('allow'), 'POST');
  }
  const archives = await call('DELETE', '/public/v1/logs/archives');
  assertError(archives, 405, 'METHOD_NOT_ALLOWED');
  assert.equal(archives.headers.get('allow'), 'GET, HEAD');
});

test('bodies over the 1 MiB limit are 413 PAYLOAD_TOO_LARGE, logged under the key that sent them', async () => {
  const { owner } = await createProject();
  const big = JSON.stringify({ type: 'server', name: 'x'.repeat(1024 * 1024 + 10) });
  const res = await call('POST', '/public/v1/keys', { key: owner.key, body: big });
  assertError(res, 413, 'PAYLOAD_TOO_LARGE');
  // Its audit row names the key (it was logged with key_id null: the declared length was refused
  // before the key was known); a bad key with the same body is 401 first (SPEC §3 order).
  const id = res.headers.get('x-request-id');
  const row = await eventually(async () => {
    const one = await call('GET', `/public/v1/logs/${id}`, { key: owner.key });
    return one.status === 200 && one.body;
  });
  assert.ok(row, 'the 413 has a log row in its project');
  assert.equal(row.key_id, owner.id);
  assert.equal(row.status, 413);
  const stranger = await call('POST', '/public/v1/keys', { key: `${owner.key.slice(0, -4)}zzzz`, body: big });
  assertError(stranger, 401, 'INVALID_API_KEY');
});

test('every response, errors included, carries a distinct UUIDv7 X-Request-Id naming its millisecond', async () => {
  const { owner } = await createProject();
  const responses = await Promise.all([
    call('GET', '/health'),
    call('GET', '/public/v1/me', { key: owner.key }),
    call('GET', '/public/v1/me'),
    call('GET', '/nowhere'),
    call('PUT', '/public/v1/me', { key: owner.key }),
    call('POST', '/public/v1/keys', { key: owner.key, body: '{' }),
    ...Array.from({ length: 10 }, () => call('GET', '/public/v1/me', { key: owner.key })),
  ]);
  const ids = responses.map(assertRequestId);
  assert.equal(new Set(ids).size, ids.length);
  // The first 48 bits are the Unix milliseconds of the request (RFC 9562).
  const ms = ids.map((id) => parseInt(id.replace(/-/g, '').slice(0, 12), 16));
  assert.ok(ms.every((t) => Math.abs(t - Date.now()) < 60_000), ms.join());
});
