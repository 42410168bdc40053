// SPEC §10 end to end against a real HTTP receiver on 127.0.0.1: signed delivery, retries on the
// (test-shortened) schedule, 410, manual retry, and the minute sweep for lost queue messages.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createHmac, createPublicKey, verify } from 'node:crypto';
import { assertError, call, createKey, createProject, d1, eventually, listAll, receiver, runCron } from './harness.mjs';

/** The receiver: an answer per path, numbered, and every request it got. */
const answer = (status) => (req) => ({ status: status(req.n), headers: { 'content-type': 'text/plain' }, body: `answer ${req.n} from ${req.url}` });
let hooks;

before(async () => {
  hooks = await receiver(answer(() => 200));
});

after(() => hooks.close());

/** A unique receiver path answering `status(n)` to its n-th request. */
const endpoint = (status = () => 200) => hooks.endpoint(answer(status));

async function subscribe(ownerKey, path, events = ['*']) {
  const res = await call('POST', '/public/v1/webhooks', { key: ownerKey, body: { url: hooks.url + path, events } });
  assert.equal(res.status, 201, res.text);
  return res.body;
}

async function businessOwner() {
  // Plans belong to projects (SPEC §13): an owner can no longer raise its own key's plan.
  return createProject(undefined, { plan: 'business' });
}

const requestsTo = (path) => hooks.requestsTo(path);
const waitFor = (path, n) => hooks.waitFor(path, n, 20_000);

async function deliveriesOf(ownerKey, webhookId, status) {
  return listAll(`/public/v1/webhooks/${webhookId}/deliveries${status ? `?status=${status}` : ''}`, ownerKey);
}

async function settled(ownerKey, webhookId, status, ms = 25_000) {
  let found = [];
  await eventually(async () => {
    found = await deliveriesOf(ownerKey, webhookId, status);
    return found.length > 0;
  }, ms);
  return found;
}

test('subscriptions: the secret is shown once; bad URLs and event types are refused; list and delete', async () => {
  const { owner } = await businessOwner();
  const hook = await subscribe(owner.key, endpoint(), ['contact.created']);
  assert.match(hook.id, /^wh_/);
  assert.match(hook.secret, /^whsec_[A-Za-z0-9+/]{32}$/);
  assert.equal(Buffer.from(hook.secret.slice(6), 'base64').length, 24);
  assert.deepEqual([hook.status, hook.events], ['active', ['contact.created']]);
  const list = await call('GET', '/public/v1/webhooks', { key: owner.key });
  assert.equal(list.body.data.length, 1);
  assert.equal(list.body.data[0].secret, undefined, 'the secret is shown only at creation');
  const bad = (body) => call('POST', '/public/v1/webhooks', { key: owner.key, body });
  assertError(await bad({ url: 'ftp://example.com/x', events: ['*'] }), 422, 'VALIDATION_ERROR');
  assertError(await bad({ url: 'https://example.com/x', events: ['Contact.Deleted'] }), 422, 'VALIDATION_ERROR');
  assertError(await bad({ url: 'https://example.com/x', events: [] }), 422, 'VALIDATION_ERROR');
  assertError(await bad({ url: 'https://example.com/x' }), 400, 'VALIDATION_ERROR');
  const server = await createKey(owner.key, 'server');
  assertError(await call('GET', '/public/v1/webhooks', { key: server.key }), 403, 'FORBIDDEN');
  assert.equal((await call('DELETE', `/public/v1/webhooks/${hook.id}`, { key: owner.key })).status, 200);
  assert.equal((await call('GET', '/public/v1/webhooks', { key: owner.key })).body.data.length, 0);
  assertError(await call('DELETE', `/public/v1/webhooks/${hook.id}`, { key: owner.key }), 404, 'NOT_FOUND');
});

