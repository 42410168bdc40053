// @gatehouse/client against the real gateway, started in-process by @gatehouse/testing: lost
// answers, 429s waited out on the test clock, typed errors, lists across pages, webhook
// verification of real deliveries (v1, a rotation's two signatures, v1a) and every typed call.
import { test, before, after, beforeEach } from 'node:test';
import assert from 'node:assert/strict';
import { Gatehouse as Kit } from '@gatehouse/testing';
import { Gatehouse, GatehouseError, verifyWebhook, WebhookVerificationError } from '../dist/index.js';

const UUID_V4 = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;
let kit;

before(async () => {
  // A small window so a test reaches it in a few calls.
  kit = await Kit.start({ plans: { trial: { per_minute: 3, monthly_quota: 1000 } } });
});
after(() => kit?.stop());
beforeEach(() => kit.reset());

/** A client on the kit whose waits move the kit's clock instead of taking real time. */
function client(type = 'server', options = {}) {
  return new Gatehouse({
    apiKey: kit.project.keys[type],
    baseUrl: kit.url,
    now: () => kit.clock.now().getTime(),
    sleep: (ms) => kit.clock.advance(ms / 1000),
    ...options,
  });
}

async function countContacts() {
  let n = 0;
  for await (const _ of client('owner').contacts.list({ limit: 200 })) n++;
  return n;
}

test('a create whose answer is lost after the gateway did the work is retried with the same key: one contact', async () => {
  const sent = [];
  let lost = 0;
  const gh = client('server', {
    fetch: async (url, init) => {
      sent.push({ method: init.method, key: new Headers(init.headers).get('idempotency-key') });
      const response = await fetch(url, init);
      if (init.method === 'POST' && lost === 0) {
        lost++;
        await response.arrayBuffer(); // the gateway answered; the answer never arrives
        throw new TypeError('fetch failed: socket hang up');
      }
      return response;
    },
  });
  const contact = await gh.contacts.create({ name: 'Ada Lovelace', email: 'ada@example.com' });
  assert.equal(contact.name, 'Ada Lovelace');
  assert.equal(sent.length, 2, 'sent twice');
  assert.match(sent[0].key, UUID_V4);
  assert.equal(sent[1].key, sent[0].key, 'the retry carries the same Idempotency-Key');
  assert.equal(await countContacts(), 1, 'the work was done once');
  // The replayed answer is the first one: the same contact.
  assert.equal((await client('owner').contacts.get(contact.id)).id, contact.id);
});

test('a 429 is waited out on the test clock and the call succeeds', async () => {
  const retries = [];
  const gh = client('server', { pacing: false, onRetry: (info) => retries.push(info) });
  for (let i = 0; i < 3; i++) await gh.contacts.create({ name: `Customer ${i}` });
  const before = kit.clock.now().getTime();
  const late = await gh.contacts.create({ name: 'Customer 3' });
  assert.equal(late.name, 'Customer 3');
  assert.equal(retries.length, 1);
  assert.equal(retries[0].reason, 'retry');
  assert.equal(retries[0].error.status, 429);
  assert.equal(retries[0].error.code, 'RATE_LIMIT_EXCEEDED');
  assert.ok(retries[0].waitMs >= retries[0].error.retryAfter * 1000, 'waited at least Retry-After');
  assert.ok(kit.clock.now().getTime() - before >= retries[0].error.retryAfter * 1000);
  assert.equal(await countContacts(), 4);
});

test('with pacing on, a used-up window holds the next call until its reset: no 429 is earned', async () => {
  const waits = [];
  const gh = client('server', { onRetry: (info) => waits.push(info) });
  for (let i = 0; i < 4; i++) await gh.contacts.create({ name: `Paced ${i}` });
  assert.deepEqual(waits.map((w) => w.reason), ['pacing']);
  assert.equal(waits[0].attempt, 1);
  assert.equal(await countContacts(), 4);
});

