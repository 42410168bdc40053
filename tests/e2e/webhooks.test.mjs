// SPEC §10 end to end against a real HTTP receiver on 127.0.0.1: signed delivery, retries on the
// (test-shortened) schedule, 410, manual retry, and the minute sweep for lost queue messages.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createHmac } from 'node:crypto';
import { BASE, assertError, call, createKey, createProject, d1, eventually, listAll, receiver, SCHEDULED } from './harness.mjs';

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
  const cron = await fetch(`${BASE}${SCHEDULED}?cron=${encodeURIComponent('* * * * *')}`);
  assert.equal(cron.status, 200);
  assert.ok(await waitFor(path, 1), 'the sweep queued it');
  assert.equal(requestsTo(path)[0].headers['webhook-id'], `dlv_lost_${projectId}`);
  const [delivered] = await settled(owner.key, hook.id, 'delivered');
  assert.equal(delivered.id, `dlv_lost_${projectId}`);
});
