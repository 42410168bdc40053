// SPEC §5 end to end, one test per row of its table, plus exactly-once under concurrency.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import {
  assertError, businessProject, call, createKey, idemKey, listAll,
} from './harness.mjs';

const contacts = async (key) => listAll('/public/v1/contacts', key);

test('a new key executes; the same request again replays the stored response', async () => {
  const { server } = await businessProject();
  const idem = idemKey();
  const first = await call('POST', '/public/v1/contacts', { key: server.key, idem, body: { name: 'Ada', email: 'ada@example.com' } });
  assert.equal(first.status, 201, first.text);
  assert.equal(first.headers.get('idempotent-replayed'), null);

  // Same request with keys reordered and whitespace added: the same operation.
  const again = await call('POST', '/public/v1/contacts', {
    key: server.key, idem, body: '{ "email" : "ada@example.com",\n  "name":"Ada" }',
  });
  assert.equal(again.status, 201);
  assert.deepEqual(again.body, first.body);
  assert.equal(again.headers.get('idempotent-replayed'), '1');
  assert.equal(again.headers.get('idempotency-replayed'), 'true');
  assert.equal(again.headers.get('x-original-request-id'), first.headers.get('x-request-id'));
  assert.notEqual(again.headers.get('x-request-id'), first.headers.get('x-request-id'));
  // Replays count against the rate limit like any request.
  assert.equal(Number(again.headers.get('x-ratelimit-remaining')), Number(first.headers.get('x-ratelimit-remaining')) - 1);
  assert.equal((await contacts(server.key)).length, 1);
});

test('the same key with a different request is 409 IDEMPOTENCY_KEY_REUSED and executes nothing', async () => {
  const { server } = await businessProject();
  const idem = idemKey();
  assert.equal((await call('POST', '/public/v1/contacts', { key: server.key, idem, body: { name: 'A' } })).status, 201);
  const other = await call('POST', '/public/v1/contacts', { key: server.key, idem, body: { name: 'B' } });
  const e = assertError(other, 409, 'IDEMPOTENCY_KEY_REUSED');
  assert.equal(e.retryable, false);
  assert.equal(e.details.header, 'Idempotency-Key');
  // Another path with the same key and body is another request too.
  assertError(await call('POST', '/public/v1/scenarios', { key: server.key, idem, body: { name: 'A' } }), 409, 'IDEMPOTENCY_KEY_REUSED');
  assert.equal((await contacts(server.key)).length, 1);
});

test('a header sent twice is 422 with details.header, and nothing runs', async () => {
  const { server } = await businessProject();
  const res = await call('POST', '/public/v1/contacts', {
    key: server.key,
    body: { name: 'A' },
    headers: [['idempotency-key', 'first-key'], ['idempotency-key', 'second-key']],
  });
  const e = assertError(res, 422, 'VALIDATION_ERROR');
  assert.equal(e.details.header, 'Idempotency-Key');
  assert.ok(res.headers.get('x-ratelimit-limit'), 'authenticated first: rate headers present');
  assert.equal((await contacts(server.key)).length, 0);
});

test('malformed keys are 422; a quoted key is the same key unquoted', async () => {
  const { server } = await businessProject();
  for (const bad of ['has space', 'x'.repeat(256), 'comma,inside']) {
    const e = assertError(await call('POST', '/public/v1/contacts', { key: server.key, idem: bad, body: { name: 'A' } }), 422, 'VALIDATION_ERROR');
    assert.equal(e.details.header, 'Idempotency-Key');
  }
  const first = await call('POST', '/public/v1/contacts', { key: server.key, idem: 'plain-key-1', body: { name: 'Q' } });
  const quoted = await call('POST', '/public/v1/contacts', { key: server.key, idem: '"plain-key-1"', body: { name: 'Q' } });
  assert.equal(quoted.headers.get('idempotent-replayed'), '1');
  assert.deepEqual(quoted.body, first.body);
  assert.equal((await contacts(server.key)).length, 1);
});