test('a 429 with maxAttempts 1 is a typed error with when to come back and the window', async () => {
  const gh = client('server');
  for (let i = 0; i < 3; i++) await gh.me();
  const error = await gh.me({ maxAttempts: 1 }).then(
    () => assert.fail('a 4th read in the minute must be refused'),
    (e) => e,
  );
  assert.ok(error instanceof GatehouseError);
  assert.equal(error.status, 429);
  assert.equal(error.code, 'RATE_LIMIT_EXCEEDED');
  assert.equal(error.retryable, true);
  assert.ok(error.retryAfter > 0 && error.retryAfter <= 60, `retryAfter ${error.retryAfter}`);
  assert.equal(error.rateLimit?.limit, 3);
  assert.equal(error.rateLimit?.remaining, 0);
  assert.ok(error.rateLimit.reset * 1000 > kit.clock.now().getTime());
  assert.match(error.requestId, /^[0-9a-f-]{36}$/);
});

test('typed errors: 422, 401, 404', async () => {
  const gh = client('owner');
  const invalid = await gh.contacts.create({ email: 'not an email' }).catch((e) => e);
  assert.ok(invalid instanceof GatehouseError);
  assert.equal(invalid.status, 422);
  assert.equal(invalid.code, 'VALIDATION_ERROR');
  assert.equal(invalid.retryable, false);
  assert.equal(typeof invalid.details, 'object');
  assert.ok(invalid.requestId);

  const stranger = new Gatehouse({ apiKey: 'gh_s_notakeyatallnotakeyatallnotakeyatall', baseUrl: kit.url });
  const unauthorized = await stranger.me().catch((e) => e);
  assert.ok(unauthorized instanceof GatehouseError);
  assert.equal(unauthorized.status, 401);
  assert.equal(unauthorized.retryable, false);
  assert.match(unauthorized.code, /^[A-Z_]+$/);

  const missing = await gh.contacts.get('con_doesnotexist0000000000000').catch((e) => e);
  assert.ok(missing instanceof GatehouseError);
  assert.equal(missing.status, 404);
  assert.equal(missing.code, 'NOT_FOUND');
});

test('lists iterate across pages with for await', async () => {
  const gh = client('owner');
  const made = [];
  for (let i = 0; i < 5; i++) made.push((await gh.contacts.create({ name: `Paged ${i}` })).id);
  const seen = [];
  for await (const contact of gh.contacts.list({ limit: 2 })) seen.push(contact.id);
  assert.deepEqual([...seen].sort(), [...made].sort());
  const sizes = [];
  for await (const page of gh.contacts.list({ limit: 2 }).pages()) sizes.push(page.data.length);
  assert.deepEqual(sizes, [2, 2, 1]);
  const first = await gh.contacts.list({ limit: 2 }).first();
  assert.equal(first.data.length, 2);
  assert.equal(typeof first.next_cursor, 'string');
  assert.equal((await gh.contacts.list({ limit: 2 }).toArray(3)).length, 3);
});

test('verifyWebhook accepts a real delivery and refuses a changed body and a stale timestamp', async () => {
  const subscription = await kit.webhooks.subscribe(['contact.created']);
  assert.match(subscription.secret, /^whsec_/);
  await client('server').contacts.create({ name: 'Grace' });
  const delivery = await kit.webhooks.next({ type: 'contact.created' });
  const now = kit.clock.now().getTime();
  assert.equal(await verifyWebhook(delivery.body, delivery.headers, subscription.secret, { now }), true);
  assert.equal(await verifyWebhook(new TextEncoder().encode(delivery.body), new Headers(delivery.headers), subscription.secret, { now }), true);

  const changed = delivery.body.replace('Grace', 'Mallory');
  assert.notEqual(changed, delivery.body);
  await assert.rejects(verifyWebhook(changed, delivery.headers, subscription.secret, { now }), (e) =>
    e instanceof WebhookVerificationError && e.reason === 'signature_mismatch');
  await assert.rejects(verifyWebhook(delivery.body, delivery.headers, subscription.secret, { now: now + 6 * 60_000 }), (e) =>
    e instanceof WebhookVerificationError && e.reason === 'timestamp_out_of_tolerance' && e.skew < -300);
  assert.equal(await verifyWebhook(delivery.body, delivery.headers, subscription.secret, { now: now + 4 * 60_000 }), true);
  const otherSecret = `whsec_${btoa('another secret of 24 bytes')}`;
  await assert.rejects(verifyWebhook(delivery.body, delivery.headers, otherSecret, { now }), (e) => e.reason === 'signature_mismatch');
  await assert.rejects(verifyWebhook(delivery.body, delivery.headers, 'not-a-secret', { now }), (e) => e.reason === 'invalid_secret');
  const { 'webhook-signature': _, ...unsigned } = delivery.headers;
  await assert.rejects(verifyWebhook(delivery.body, unsigned, subscription.secret, { now }), (e) => e.reason === 'missing_header');
});