test('delivered on the first try with both signatures, the event, and the causing request id', async () => {
  const { owner } = await businessOwner();
  const path = endpoint();
  const hook = await subscribe(owner.key, path);
  const other = endpoint();
  await subscribe(owner.key, other, ['message.created']); // does not want contact.created
  const created = await call('POST', '/public/v1/contacts', { key: owner.key, body: { name: 'Hooked' } });
  assert.equal(created.status, 201);
  assert.ok(await waitFor(path, 1), 'the receiver got the event');
  const [{ headers, body }] = requestsTo(path);

  const key = Buffer.from(hook.secret.slice('whsec_'.length), 'base64');
  const id = headers['webhook-id'];
  const ts = headers['webhook-timestamp'];
  assert.match(id, /^dlv_[0-9a-f]{26}$/);
  assert.ok(Math.abs(Number(ts) - Date.now() / 1000) < 60);
  const expected = 'v1,' + createHmac('sha256', key).update(`${id}.${ts}.${body}`).digest('base64');
  assert.equal(headers['webhook-signature'], expected);
  assert.equal(headers['x-gatehouse-signature'], 'sha256=' + createHmac('sha256', key).update(body).digest('hex'));
  assert.equal(headers['x-gatehouse-event'], 'contact.created');
  assert.equal(headers['x-gatehouse-request-id'], created.headers.get('x-request-id'));
  assert.equal(headers['content-type'], 'application/json');
  const payload = JSON.parse(body);
  assert.match(payload.id, /^evt_/);
  assert.equal(payload.type, 'contact.created');
  assert.deepEqual(payload.data, created.body);

  const [delivery] = await settled(owner.key, hook.id, 'delivered');
  assert.equal(delivery.id, id);
  assert.equal(delivery.attempts.length, 1);
  assert.equal(delivery.attempts[0].response_code, 200);
  assert.equal(delivery.attempts[0].response_body, `answer 1 from ${path}`);
  await new Promise((r) => setTimeout(r, 500));
  assert.equal(requestsTo(other).length, 0, 'a subscription gets only the types it asked for');
});

test('a receiver that fails twice then succeeds: 3 attempts, delivered, the same webhook-id each time', async () => {
  const { owner } = await businessOwner();
  const path = endpoint((n) => (n <= 2 ? 500 : 200));
  const hook = await subscribe(owner.key, path, ['contact.created']);
  await call('POST', '/public/v1/contacts', { key: owner.key, body: { name: 'Flaky' } });
  const [delivery] = await settled(owner.key, hook.id, 'delivered');
  assert.deepEqual(delivery.attempts.map((a) => a.response_code), [500, 500, 200]);
  assert.ok(delivery.attempts[0].next_retry_at && delivery.attempts[1].next_retry_at);
  assert.equal(delivery.attempts[2].next_retry_at, null);
  const ids = requestsTo(path).map((r) => r.headers['webhook-id']);
  assert.deepEqual(ids, [delivery.id, delivery.id, delivery.id]);
});

test('a receiver that always fails: exactly 6 attempts, then failed; a manual retry delivers it', async () => {
  const { owner } = await businessOwner();
  let healthy = false;
  const path = endpoint(() => (healthy ? 200 : 500));
  const hook = await subscribe(owner.key, path, ['contact.created']);
  await call('POST', '/public/v1/contacts', { key: owner.key, body: { name: 'Doomed' } });
  const [failed] = await settled(owner.key, hook.id, 'failed', 40_000);
  assert.equal(failed.attempts.length, 6);
  assert.ok(failed.attempts.every((a) => a.response_code === 500));
  assert.equal(failed.last_response_code, 500);
  await new Promise((r) => setTimeout(r, 1500));
  assert.equal(requestsTo(path).length, 6, 'no seventh attempt');

  healthy = true;
  const retry = await call('POST', `/public/v1/webhooks/deliveries/${failed.id}/retry`, { key: owner.key });
  assert.equal(retry.status, 202, retry.text);
  const [delivered] = await settled(owner.key, hook.id, 'delivered');
  assert.equal(delivered.id, failed.id);
  assert.equal(delivered.attempts.length, 7);
  assertError(await call('POST', '/public/v1/webhooks/deliveries/dlv_nope/retry', { key: owner.key }), 404, 'NOT_FOUND');
});

