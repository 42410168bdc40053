// A small service that keeps its customers as Gatehouse contacts: the code under test in this
// example. It calls Gatehouse through @gatehouse/client, which retries as every Gatehouse client
// does (docs/api/clients.md): a 429 waits for its Retry-After, a 5xx or a lost answer is retried
// with the same Idempotency-Key, a used-up rate window holds the next call until it resets, and
// nothing else is retried.
import { Gatehouse } from '@gatehouse/client';

export class ContactsService {
  /**
   * `baseUrl` and `apiKey`: the gateway and a server key. `sleep(ms)`: how the service waits
   * before a retry and `now()`: its clock in Unix ms (a test passes the kit's clock, so waiting
   * moves it). `attempts`: per call. Anything else is an option of the SDK's client (`pacing`,
   * `fetch`, `timeoutMs`, `onRetry`, …).
   */
  constructor({ baseUrl, apiKey, sleep, now, attempts = 5, ...client }) {
    this.gh = new Gatehouse({
      ...client,
      baseUrl,
      apiKey,
      maxAttempts: attempts,
      ...(sleep ? { sleep } : {}),
      ...(now ? { now } : {}),
    });
    /** Contacts announced by `contact.created` webhooks, by id. */
    this.announced = new Map();
  }

  /** Creates a contact once, however many times the request has to be sent. */
  async create(name, { idempotencyKey } = {}) {
    return this.gh.contacts.create({ name }, idempotencyKey ? { idempotencyKey } : {});
  }

  /** Every contact, across pages. */
  async list() {
    return this.gh.contacts.list({ limit: 100 }).toArray();
  }

  /** The webhook receiver's handler: a verified `contact.created` payload. */
  onWebhook(payload) {
    if (payload.type === 'contact.created') this.announced.set(payload.data.id, payload.data);
  }
}