test('during a secret rotation a delivery carries two signatures: the old and the new secret verify it', async () => {
  const subscription = await kit.webhooks.subscribe(['contact.created']);
  const rotated = await client('owner').webhooks.rotateSecret(subscription.id, { grace_seconds: 3600 });
  assert.match(rotated.secret, /^whsec_/);
  assert.notEqual(rotated.secret, subscription.secret);
  kit.webhooks.trust(rotated.secret);
  await client('server').contacts.create({ name: 'Rotated' });
  const delivery = await kit.webhooks.next({ type: 'contact.created' });
  const now = kit.clock.now().getTime();
  const entries = String(delivery.headers['webhook-signature']).split(' ');
  assert.equal(entries.length, 2, `two signatures: ${entries}`);
  assert.equal(await verifyWebhook(delivery.body, delivery.headers, subscription.secret, { now }), true);
  assert.equal(await verifyWebhook(delivery.body, delivery.headers, rotated.secret, { now }), true);
  assert.equal(await verifyWebhook(delivery.body, delivery.headers, [rotated.secret, subscription.secret], { now }), true);
  // Each signature alone verifies with its own secret only.
  const only = (entry) => ({ ...delivery.headers, 'webhook-signature': entry });
  assert.equal(await verifyWebhook(delivery.body, only(entries[0]), rotated.secret, { now }), true);
  await assert.rejects(verifyWebhook(delivery.body, only(entries[0]), subscription.secret, { now }), (e) => e.reason === 'signature_mismatch');
});

test('a v1a subscription is verified with its Ed25519 public key', async () => {
  const subscription = await kit.webhooks.subscribe(['contact.created'], { signature: 'v1a' });
  assert.match(subscription.public_key, /^whpk_/);
  const published = await client('owner').webhooks.publicKey(subscription.id);
  assert.equal(published.public_key, subscription.public_key);
  await client('server').contacts.create({ name: 'Edwards' });
  const delivery = await kit.webhooks.next({ type: 'contact.created' });
  const now = kit.clock.now().getTime();
  assert.match(String(delivery.headers['webhook-signature']), /^v1a,/);
  assert.equal(await verifyWebhook(delivery.body, delivery.headers, subscription.public_key, { now }), true);
  await assert.rejects(verifyWebhook(delivery.body.replace('Edwards', 'Eve'), delivery.headers, subscription.public_key, { now }), (e) =>
    e.reason === 'signature_mismatch');
  // A v1 secret finds no v1 entry in a v1a delivery.
  await assert.rejects(verifyWebhook(delivery.body, delivery.headers, `whsec_${btoa('x'.repeat(24))}`, { now }), (e) =>
    e.reason === 'no_signature');
});