test('a failed first attempt stores nothing: the retry executes again, and the key stays usable', async () => {
  const { server } = await businessProject();
  const idem = idemKey();
  const body = { contact_id: 'con_doesnotexist', text: 'hi' };
  const first = await call('POST', '/public/v1/messages', { key: server.key, idem, body });
  assertError(first, 422, 'VALIDATION_ERROR');
  const retry = await call('POST', '/public/v1/messages', { key: server.key, idem, body });
  assertError(retry, 422, 'VALIDATION_ERROR');
  assert.equal(retry.headers.get('idempotent-replayed'), null, 'a failure is not replayed');
  assert.equal(retry.headers.get('x-original-request-id'), null);

  const contact = await call('POST', '/public/v1/contacts', { key: server.key, body: { name: 'C' } });
  const ok = await call('POST', '/public/v1/messages', { key: server.key, idem, body: { contact_id: contact.body.id, text: 'hi' } });
  assert.equal(ok.status, 201, ok.text);
  assert.deepEqual(
    { contact_id: ok.body.contact_id, text: ok.body.text, status: ok.body.status },
    { contact_id: contact.body.id, text: 'hi', status: 'queued' },
  );
});

test('a request refused with 403 takes no claim: the same key works at once where the key is allowed', async () => {
  const { projectId, owner } = await businessProject();
  const cicd = await createKey(owner.key, 'cicd');
  const idem = idemKey();
  assertError(await call('POST', '/public/v1/contacts', { key: cicd.key, idem, body: { name: 'x' } }), 403, 'FORBIDDEN');
  const marker = await call('POST', `/api/v1/projects/${projectId}/release-markers/deploy`, {
    key: cicd.key, idem, body: { version: '1.0.0', ts: '2026-11-30T10:00:00Z' },
  });
  assert.equal(marker.status, 201, marker.text);
});

test('the key is scoped to the API key: the same string under two API keys is two operations', async () => {
  const { owner, server } = await businessProject();
  const second = await createKey(owner.key, 'server');
  const idem = idemKey();
  const a = await call('POST', '/public/v1/contacts', { key: server.key, idem, body: { name: 'Same' } });
  const b = await call('POST', '/public/v1/contacts', { key: second.key, idem, body: { name: 'Same' } });
  assert.deepEqual([a.status, b.status], [201, 201]);
  assert.equal(b.headers.get('idempotent-replayed'), null);
  assert.notEqual(a.body.id, b.body.id);
  assert.equal((await contacts(server.key)).length, 2);
});

test('20 identical POSTs in parallel execute once: every answer is the 201, its replay, or 409 IN_USE', async () => {
  const { server } = await businessProject();
  const idem = idemKey();
  const results = await Promise.all(Array.from({ length: 20 }, () =>
    call('POST', '/public/v1/contacts', { key: server.key, idem, body: { name: 'Once', phone: '+1 555 0100' } })));
  const created = results.filter((r) => r.status === 201 && r.headers.get('idempotent-replayed') === null);
  assert.equal(created.length, 1, results.map((r) => `${r.status}:${r.headers.get('idempotent-replayed')}`).join(' '));
  for (const r of results) {
    if (r.status === 201) assert.deepEqual(r.body, created[0].body);
    else assertError(r, 409, 'IDEMPOTENCY_KEY_IN_USE');
  }
  const all = await contacts(server.key);
  assert.equal(all.length, 1);
  assert.equal(all[0].id, created[0].body.id);
});

test('the completed response is stored in KV under papi:idem:{apiKeyId}:{key} with the 24 h TTL', async () => {
  const { server } = await businessProject();
  const idem = idemKey();
  const res = await call('POST', '/public/v1/contacts', { key: server.key, idem, body: { name: 'Kept' } });
  assert.equal(res.status, 201);
  const name = `papi:idem:${server.id}:${idem}`;
  let entry;
  for (let i = 0; i < 20 && !entry; i++) {
    const out = spawnSync('npx', ['wrangler', 'kv', 'key', 'list', '--binding', 'IDEMPOTENCY', '--local',
      '--persist-to', process.env.GATEHOUSE_STATE, '--prefix', name], { encoding: 'utf8' });
    assert.equal(out.status, 0, out.stderr);
    entry = JSON.parse(out.stdout.slice(out.stdout.indexOf('['))).find((k) => k.name === name);
    if (!entry) await new Promise((r) => setTimeout(r, 100));
  }
  assert.ok(entry, `no KV entry ${name}`);
  const ttl = entry.expiration - Date.now() / 1000;
  assert.ok(Math.abs(ttl - 86_400) < 120, `expiration in ${ttl} s, expected about 86400`);
});

