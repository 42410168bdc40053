// SPEC §20 identities, end to end over HTTP: the owner's CRUD of /public/v1/identities, a
// duplicate external_id (409 CONFLICT), bad limits refused with the field named, keys created
// with identity_id and limits, another project's identity (404, and 422 on a key), deletion
// detaching keys, and non-owner keys refused (403). The shared-limit behaviour is tested elsewhere.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { assertError, call, createKey, createProject, idemKey } from './harness.mjs';

const RFC3339 = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z$/;

test('an identity is created, read, listed, changed and deleted', async () => {
  const { owner } = await createProject('identities crud', { plan: 'business' });
  const key = owner.key;
  const created = await call('POST', '/public/v1/identities', {
    key, body: { external_id: 'cust_1', meta: { tier: 'gold' }, limits: { per_minute: 60, monthly_quota: 1000 } },
  });
  assert.equal(created.status, 201, created.text);
  const identity = created.body;
  assert.match(identity.id, /^idt_/);
  assert.deepEqual(Object.keys(identity).sort(), ['created_at', 'external_id', 'id', 'limits', 'meta', 'updated_at']);
  assert.equal(identity.external_id, 'cust_1');
  assert.deepEqual(identity.meta, { tier: 'gold' });
  assert.deepEqual(identity.limits, { per_minute: 60, monthly_quota: 1000 });
  assert.match(identity.created_at, RFC3339);
  assert.match(identity.updated_at, RFC3339);

  const read = await call('GET', `/public/v1/identities/${identity.id}`, { key });
  assert.equal(read.status, 200, read.text);
  assert.deepEqual(read.body, identity);

  const bare = await call('POST', '/public/v1/identities', { key, body: { external_id: 'cust_2' } });
  assert.equal(bare.status, 201, bare.text);
  assert.equal(bare.body.meta, null);
  assert.equal(bare.body.limits, null);

  // Paginated like the keys list: limit and cursor, newest first, every identity once.
  const first = await call('GET', '/public/v1/identities?limit=1', { key });
  assert.equal(first.status, 200, first.text);
  assert.equal(first.body.data.length, 1);
  assert.equal(typeof first.body.next_cursor, 'string');
  const second = await call('GET', `/public/v1/identities?limit=1&cursor=${encodeURIComponent(first.body.next_cursor)}`, { key });
  assert.equal(second.status, 200, second.text);
  assert.deepEqual([...first.body.data, ...second.body.data].map((i) => i.id).sort(), [identity.id, bare.body.id].sort());
  const all = await call('GET', '/public/v1/identities', { key });
  assert.equal(all.body.data.length, 2);
  assert.equal(all.body.next_cursor, null);
  assertError(await call('GET', '/public/v1/identities?limit=0', { key }), 400, 'VALIDATION_ERROR');
  assertError(await call('GET', '/public/v1/identities?page=2', { key }), 400, 'VALIDATION_ERROR');

  const changed = await call('PATCH', `/public/v1/identities/${identity.id}`, { key, body: { meta: null, limits: { per_second: 5 } } });
  assert.equal(changed.status, 200, changed.text);
  assert.equal(changed.body.meta, null);
  assert.deepEqual(changed.body.limits, { per_second: 5 });
  assert.equal(changed.body.external_id, 'cust_1');
  assert.equal(changed.body.created_at, identity.created_at);
  const cleared = await call('PATCH', `/public/v1/identities/${identity.id}`, { key, body: { limits: null } });
  assert.equal(cleared.status, 200, cleared.text);
  assert.equal(cleared.body.limits, null);

  const deleted = await call('DELETE', `/public/v1/identities/${identity.id}`, { key });
  assert.equal(deleted.status, 200, deleted.text);
  assert.deepEqual(deleted.body, { id: identity.id, status: 'deleted', keys_detached: 0 });
  assertError(await call('GET', `/public/v1/identities/${identity.id}`, { key }), 404, 'NOT_FOUND');
  assertError(await call('DELETE', `/public/v1/identities/${identity.id}`, { key }), 404, 'NOT_FOUND');
  assertError(await call('PATCH', `/public/v1/identities/${identity.id}`, { key, body: {} }), 404, 'NOT_FOUND');
});

test('a duplicate external_id is 409 CONFLICT; an Idempotency-Key replays the first creation', async () => {
  const { owner } = await createProject('identities dup', { plan: 'business' });
  const idem = idemKey();
  const first = await call('POST', '/public/v1/identities', { key: owner.key, idem, body: { external_id: 'same' } });
  assert.equal(first.status, 201, first.text);
  const replay = await call('POST', '/public/v1/identities', { key: owner.key, idem, body: { external_id: 'same' } });
  assert.equal(replay.status, 201, replay.text);
  assert.equal(replay.headers.get('idempotent-replayed'), '1');
  assert.deepEqual(replay.body, first.body);
  const dup = await call('POST', '/public/v1/identities', { key: owner.key, body: { external_id: 'same' } });
  const e = assertError(dup, 409, 'CONFLICT');
  assert.equal(e.retryable, false);
  assert.equal(e.details.field, 'external_id');
  assert.equal(e.details.id, first.body.id);
  // The same external_id in another project is another identity.
  const other = await createProject('identities dup other');
  assert.equal((await call('POST', '/public/v1/identities', { key: other.owner.key, body: { external_id: 'same' } })).status, 201);
});

