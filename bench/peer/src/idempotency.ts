// Idempotency-Key for POST over Workers KV: OUR OWN minimal equivalent of what the KV store of
// hono-idempotency (paveg/hono-idempotency 0.9) does, written for this benchmark because that
// package is not on the npm registry. It is not the package and shares no code with it.
//
// Per POST with an `Idempotency-Key`, under a scope (the API key's id) and the path:
//   * a completed record whose fingerprint (SHA-256 of the body) matches → its response, replayed
//     with `Idempotency-Replayed: true`; another fingerprint → 422;
//   * a record still in progress → 409 with `Retry-After: 1`;
//   * none → an in-progress record (the lock, with a random id), read back: another id there means
//     another request took the lock (409); else the handler, then the completed response. An answer
//     other than 2xx deletes the lock so that the client may try again. Records live 24 h.
// Like the package's KV store it is best effort: KV has no compare-and-set, so requests whose
// writes and read-backs interleave may all run the handler. The package also reads the record
// again before completing it (one more KV read on a fresh key); this one does not.
import type { Context, MiddlewareHandler } from 'hono';

type StoredResponse = { status: number; headers: Record<string, string>; body: string };
type IdempotencyRecord = { fingerprint: string; lock?: string; response?: StoredResponse };

const TTL_SECONDS = 24 * 60 * 60;

export type IdempotencyOptions = {
  /** The namespace of the records. */
  kv: (c: Context) => KVNamespace;
  /** Whose keys these are: the same key from two clients names two records. */
  scope: (c: Context) => string;
};

export function idempotency({ kv: namespace, scope }: IdempotencyOptions): MiddlewareHandler {
  return async (c, next) => {
    const key = c.req.header('idempotency-key');
    if (c.req.method !== 'POST' || !key) return next();
    const kv = namespace(c);
    const recordKey = `${scope(c)}:${c.req.path}:${encodeURIComponent(key)}`;
    const fingerprint = await sha256Hex(await c.req.text());

    const existing = await kv.get<IdempotencyRecord>(recordKey, 'json');
    if (existing?.response) {
      if (existing.fingerprint !== fingerprint) {
        return c.json({ error: { code: 'IDEMPOTENCY_KEY_REUSED', message: 'This Idempotency-Key was used with another body.' } }, 422);
      }
      const { status, headers, body } = existing.response;
      return new Response(body, { status, headers: { ...headers, 'idempotency-replayed': 'true' } });
    }
    const inProgress = () => {
      c.header('retry-after', '1');
      return c.json({ error: { code: 'IDEMPOTENCY_IN_PROGRESS', message: 'A request with this Idempotency-Key is in progress.' } }, 409);
    };
    if (existing) return inProgress();
    const lock = crypto.randomUUID();
    await kv.put(recordKey, JSON.stringify({ fingerprint, lock } satisfies IdempotencyRecord), { expirationTtl: TTL_SECONDS });
    if ((await kv.get<IdempotencyRecord>(recordKey, 'json'))?.lock !== lock) return inProgress();
    await next();
    const res = c.res;
    if (!res.ok) {
      await kv.delete(recordKey);
      return;
    }
    const body = await res.text();
    const response: StoredResponse = { status: res.status, headers: Object.fromEntries(res.headers), body };
    await kv.put(recordKey, JSON.stringify({ fingerprint, response } satisfies IdempotencyRecord), { expirationTtl: TTL_SECONDS });
    c.res = new Response(body, res);
  };
}

export async function sha256Hex(text: string): Promise<string> {
  const digest = await crypto.subtle.digest('SHA-256', new TextEncoder().encode(text));
  return [...new Uint8Array(digest)].map((b) => b.toString(16).padStart(2, '0')).join('');
}
