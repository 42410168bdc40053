// SPEC §6 end to end: contacts, messages, bulk calls (with their idempotency), scenarios.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { assertError, businessProject, call, createKey, idemKey, listAll } from './harness.mjs';

test('contacts: create, get, list with cursor; other projects see 404', async () => {
  const { server } = await businessProject();
  const made = [];
  for (let i = 0; i < 5; i++) {
    const res = await call('POST', '/public/v1/contacts', { key: server.key, body: { name: `C${i}`, external_id: `ext-${i}` } });
    assert.equal(res.status, 201, res.text);
    assert.match(res.body.id, /^con_[0-9a-z]{26}$/);
    made.push(res.body);
  }
  const got = await call('GET', `/public/v1/contacts/${made[2].id}`, { key: server.key });
  assert.equal(got.status, 200);
  assert.deepEqual(got.body, made[2]);

  const page = await call('GET', '/public/v1/contacts?limit=2', { key: server.key });
  assert.equal(page.body.data.length, 2);
  assert.ok(page.body.next_cursor);
  const all = await listAll('/public/v1/contacts', server.key);
  assert.deepEqual(new Set(all.map((c) => c.id)), new Set(made.map((c) => c.id)));

  const other = await businessProject();
  assertError(await call('GET', `/public/v1/contacts/${made[0].id}`, { key: other.server.key }), 404, 'NOT_FOUND');
  assert.equal((await listAll('/public/v1/contacts', other.server.key)).length, 0);
});

test('contacts and messages validate their fields', async () => {
  const { server } = await businessProject();
  assertError(await call('POST', '/public/v1/contacts', { key: server.key, body: {} }), 422, 'VALIDATION_ERROR');
  const e = assertError(await call('POST', '/public/v1/contacts', { key: server.key, body: { email: 'nope' } }), 422, 'VALIDATION_ERROR');
  assert.equal(e.details.field, 'email');
  assertError(await call('POST', '/public/v1/contacts', { key: server.key, body: { name: 7 } }), 400, 'VALIDATION_ERROR');
  assertError(await call('POST', '/public/v1/messages', { key: server.key, body: { contact_id: 'con_x' } }), 400, 'VALIDATION_ERROR');
  const unknown = assertError(await call('POST', '/public/v1/messages', { key: server.key, body: { contact_id: 'con_x', text: 'hi' } }), 422, 'VALIDATION_ERROR');
  assert.equal(unknown.details.field, 'contact_id');
});

test('browser and cicd keys may not use the resource API', async () => {
  const { owner } = await businessProject();
  for (const type of ['browser', 'cicd']) {
    const k = await createKey(owner.key, type);
    assertError(await call('POST', '/public/v1/contacts', { key: k.key, body: { name: 'x' } }), 403, 'FORBIDDEN');
  }
  assert.equal((await call('POST', '/public/v1/contacts', { key: owner.key, body: { name: 'x' } })).status, 201);
});

test('bulk contacts: 100 items with 3 invalid → 97 created, 3 failed by index; the replay creates nothing', async () => {
  const { server } = await businessProject();
  const bad = new Set([7, 42, 99]);
  const items = Array.from({ length: 100 }, (_, i) => (bad.has(i) ? { email: `broken-${i}` } : { name: `Bulk ${i}` }));
  const idem = idemKey();
  const res = await call('POST', '/public/v1/contacts/bulk', { key: server.key, idem, body: { items } });
  assert.equal(res.status, 200, res.text);
  assert.equal(res.body.created, 97);
  assert.equal(res.body.failed, 3);
  assert.equal(res.body.results.length, 100);
  for (const r of res.body.results) {
    if (bad.has(r.index)) {
      assert.equal(r.status, 'failed');
      assert.equal(r.error.code, 'VALIDATION_ERROR');
      assert.equal(r.error.details.field, 'email');
    } else {
      assert.equal(r.status, 'created');
      assert.match(r.id, /^con_/);
    }
  }
  assert.equal(Number(res.headers.get('x-ratelimit-remaining')), 1999, 'a bulk call counts as one request');

  const replay = await call('POST', '/public/v1/contacts/bulk', { key: server.key, idem, body: { items } });
  assert.equal(replay.status, 200);
  assert.equal(replay.headers.get('idempotent-replayed'), '1');
  assert.deepEqual(replay.body, res.body);
  assert.equal((await listAll('/public/v1/contacts', server.key)).length, 97);

  assertError(await call('POST', '/public/v1/contacts/bulk', { key: server.key, body: { items: [] } }), 422, 'VALIDATION_ERROR');
  assertError(await call('POST', '/public/v1/contacts/bulk', { key: server.key, body: { items: Array(101).fill({ name: 'x' }) } }), 422, 'VALIDATION_ERROR');
});

test('bulk messages: items for unknown contacts fail alone', async () => {
  const { server } = await businessProject();
  const contact = (await call('POST', '/public/v1/contacts', { key: server.key, body: { name: 'M' } })).body;
  const items = [
    { contact_id: contact.id, text: 'one' },
    { contact_id: 'con_missing', text: 'two' },
    { contact_id: contact.id, text: '' },
    { contact_id: contact.id, text: 'four' },
    { text: 'no contact' },
  ];
  const res = await call('POST', '/public/v1/messages/bulk', { key: server.key, body: { items } });
  assert.equal(res.status, 200, res.text);
  assert.deepEqual(res.body.results.map((r) => r.status), ['created', 'failed', 'failed', 'created', 'failed']);
  assert.equal(res.body.results[1].error.details.field, 'contact_id');
  assert.equal(res.body.results[2].error.details.field, 'text');
  assert.deepEqual([res.body.created, res.body.failed], [2, 3]);
});

test('scenarios: create, run (202), unknown scenario 404, unknown contact 422', async () => {
  const { server } = await businessProject();
  const contact = (await call('POST', '/public/v1/contacts', { key: server.key, body: { name: 'S' } })).body;
  const scenario = await call('POST', '/public/v1/scenarios', { key: server.key, body: { name: 'Welcome' } });
  assert.equal(scenario.status, 201, scenario.text);
  const run = await call('POST', `/public/v1/scenarios/${scenario.body.id}/run`, {
    key: server.key, idem: idemKey(), body: { contact_id: contact.id, variables: { plan: 'pro' } },
  });
  assert.equal(run.status, 202, run.text);
  assert.equal(run.body.status, 'started');
  assert.match(run.body.run_id, /^run_/);
  assertError(await call('POST', '/public/v1/scenarios/scn_missing/run', { key: server.key, body: { contact_id: contact.id } }), 404, 'NOT_FOUND');
  const e = assertError(await call('POST', `/public/v1/scenarios/${scenario.body.id}/run`, { key: server.key, body: { contact_id: 'con_missing' } }), 422, 'VALIDATION_ERROR');
  assert.equal(e.details.field, 'contact_id');
});
