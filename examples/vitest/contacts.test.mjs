// The service's tests against the real Gatehouse, started in-process by @gatehouse/testing.
import { afterAll, beforeAll, beforeEach, describe, expect, test } from 'vitest';
import { Gatehouse } from '@gatehouse/testing';
import { ContactsService } from './contacts.mjs';

let gh;
beforeAll(async () => {
  gh = await Gatehouse.start();
});
afterAll(() => gh?.stop());
beforeEach(() => gh.reset());

/** The service as deployed, except that it reads Gatehouse's clock and waiting moves it instead of real time. */
const service = (options = {}) => new ContactsService({
  baseUrl: gh.url,
  apiKey: gh.project.keys.server,
  sleep: (ms) => gh.clock.advance(ms / 1000),
  now: () => gh.clock.now().getTime(),
  ...options,
});

/** A fetch that records the status of every answer. */
const recording = (statuses) => async (url, init) => {
  const res = await fetch(url, init);
  statuses.push(res.status);
  return res;
};

describe('ContactsService against Gatehouse', () => {
  test('a 429 is waited out (the kit moves its clock past the window) and the call succeeds', async () => {
    // Pacing off: the 31st request is sent, gets 429 with Retry-After, waits it out and is retried.
    const statuses = [];
    const contacts = service({ pacing: false, fetch: recording(statuses) });
    // A trial key allows 30 requests a minute: the 31st gets 429 with Retry-After. The window is the
    // clock's minute: start at the beginning of one, so the 31 cannot straddle two.
    await gh.clock.advance(60 - gh.clock.now().getUTCSeconds());
    for (let i = 0; i < 30; i++) await contacts.create(`Customer ${i}`);
    const before = gh.clock.now();
    const late = await contacts.create('Customer 30');
    expect(late.name).toBe('Customer 30');
    expect(statuses.slice(30)).toEqual([429, 201]);
    expect(gh.clock.now().getTime() - before.getTime()).toBeGreaterThanOrEqual(1000);
    expect(await contacts.list()).toHaveLength(31);
  });

  test('with its window used up, the next call waits for the reset instead of earning a 429', async () => {
    const statuses = [];
    const contacts = service({ fetch: recording(statuses) });
    for (let i = 0; i < 30; i++) await contacts.create(`Customer ${i}`);
    const before = gh.clock.now();
    const late = await contacts.create('Customer 30');
    expect(late.name).toBe('Customer 30');
    expect(statuses).toHaveLength(31);
    expect(statuses).not.toContain(429);
    expect(gh.clock.now().getTime() - before.getTime()).toBeGreaterThanOrEqual(1000);
    expect(await contacts.list()).toHaveLength(31);
  });

  test('a retried POST with the same Idempotency-Key creates one contact', async () => {
    const contacts = service();
    const first = await contacts.create('Ada', { idempotencyKey: 'signup-ada' });
    const again = await contacts.create('Ada', { idempotencyKey: 'signup-ada' });
    expect(again.id).toBe(first.id);
    expect(await contacts.list()).toHaveLength(1);
  });

  test('a reused Idempotency-Key with another body is a bug in the caller: 409, not retried', async () => {
    const contacts = service();
    await contacts.create('Ada', { idempotencyKey: 'signup-1' });
    await expect(contacts.create('Bob', { idempotencyKey: 'signup-1' })).rejects.toMatchObject({ status: 409, code: 'IDEMPOTENCY_KEY_REUSED' });
  });

  test('the contact.created webhook reaches the service, signed', async () => {
    const contacts = service();
    await gh.webhooks.subscribe(['contact.created']);
    const made = await contacts.create('Grace');
    const delivery = await gh.webhooks.next({ type: 'contact.created' });
    expect(delivery.verified).toBe(true);
    contacts.onWebhook(delivery.payload);
    expect(contacts.announced.get(made.id)?.name).toBe('Grace');
  });

  test('a delivery the receiver failed is attempted again once the clock reaches its retry', async () => {
    const contacts = service();
    await gh.webhooks.subscribe(['contact.created']);
    gh.webhooks.fail(1);
    const made = await contacts.create('Linus');
    await expect(gh.webhooks.next({ type: 'contact.created', timeout: 2000 })).rejects.toThrow(/no contact.created/);
    // The first retry is 30 s (± 10 %) later on Gatehouse's clock.
    await gh.clock.advance(40);
    const retried = await gh.webhooks.next({ type: 'contact.created', timeout: 1000 });
    expect(retried.data.id).toBe(made.id);
    expect(retried.attempt).toBe(2);
  });
});
