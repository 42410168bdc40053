// Code written as an integrator writes it, type-checked by `npm run build` against the built
// declarations: if the API description stops accepting what the API accepts (an open object such
// as `properties`, `traits` or `meta` turned closed, a field renamed), this file stops compiling.
// Not run: it needs a gateway and keys.
import {
  Gatehouse,
  GatehouseError,
  verifyWebhook,
  WebhookVerificationError,
  type Contact,
  type RequestBody,
  type StoredEvent,
} from '@gatehouse/client';

declare const env: { GATEHOUSE_URL: string; GATEHOUSE_KEY: string; OWNER_KEY: string; CICD_KEY: string; PROJECT_ID: string; WEBHOOK_SECRET: string };

const gh = new Gatehouse({
  apiKey: env.GATEHOUSE_KEY,
  baseUrl: env.GATEHOUSE_URL,
  maxAttempts: 4,
  timeoutMs: 10_000,
  onRetry: ({ reason, attempt, waitMs, error }) => console.warn(`${reason} after attempt ${attempt}: waiting ${waitMs} ms`, error?.message),
});
const owner = gh.withKey(env.OWNER_KEY);

export async function tour(): Promise<void> {
  const me = await gh.me();
  console.log(me.type, me.project_id, me.rate_limit.remaining, me.quota.used);

  // A create: one Idempotency-Key for the call and all its retries; or your own for a business operation.
  const ada: Contact = await gh.contacts.create({ name: 'Ada Lovelace', email: 'ada@example.com' });
  await gh.contacts.create({ name: 'Ada Lovelace' }, { idempotencyKey: `signup-${ada.id}`, deadlineMs: 20_000 });
  const again = await gh.contacts.get(ada.id);
  console.log(again.email?.toLowerCase());

  // Lists stream across pages.
  for await (const contact of gh.contacts.list({ limit: 100 })) console.log(contact.id, contact.name ?? '');
  for await (const page of gh.contacts.list().pages()) console.log(page.data.length, page.next_cursor);
  const firstPage = await gh.contacts.list({ limit: 10 }).first();
  console.log(firstPage.data[0]?.id);

  const bulk = await gh.bulk.contacts([{ name: 'Grace' }, { email: 'linus@example.com' }]);
  console.log(bulk);
  await gh.messages.send({ contact_id: ada.id, text: 'Welcome!' });
  const scenario = await gh.scenarios.create('Onboarding');
  await gh.scenarios.run(scenario.id, { contact_id: ada.id, variables: { plan: 'trial', seats: 3, beta: true } });

  // Keys, identities (traits-like metadata is an open object), webhooks, logs, events, usage.
  const key = await owner.keys.create({ type: 'server', name: 'backend' });
  console.log(key.key);
  await owner.keys.update(key.id, { name: 'backend (eu)' });
  await owner.keys.roll(key.id, { grace_seconds: 600 });
  const identity = await owner.identities.create({
    external_id: 'customer-42',
    meta: { plan: 'trial', company: { name: 'Acme', size: 40 }, tags: ['beta'] },
  });
  await owner.identities.update(identity.id, { meta: { plan: 'business' } });
  const hook = await owner.webhooks.create({ url: 'https://example.com/hooks', events: ['contact.created'] });
  console.log(hook.secret);
  await owner.webhooks.rotateSecret(hook.id, { grace_seconds: 3600 });
  for await (const delivery of owner.webhooks.deliveries(hook.id, { status: 'failed' })) await owner.webhooks.resend(delivery.id);
  await owner.webhooks.test('contact.created');
  for await (const row of owner.logs.list({ status: '4xx', path: '/public/v1/contacts*' })) console.log(row.request_id, row.status);
  const recent: StoredEvent[] = await owner.events.list({ event: 'Signed Up', user_id: 'user-42', limit: 50 }).toArray(50);
  console.log(recent.map((e) => e.event));
  const usage = await owner.usage.get({ group_by: 'key' });
  console.log(usage.total);
  await gh.withKey(env.CICD_KEY).releases.deploy(env.PROJECT_ID, { version: 'v1.4.0', ts: '2026-12-06T12:00:00Z', commit: 'abc123' });

  // Events through the raw call, typed from the API description: properties and traits are open.
  const track: RequestBody<'/v1/track', 'post'> = {
    batch: [
      {
        event_id: crypto.randomUUID(),
        event: 'Signed Up',
        user_id: 'user-42',
        properties: { plan: 'trial', referrer: { source: 'newsletter' }, seats: 3, beta: true },
      },
    ],
  };
  await gh.request('POST', '/v1/track', { body: track, repeatable: true });
  const identify: RequestBody<'/v1/identify', 'post'> = {
    anonymous_id: 'anon-1',
    user_id: 'user-42',
    traits: { email: 'ada@example.com', plan: 'trial', company: { name: 'Acme' } },
  };
  await gh.request('POST', '/v1/identify', { body: identify });

  // The event tracker: an event_id at the moment of the fact, queued and sent in batches.
  const eventId: string = gh.track('Plan Chosen', { plan: 'trial', price: { amount: 0, currency: 'EUR' } }, { userId: 'user-42' });
  gh.identify('user-42', { email: 'ada@example.com', plan: 'trial', company: { name: 'Acme' } });
  gh.alias('anon-1', 'user-42');
  const flushed = await gh.flush();
  console.log(eventId, flushed.sent, flushed.remaining);

  // Following the log until stopped.
  const stop = new AbortController();
  setTimeout(() => stop.abort(), 60_000);
  for await (const row of owner.logs.tail({ signal: stop.signal, filters: { status: '5xx' } })) console.log(row.path);
}

export async function errors(): Promise<void> {
  try {
    await gh.contacts.create({ email: 'not an email' }, { maxAttempts: 1 });
  } catch (e) {
    if (!(e instanceof GatehouseError)) throw e;
    console.log(e.status, e.code, e.message, e.requestId, e.retryable, e.details['field']);
    if (e.code === 'RATE_LIMIT_EXCEEDED') console.log(`retry in ${e.retryAfter ?? 0}s; window resets at ${e.rateLimit?.reset}`);
  }
}

// A Worker (or any fetch-style) webhook receiver.
export async function receive(request: Request): Promise<Response> {
  const body = await request.text();
  try {
    await verifyWebhook(body, request.headers, env.WEBHOOK_SECRET);
  } catch (e) {
    if (e instanceof WebhookVerificationError) return new Response(e.reason, { status: 400 });
    throw e;
  }
  const event = JSON.parse(body) as { type: string; data: unknown };
  console.log(event.type);
  return new Response(null, { status: 204 });
}