test('release markers: 201, then 200 replay, 409 on another ts, 422 on two headers, 400 without a key, 403 for others', async () => {
  const { projectId, owner, server } = await businessProject();
  const cicd = await createKey(owner.key, 'cicd');
  const path = `/api/v1/projects/${projectId}/release-markers/deploy`;
  const body = { version: '1.4.0', ts: 1795942112, environment: 'production', commit: 'abc1234' };
  const idem = 'deploy-1.4.0-prod';

  const created = await call('POST', path, { key: cicd.key, idem, body });
  assert.equal(created.status, 201, created.text);
  assert.match(created.body.id, /^rel_/);
  assert.equal(created.body.version, '1.4.0');

  const replay = await call('POST', path, { key: cicd.key, idem, body });
  assert.equal(replay.status, 200);
  assert.equal(replay.headers.get('idempotency-replayed'), 'true');
  assert.deepEqual(replay.body, created.body);

  assertError(await call('POST', path, { key: cicd.key, idem, body: { ...body, ts: 1795942113 } }), 409, 'IDEMPOTENCY_KEY_REUSED');
  const twice = await call('POST', path, { key: cicd.key, body, headers: [['idempotency-key', idem], ['idempotency-key', idem]] });
  assert.equal(assertError(twice, 422, 'VALIDATION_ERROR').details.header, 'Idempotency-Key');
  assertError(await call('POST', path, { key: cicd.key, body }), 400, 'IDEMPOTENCY_KEY_REQUIRED');
  assertError(await call('POST', path, { key: cicd.key, idem: 'short', body }), 422, 'VALIDATION_ERROR');
  assertError(await call('POST', path, { key: server.key, idem, body }), 403, 'FORBIDDEN');
  assertError(await call('POST', path, { key: owner.key, idem, body }), 403, 'FORBIDDEN');

  const other = await businessProject();
  const otherPath = `/api/v1/projects/${other.projectId}/release-markers/deploy`;
  assertError(await call('POST', otherPath, { key: cicd.key, idem: idemKey(), body }), 403, 'FORBIDDEN');
});

test('numbers compare exactly as written and a key named twice is 400: different bodies never replay as one', async () => {
  const { server } = await businessProject();
  const contact = await call('POST', '/public/v1/contacts', { key: server.key, body: { name: 'Ada' } });
  const scenario = await call('POST', '/public/v1/scenarios', { key: server.key, body: { name: 'welcome' } });
  assert.equal(scenario.status, 201, scenario.text);
  const path = `/public/v1/scenarios/${scenario.body.id}/run`;
  const run = (idem, variables) => call('POST', path, { key: server.key, idem, body: `{"contact_id":"${contact.body.id}","variables":${variables}}` });
  // Beyond 2^64, and beyond a double's precision: each pair read as one number through a double
  // and replayed the first run (fails on main before this commit).
  for (const [first, other] of [
    ['{"n":18446744073709551616}', '{"n":18446744073709551617}'],
    ['{"n":0.1}', '{"n":0.1000000000000000000001}'],
  ]) {
    const idem = idemKey();
    const started = await run(idem, first);
    assert.equal(started.status, 202, started.text);
    const same = await run(idem, ` ${first.replace(':', ' : ')} `);
    assert.equal(same.status, 202, same.text);
    assert.equal(same.headers.get('idempotent-replayed'), '1');
    assert.equal(same.body.run_id, started.body.run_id);
    assertError(await run(idem, other), 409, 'IDEMPOTENCY_KEY_REUSED');
  }
  // Key order, whitespace and escapes still do not matter.
  const idem = idemKey();
  const escaped = await run(idem, '{"b":"\\u0041","a":1}');
  assert.equal(escaped.status, 202, escaped.text);
  const plain = await run(idem, '{ "a": 1, "b": "A" }');
  assert.equal(plain.headers.get('idempotent-replayed'), '1');
  assert.equal(plain.body.run_id, escaped.body.run_id);
  // A key named twice, at any depth, is refused on every JSON route instead of merged.
  const twice = assertError(await run(idemKey(), '{"n":1,"n":2}'), 400, 'VALIDATION_ERROR');
  assert.equal(twice.details.field, 'n');
  assert.match(twice.message, /duplicate key "n"/);
  const contactTwice = await call('POST', '/public/v1/contacts', { key: server.key, body: '{"name":"A","name":"B"}' });
  assert.equal(assertError(contactTwice, 400, 'VALIDATION_ERROR').details.field, 'name');
  const trackTwice = await call('POST', '/v1/track', { key: server.key, body: '{"batch":[{"event":"e","properties":{"p":1,"p":2}}]}' });
  assert.equal(assertError(trackTwice, 400, 'VALIDATION_ERROR').details.field, 'p');
});