test('410 Gone disables the subscription', async () => {
  const { owner } = await businessOwner();
  const path = endpoint(() => 410);
  const hook = await subscribe(owner.key, path);
  await call('POST', '/public/v1/contacts', { key: owner.key, body: { name: 'Gone' } });
  const [failed] = await settled(owner.key, hook.id, 'failed');
  assert.equal(failed.attempts.length, 1);
  const list = await call('GET', '/public/v1/webhooks', { key: owner.key });
  assert.equal(list.body.data.find((h) => h.id === hook.id).status, 'disabled');
  // A disabled subscription gets no new deliveries.
  await call('POST', '/public/v1/contacts', { key: owner.key, body: { name: 'After' } });
  await new Promise((r) => setTimeout(r, 1000));
  assert.equal((await deliveriesOf(owner.key, hook.id)).length, 1);
});

test('a due delivery whose queue message was lost is delivered after the minute cron', async () => {
  const { projectId, owner } = await businessOwner();
  const path = endpoint();
  const hook = await subscribe(owner.key, path);
  const past = Date.now() - 120_000;
  const payload = JSON.stringify({ id: 'evt_lost', type: 'contact.created', created_at: new Date(past).toISOString(), data: {} });
  await d1(`INSERT INTO webhook_deliveries (id, project_id, webhook_id, event_id, event, payload, request_id, status,
    attempts, scheduled_at, created_at, updated_at) VALUES ('dlv_lost_${projectId}', '${projectId}', '${hook.id}',
    'evt_lost', 'contact.created', '${payload}', 'req-lost', 'pending', 0, ${past}, ${past}, ${past})`);
  await new Promise((r) => setTimeout(r, 1000));
  assert.equal(requestsTo(path).length, 0, 'nothing is delivered without a queue message');
  const cron = await runCron();
  assert.equal(cron.status, 200);
  assert.ok(await waitFor(path, 1), 'the sweep queued it');
  assert.equal(requestsTo(path)[0].headers['webhook-id'], `dlv_lost_${projectId}`);
  const [delivered] = await settled(owner.key, hook.id, 'delivered');
  assert.equal(delivered.id, `dlv_lost_${projectId}`);
});

/** Whether `entry` (`v1a,<base64>`) is an Ed25519 signature of the delivery under `publicKey` (`whpk_…`), checked by Node's crypto. */
function v1aVerifies(publicKey, req, entry, body = req.raw) {
  const der = Buffer.concat([Buffer.from('302a300506032b6570032100', 'hex'), Buffer.from(publicKey.slice(5), 'base64')]);
  const key = createPublicKey({ key: der, format: 'der', type: 'spki' });
  const signed = Buffer.concat([Buffer.from(`${req.headers['webhook-id']}.${req.headers['webhook-timestamp']}.`), body]);
  return entry.startsWith('v1a,') && verify(null, signed, key, Buffer.from(entry.slice(4), 'base64'));
}

