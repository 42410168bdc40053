// A small service that keeps its customers as Gatehouse contacts: the code under test in this
// example. It retries as Gatehouse's clients do (docs/api/clients.md): a 429 waits for its
// Retry-After, a 5xx or a lost answer is retried with the same Idempotency-Key, and nothing else is.
import { randomUUID } from 'node:crypto';

export class ContactsService {
  /**
   * `baseUrl` and `apiKey`: the gateway and a server key. `sleep(ms)`: how the service waits
   * before a retry (a test passes one that moves the kit's clock). `attempts`: per call.
   */
  constructor({ baseUrl, apiKey, sleep = (ms) => new Promise((r) => setTimeout(r, ms)), attempts = 5 }) {
    Object.assign(this, { baseUrl, apiKey, sleep, attempts });
    /** Contacts announced by `contact.created` webhooks, by id. */
    this.announced = new Map();
  }

  /** Creates a contact once, however many times the request has to be sent. */
  async create(name, { idempotencyKey = randomUUID() } = {}) {
    return this.#call('POST', '/public/v1/contacts', { name }, idempotencyKey);
  }

  async list() {
    return (await this.#call('GET', '/public/v1/contacts?limit=100')).data;
  }

  /** The webhook receiver's handler: a verified `contact.created` payload. */
  onWebhook(payload) {
    if (payload.type === 'contact.created') this.announced.set(payload.data.id, payload.data);
  }

  async #call(method, path, body, idempotencyKey) {
    for (let attempt = 1; ; attempt++) {
      let res;
      try {
        res = await fetch(this.baseUrl + path, {
          method,
          headers: {
            authorization: `Bearer ${this.apiKey}`,
            ...(body ? { 'content-type': 'application/json' } : {}),
            ...(idempotencyKey ? { 'idempotency-key': idempotencyKey } : {}),
          },
          body: body ? JSON.stringify(body) : undefined,
        });
      } catch (e) {
        // A lost answer: safe to repeat only with the same key (or a read).
        if (attempt >= this.attempts || !(idempotencyKey || method === 'GET')) throw e;
        await this.sleep(backoff(attempt));
        continue;
      }
      const json = await res.json().catch(() => null);
      if (res.ok) return json;
      const code = json?.error?.code;
      const retryable = res.status === 429 && code === 'RATE_LIMIT_EXCEEDED'
        || (res.status === 409 && json?.error?.retryable === true)
        || res.status === 500
        || ([408, 502, 503, 504].includes(res.status) && (idempotencyKey || method === 'GET'));
      if (!retryable || attempt >= this.attempts) {
        throw Object.assign(new Error(`${method} ${path}: ${res.status} ${code}`), { status: res.status, code, body: json });
      }
      const after = Number(res.headers.get('retry-after'));
      await this.sleep(Number.isFinite(after) && after > 0 ? after * 1000 : backoff(attempt));
    }
  }
}

const backoff = (attempt) => Math.min(30_000, 1000 * 2 ** (attempt - 1)) * (0.5 + Math.random() / 2);