test('bad input is 400 or 422 naming the field, never a 5xx', async () => {
  const { owner } = await createProject('identities bad', { plan: 'business' });
  const cases = [
    [{ external_id: 'a', limits: { per_minute: 0 } }, 400, 'limits.per_minute'],
    [{ external_id: 'a', limits: { per_minute: '10' } }, 400, 'limits.per_minute'],
    [{ external_id: 'a', limits: { per_minute: 1.5 } }, 400, 'limits.per_minute'],
    [{ external_id: 'a', limits: { per_week: 10 } }, 400, 'limits.per_week'],
    [{ external_id: 'a', limits: { per_hour: 4294967296 } }, 400, 'limits.per_hour'],
    [{ external_id: 'a', limits: 'lots' }, 400, 'limits'],
    [{ external_id: '' }, 400, 'external_id'],
    [{ external_id: 'x'.repeat(256) }, 400, 'external_id'],
    [{ external_id: 'a', meta: 'not an object' }, 400, 'meta'],
    [{ external_id: 'a', meta: { blob: 'y'.repeat(5000) } }, 422, 'meta'],
  ];
  for (const [body, status, field] of cases) {
    const res = await call('POST', '/public/v1/identities', { key: owner.key, body });
    const e = assertError(res, status, 'VALIDATION_ERROR');
    assert.equal(e.details.field, field, `${JSON.stringify(body).slice(0, 80)}: ${res.text}`);
  }
  assertError(await call('POST', '/public/v1/identities', { key: owner.key, body: { external_id: 'a', extra: 1 } }), 400, 'VALIDATION_ERROR');
  assertError(await call('POST', '/public/v1/identities', { key: owner.key, body: {} }), 400, 'VALIDATION_ERROR');
  assertError(await call('POST', '/public/v1/identities', { key: owner.key, body: '{"external_id":' }), 400, 'VALIDATION_ERROR');
  // 255 characters (not bytes) is the most.
  assert.equal((await call('POST', '/public/v1/identities', { key: owner.key, body: { external_id: 'é'.repeat(255) } })).status, 201);
  const { body: made } = await call('POST', '/public/v1/identities', { key: owner.key, body: { external_id: 'ok' } });
  const patch = await call('PATCH', `/public/v1/identities/${made.id}`, { key: owner.key, body: { limits: { per_day: -1 } } });
  assert.equal(assertError(patch, 400, 'VALIDATION_ERROR').details.field, 'limits.per_day');
  const empty = await call('GET', '/public/v1/identities', { key: owner.key });
  assert.equal(empty.body.data.length, 2, 'no refused identity was stored');
});

