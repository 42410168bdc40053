// The README's five-minute tour in TypeScript, exactly as docs/api/clients.md shows it:
// `npm run build` type-checks it against the built package, so the documentation cannot drift
// from the API. Not run here (it needs `scripts/dev --demo-origin` and its keys).
declare const process: { env: Record<string, string | undefined> };

import { Gatehouse, GatehouseError, verifyWebhook } from '@gatehouse/client';

const baseUrl = process.env.GH!;                                 // http://127.0.0.1:8787
const owner = new Gatehouse({ apiKey: process.env.OWNER!, baseUrl });

// 1. A key: its secret is in this answer only.
const created = await owner.keys.create({ type: 'server', name: 'backend' });
const gh = owner.withKey(created.key);                           // same settings, the server key

// 2. A request: the key, its window and the project's quota.
const me = await gh.me();
console.log(me.rate_limit.remaining, me.quota.used);

// 3. An idempotent create. Every write carries an Idempotency-Key made once for the call and
//    reused by its retries; give your own for an operation you may repeat after a restart.
const ada = await gh.contacts.create({ name: 'Ada', email: 'ada@example.com' }, { idempotencyKey: 'signup-4711' });
const again = await gh.send('POST', '/public/v1/contacts', {
  body: { name: 'Ada', email: 'ada@example.com' }, idempotencyKey: 'signup-4711',
});
console.log(again.headers.get('idempotency-replayed'), (again.data as { id: string }).id === ada.id);   // "true" true

// 4. The audit log, newest first, across pages.
for await (const row of owner.logs.list({ limit: 2 })) {
  console.log(row.method, row.path, row.status, row.idempotency_key, row.replayed);
  break;
}

// 5. A webhook to the demo origin's receiver; each delivery is signed.
const hook = await owner.webhooks.create({ url: 'http://127.0.0.1:8790/webhook', events: ['contact.created'] });
await gh.contacts.create({ name: 'Grace' });
for await (const delivery of owner.webhooks.deliveries(hook.id)) console.log(delivery.status);

// Your receiver (a Worker, or Node's fetch-style handlers) verifies before it trusts a body:
export async function receive(request: Request): Promise<Response> {
  const body = await request.text();                             // the raw body
  await verifyWebhook(body, request.headers, hook.secret!);      // throws WebhookVerificationError
  return new Response(null, { status: 204 });
}

// Events: the id is fixed when the fact happens; the queue sends it until the gateway answered.
const eventId = gh.track('Signed Up', { plan: 'trial' }, { userId: 'user_42' });
await gh.flush();
const stored = await owner.events.list({ event: 'Signed Up', limit: 10 }).toArray(10);
console.log(stored.some((e) => e.event_id === eventId));

// Errors are typed: status, code, message, requestId, retryable, retryAfter, details, rateLimit.
try {
  await gh.contacts.get('con_missing');
} catch (e) {
  if (!(e instanceof GatehouseError)) throw e;
  console.log(e.status, e.code, e.requestId);                    // 404 NOT_FOUND …
}