test('v1a: Ed25519 deliveries verify with the public key alone (Node crypto), a tampered body does not; a rotation and a switch from v1 sign with both', async () => {
  const { owner } = await businessOwner();
  const server = await createKey(owner.key, 'server');
  const path = endpoint();
  const made = await call('POST', '/public/v1/webhooks', { key: owner.key, body: { url: hooks.url + path, events: ['contact.created'], signature: 'v1a' } });
  assert.equal(made.status, 201, made.text);
  assert.deepEqual([made.body.signature, made.body.secret], ['v1a', undefined], 'no secret leaves the gateway');
  assert.match(made.body.public_key, /^whpk_[A-Za-z0-9+/]{43}=$/);
  const served = await call('GET', `/public/v1/webhooks/${made.body.id}/public-key`, { key: owner.key });
  assert.deepEqual([served.status, served.body], [200, { public_key: made.body.public_key }]);
  // Someone who writes D1 but holds no WEBHOOK_SECRETS_KEY plants a key of their own beside the
  // sealed secret: the gateway still shows the key its sealed secret makes (fails on 3b52c52).
  await d1(`UPDATE webhooks SET public_key = 'whpk_${Buffer.alloc(32, 9).toString('base64')}' WHERE id = '${made.body.id}'`);
  const planted = await call('GET', `/public/v1/webhooks/${made.body.id}/public-key`, { key: owner.key });
  assert.equal(planted.body.public_key, made.body.public_key);
  const listed = (await listAll('/public/v1/webhooks', owner.key)).find((w) => w.id === made.body.id);
  assert.equal(listed.public_key, made.body.public_key);

  await call('POST', '/public/v1/contacts', { key: server.key, body: { name: 'Ed' } });
  assert.ok(await waitFor(path, 1), 'delivered');
  const first = requestsTo(path)[0];
  const entries = first.headers['webhook-signature'].split(' ');
  assert.equal(entries.length, 1);
  assert.ok(v1aVerifies(made.body.public_key, first, entries[0]), 'verifies with the public key');
  assert.ok(!v1aVerifies(made.body.public_key, first, entries[0], Buffer.concat([first.raw, Buffer.from(' ')])), 'a tampered body does not');
  assert.equal(first.headers['x-gatehouse-signature'], undefined, 'no HMAC without a shared secret');

  // A rotation: a new key pair (its public key answered, no secret); both sign during the grace.
  const rotated = await call('POST', `/public/v1/webhooks/${made.body.id}/rotate-secret`, { key: owner.key, body: { grace_seconds: 3600 } });
  assert.equal(rotated.status, 200, rotated.text);
  assert.equal(rotated.body.secret, undefined);
  assert.notEqual(rotated.body.public_key, made.body.public_key);
  await call('POST', '/public/v1/contacts', { key: server.key, body: { name: 'Ed again' } });
  assert.ok(await waitFor(path, 2), 'delivered again');
  const [fresh, old] = requestsTo(path)[1].headers['webhook-signature'].split(' ');
  assert.ok(v1aVerifies(rotated.body.public_key, requestsTo(path)[1], fresh), 'the new key first');
  assert.ok(v1aVerifies(made.body.public_key, requestsTo(path)[1], old), 'then the old one');

  // A v1 subscription switched to v1a: v1a (new) and v1 (the old secret) during the grace.
  const switchPath = endpoint();
  const v1 = await subscribe(owner.key, switchPath, ['contact.created']);
  const switched = await call('PATCH', `/public/v1/webhooks/${v1.id}`, { key: owner.key, body: { signature: 'v1a' } });
  assert.equal(switched.status, 200, switched.text);
  assert.equal(switched.body.signature, 'v1a');
  assert.match(switched.body.previous_secret_expires_at, /^\d{4}-/);
  await call('POST', '/public/v1/contacts', { key: server.key, body: { name: 'Switching' } });
  assert.ok(await waitFor(switchPath, 1), 'delivered after the switch');
  const got = requestsTo(switchPath)[0];
  const [asymmetric, hmac] = got.headers['webhook-signature'].split(' ');
  assert.ok(v1aVerifies(switched.body.public_key, got, asymmetric));
  const key = Buffer.from(v1.secret.replace('whsec_', ''), 'base64');
  const text = `${got.headers['webhook-id']}.${got.headers['webhook-timestamp']}.${got.body}`;
  assert.equal(hmac, `v1,${createHmac('sha256', key).update(text).digest('base64')}`);

  // Bad input: 422 naming the field; a v1 subscription has no public key.
  for (const body of [{ signature: 'v2' }, { signature: 'V1A' }, {}]) {
    const e = assertError(await call('PATCH', `/public/v1/webhooks/${v1.id}`, { key: owner.key, body }), 422, 'VALIDATION_ERROR');
    assert.ok(['signature', 'status'].includes(e.details.field), JSON.stringify(e));
  }
  const bad = await call('POST', '/public/v1/webhooks', { key: owner.key, body: { url: hooks.url + endpoint(), events: ['*'], signature: 'ed25519' } });
  assert.equal(assertError(bad, 422, 'VALIDATION_ERROR').details.field, 'signature');
  const plain = await subscribe(owner.key, endpoint(), ['contact.created']);
  const none = assertError(await call('GET', `/public/v1/webhooks/${plain.id}/public-key`, { key: owner.key }), 404, 'NOT_FOUND');
  assert.equal(none.details.signature, 'v1');
});