test('every typed call reaches its route', async () => {
  const owner = client('owner');
  const server = owner.withKey(kit.project.keys.server);

  const me = await server.me();
  assert.equal(me.type, 'server');
  assert.equal(me.project_id, kit.project.id);

  const contact = await server.contacts.create({ name: 'Route', phone: '+1 555 0100' });
  const bulk = await server.bulk.contacts([{ name: 'Bulk 1' }, { name: 'Bulk 2' }]);
  assert.ok(bulk);
  const message = await server.messages.send({ contact_id: contact.id, text: 'hello' });
  assert.equal(message.contact_id, contact.id);
  assert.ok(await server.messages.bulk([{ contact_id: contact.id, text: 'one' }]));
  const scenario = await server.scenarios.create('Onboarding');
  const run = await server.scenarios.run(scenario.id, { contact_id: contact.id, variables: { plan: 'trial' } });
  assert.ok(run);

  const key = await owner.keys.create({ type: 'server', name: 'sdk test' });
  assert.match(key.key, /^gh_s_/);
  assert.equal((await owner.keys.get(key.id))?.name, 'sdk test');
  assert.equal((await owner.keys.update(key.id, { name: 'renamed' })).name, 'renamed');
  assert.ok(await owner.keys.stats(key.id, { days: 7 }));
  assert.ok(await owner.keys.lastUsed());
  const rolled = await owner.keys.roll(key.id, { grace_seconds: 0 });
  assert.match(rolled.key, /^gh_s_/);
  await owner.keys.revoke(rolled.id ?? key.id);

  const identity = await owner.identities.create({ external_id: 'customer-42', meta: { tier: 'gold', seats: 3 } });
  assert.equal((await owner.identities.get(identity.id)).external_id, 'customer-42');
  await owner.identities.update(identity.id, { meta: { tier: 'platinum' } });
  assert.equal((await owner.identities.list().toArray()).length, 1);
  await owner.identities.delete(identity.id);

  const hook = await owner.webhooks.create({ url: kit.webhooks.endpoint('/routes'), events: ['message.created'] });
  assert.equal((await owner.webhooks.get(hook.id))?.id, hook.id);
  assert.equal((await owner.webhooks.update(hook.id, { signature: 'v1a' })).signature, 'v1a');
  await owner.webhooks.test('message.created');
  await kit.webhooks.next({ type: 'message.created' });
  const [delivery] = await owner.webhooks.deliveries(hook.id).toArray(1);
  assert.equal(delivery?.webhook_id, hook.id);
  assert.ok(await owner.webhooks.resend(delivery.id));
  await owner.webhooks.recover(hook.id, new Date(kit.clock.now().getTime() - 60_000));
  await owner.webhooks.delete(hook.id);

  const rows = await owner.logs.list({ limit: 5 }).toArray(5);
  assert.ok(rows.length > 0);
  assert.equal((await owner.logs.get(rows[0].request_id)).request_id, rows[0].request_id);
  assert.ok(Array.isArray((await owner.events.list({ limit: 10 }).first()).data));
  assert.ok(await owner.usage.get());

  const cicd = owner.withKey(kit.project.keys.cicd);
  const marker = await cicd.releases.deploy(kit.project.id, { version: 'v1.2.3', ts: Math.floor(kit.clock.now().getTime() / 1000) });
  assert.equal(marker.version, 'v1.2.3');

  const raw = await owner.send('GET', `/public/v1/keys/${encodeURIComponent(key.id)}/stats`, { query: { days: 1 } });
  assert.equal(raw.status, 200);
});

test('gh.track sends through the tracker: the stored event is listed with its event_id', async () => {
  const gh = client('server', { tracker: { autoFlush: false } });
  try {
    const eventId = gh.track('Signed Up', { plan: 'trial', seats: 3 }, { userId: 'user-42' });
    assert.match(eventId, UUID_V4);
    gh.identify('user-42', { email: 'ada@example.com', plan: 'trial' });
    const result = await gh.flush();
    assert.equal(result.remaining, 0);
    // Ingestion goes through a queue: the event is stored shortly after the 202.
    let stored = [];
    for (let i = 0; i < 50 && stored.length === 0; i++) {
      await new Promise((resolve) => setTimeout(resolve, 100));
      stored = await client('owner').events.list({ event: 'Signed Up', user_id: 'user-42' }).toArray();
    }
    assert.deepEqual(stored.map((e) => e.event_id), [eventId]);
    assert.deepEqual(stored[0].properties, { plan: 'trial', seats: 3 });
  } finally {
    await gh.close();
  }
});

test('logs.tail follows rows written after it started, and stops with its signal', async () => {
  // The audit row is written a moment after the answer (real time): each wait of the tail takes a
  // little real time too before it moves the kit's clock (a minute per poll with this small window).
  const owner = client('owner', {
    sleep: async (ms) => {
      await new Promise((resolve) => setTimeout(resolve, Math.min(ms, 400)));
      await kit.clock.advance(ms / 1000);
    },
  });
  const stop = new AbortController();
  const tail = owner.logs.tail({ signal: stop.signal, intervalMs: 1000, filters: { path: '/public/v1/contacts*' } });
  const made = await client('server').contacts.create({ name: 'Tailed' });
  const first = await Promise.race([
    tail.next(),
    new Promise((_, reject) => setTimeout(() => reject(new Error('no row in 10 s')), 10_000)),
  ]);
  assert.equal(first.done, false);
  assert.equal(first.value.method, 'POST');
  assert.equal(first.value.path, '/public/v1/contacts');
  assert.equal(first.value.status, 201);
  assert.ok(made.id);
  stop.abort();
  assert.equal((await tail.next()).done, true);
});