test('keys take identity_id and limits; another project\'s identity is 404 and 422 on a key', async () => {
  const { owner } = await createProject('identities keys', { plan: 'business' });
  const mine = await call('POST', '/public/v1/identities', { key: owner.key, body: { external_id: 'c1', limits: { per_minute: 100 } } });
  assert.equal(mine.status, 201, mine.text);
  const created = await createKey(owner.key, 'server', { identity_id: mine.body.id, limits: { per_minute: 50 } });
  assert.equal(created.identity_id, mine.body.id);
  assert.deepEqual(created.limits, { per_minute: 50 });
  const plain = await createKey(owner.key, 'server');
  assert.equal(plain.identity_id, null);
  assert.equal(plain.limits, null);
  const listed = await call('GET', '/public/v1/keys', { key: owner.key });
  const shown = listed.body.data.find((k) => k.id === created.id);
  assert.equal(shown.identity_id, mine.body.id);
  assert.deepEqual(shown.limits, { per_minute: 50 });
  // The key works (its record loads with its identity).
  assert.equal((await call('GET', '/public/v1/me', { key: created.key })).status, 200);

  const other = await createProject('identities keys other');
  const theirs = await call('POST', '/public/v1/identities', { key: other.owner.key, body: { external_id: 'c1' } });
  assert.equal(theirs.status, 201, theirs.text);
  assertError(await call('GET', `/public/v1/identities/${theirs.body.id}`, { key: owner.key }), 404, 'NOT_FOUND');
  assertError(await call('PATCH', `/public/v1/identities/${theirs.body.id}`, { key: owner.key, body: { meta: {} } }), 404, 'NOT_FOUND');
  assertError(await call('DELETE', `/public/v1/identities/${theirs.body.id}`, { key: owner.key }), 404, 'NOT_FOUND');
  for (const identity_id of [theirs.body.id, 'idt_unknown']) {
    const res = await call('POST', '/public/v1/keys', { key: owner.key, body: { type: 'server', identity_id } });
    assert.equal(assertError(res, 422, 'VALIDATION_ERROR').details.field, 'identity_id');
    const patched = await call('PATCH', `/public/v1/keys/${plain.id}`, { key: owner.key, body: { identity_id } });
    assert.equal(assertError(patched, 422, 'VALIDATION_ERROR').details.field, 'identity_id');
  }

  // A key's limits: windows of its plan (business: 2000 a minute), at most the plan's, no quota.
  const keyCases = [
    [{ monthly_quota: 10 }, 422, 'VALIDATION_ERROR', 'limits.monthly_quota'],
    [{ per_second: 10 }, 422, 'VALIDATION_ERROR', 'limits.per_second'],
    [{ per_minute: 2001 }, 403, 'FORBIDDEN', 'limits.per_minute'],
    [{ per_minute: 0 }, 400, 'VALIDATION_ERROR', 'limits.per_minute'],
    [{ per_minute: 'x' }, 400, 'VALIDATION_ERROR', 'limits.per_minute'],
    [{ per_minit: 1 }, 400, 'VALIDATION_ERROR', 'limits.per_minit'],
  ];
  for (const [limits, status, code, field] of keyCases) {
    const res = await call('POST', '/public/v1/keys', { key: owner.key, body: { type: 'server', limits } });
    assert.equal(assertError(res, status, code).details.field, field, res.text);
    const patched = await call('PATCH', `/public/v1/keys/${plain.id}`, { key: owner.key, body: { limits } });
    assert.equal(assertError(patched, status, code).details.field, field, patched.text);
  }
  // rate_limit_per_minute keeps working as before.
  assertError(await call('POST', '/public/v1/keys', { key: owner.key, body: { type: 'server', rate_limit_per_minute: 2001 } }), 403, 'FORBIDDEN');
  assert.equal((await createKey(owner.key, 'server', { rate_limit_per_minute: 100 })).rate_limit_per_minute, 100);

  // PATCH sets and clears them.
  const set = await call('PATCH', `/public/v1/keys/${plain.id}`, { key: owner.key, body: { identity_id: mine.body.id, limits: { per_minute: 7 } } });
  assert.equal(set.status, 200, set.text);
  assert.equal(set.body.identity_id, mine.body.id);
  assert.deepEqual(set.body.limits, { per_minute: 7 });
  const unset = await call('PATCH', `/public/v1/keys/${plain.id}`, { key: owner.key, body: { identity_id: null, limits: null } });
  assert.equal(unset.status, 200, unset.text);
  assert.equal(unset.body.identity_id, null);
  assert.equal(unset.body.limits, null);
});

test('deleting an identity detaches its keys, which keep working', async () => {
  const { owner } = await createProject('identities delete', { plan: 'business' });
  const { body: identity } = await call('POST', '/public/v1/identities', { key: owner.key, body: { external_id: 'gone', limits: { per_minute: 500 } } });
  const a = await createKey(owner.key, 'server', { identity_id: identity.id });
  const b = await createKey(owner.key, 'server', { identity_id: identity.id });
  assert.equal((await call('GET', '/public/v1/me', { key: a.key })).status, 200);
  const changed = await call('PATCH', `/public/v1/identities/${identity.id}`, { key: owner.key, body: { limits: { per_minute: 400 } } });
  assert.equal(changed.status, 200, changed.text);
  assert.equal((await call('GET', '/public/v1/me', { key: a.key })).status, 200);
  const deleted = await call('DELETE', `/public/v1/identities/${identity.id}`, { key: owner.key });
  assert.equal(deleted.status, 200, deleted.text);
  assert.equal(deleted.body.keys_detached, 2);
  const keys = await call('GET', '/public/v1/keys', { key: owner.key });
  for (const id of [a.id, b.id]) assert.equal(keys.body.data.find((k) => k.id === id).identity_id, null);
  assert.equal((await call('GET', '/public/v1/me', { key: a.key })).status, 200);
  assert.equal((await call('GET', '/public/v1/me', { key: b.key })).status, 200);
  // A new identity with the deleted one's external_id is allowed.
  assert.equal((await call('POST', '/public/v1/identities', { key: owner.key, body: { external_id: 'gone' } })).status, 201);
});

test('only owner keys manage identities (403 FORBIDDEN)', async () => {
  const { owner } = await createProject('identities scope', { plan: 'business' });
  const { body: identity } = await call('POST', '/public/v1/identities', { key: owner.key, body: { external_id: 'o' } });
  for (const type of ['server', 'browser', 'cicd']) {
    const { key } = await createKey(owner.key, type);
    assertError(await call('POST', '/public/v1/identities', { key, body: { external_id: `by-${type}` } }), 403, 'FORBIDDEN');
    assertError(await call('GET', '/public/v1/identities', { key }), 403, 'FORBIDDEN');
    assertError(await call('GET', `/public/v1/identities/${identity.id}`, { key }), 403, 'FORBIDDEN');
    assertError(await call('PATCH', `/public/v1/identities/${identity.id}`, { key, body: { meta: {} } }), 403, 'FORBIDDEN');
    assertError(await call('DELETE', `/public/v1/identities/${identity.id}`, { key }), 403, 'FORBIDDEN');
  }
  assertError(await call('GET', '/public/v1/identities'), 401, 'INVALID_API_KEY');
});
