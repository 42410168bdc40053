// The TypeScript peer of the side-by-side benchmark (docs/performance.md; SPEC §16): what a
// TypeScript team would build on Workers instead of Gatehouse, for the routes both serve.
//   Hono 4 · hono-rate-limiter with the Durable Object store of @hono-rate-limiter/cloudflare (one
//   object per key) · an Idempotency-Key middleware over KV (src/idempotency.ts, our own minimal
//   equivalent of hono-idempotency's KV store) · the key found by its SHA-256 in D1 · an audit row
//   per request through a queue into D1, inserted one batch per message batch.
// Like Gatehouse it writes a JSON line with the I/O made before the response for each request
// answered 5xx, or for every request with REQUEST_LOG=all.
import { Hono, type Context } from 'hono';
import { createMiddleware } from 'hono/factory';
import { rateLimiter } from 'hono-rate-limiter';
import { DurableObjectRateLimiter, DurableObjectStore } from '@hono-rate-limiter/cloudflare';
import { idempotency, sha256Hex } from './idempotency';

export { DurableObjectRateLimiter };

type Bindings = {
  DB: D1Database;
  AUDIT_DB: D1Database;
  IDEMPOTENCY: KVNamespace;
  RATE_LIMITER: DurableObjectNamespace<DurableObjectRateLimiter>;
  AUDIT: Queue<AuditRow>;
  SETUP_TOKEN?: string;
  BENCH_ORIGIN?: string;
  REQUEST_LOG: 'errors' | 'all';
};
type ApiKey = { id: string; project_id: string; type: string; rate_limit: number };
type Meter = { durable_object_calls: number; d1_queries: number; kv_operations: number };
type Variables = {
  key?: ApiKey;
  rateLimit?: { limit: number; remaining: number; resetTime?: Date };
  // The request's bindings, each call counted in its meter.
  db: D1Database;
  kv: KVNamespace;
  limiter: DurableObjectNamespace<DurableObjectRateLimiter>;
};
type Env = { Bindings: Bindings; Variables: Variables };
type AuditRow = {
  request_id: string;
  ts: number;
  project_id: string | null;
  key_id: string | null;
  method: string;
  path: string;
  status: number;
  response_time_ms: number;
  idempotency_key: string | null;
  replayed: boolean;
};

/** The binding, with every call of the named methods counted. D1: one `prepare` per query here;
 *  the Durable Object store takes one stub (`get`) per call it makes. */
function counted<T extends object>(binding: T, methods: string[], count: () => void): T {
  return new Proxy(binding, {
    get(target, name) {
      const value = Reflect.get(target, name, target);
      if (typeof value !== 'function') return value;
      if (!methods.includes(String(name))) return value.bind(target);
      return (...args: unknown[]) => {
        count();
        return value.apply(target, args);
      };
    },
  });
}

const error = (c: Context, status: 400 | 401 | 404, code: string, message: string) =>
  c.json({ error: { code, message } }, status);

const app = new Hono<Env>();

// Every request: a request id, the meter, then its log line, and the audit row after the response.
app.use(async (c, next) => {
  const started = Date.now();
  const requestId = crypto.randomUUID();
  const meter: Meter = { durable_object_calls: 0, d1_queries: 0, kv_operations: 0 };
  c.set('db', counted(c.env.DB, ['prepare'], () => meter.d1_queries++));
  c.set('kv', counted(c.env.IDEMPOTENCY, ['get', 'put', 'delete'], () => meter.kv_operations++));
  c.set('limiter', counted(c.env.RATE_LIMITER, ['get'], () => meter.durable_object_calls++));
  await next();
  const ms = Date.now() - started;
  c.header('x-request-id', requestId);
  if (c.env.REQUEST_LOG === 'all' || c.res.status >= 500) {
    console.log(JSON.stringify({ request_id: requestId, method: c.req.method, path: c.req.path, status: c.res.status, ms, ...meter }));
  }
  const key = c.get('key');
  c.executionCtx.waitUntil(c.env.AUDIT.send({
    request_id: requestId,
    ts: started,
    project_id: key?.project_id ?? null,
    key_id: key?.id ?? null,
    method: c.req.method,
    path: c.req.path,
    status: c.res.status,
    response_time_ms: ms,
    idempotency_key: c.req.header('idempotency-key') ?? null,
    replayed: c.res.headers.get('idempotency-replayed') === 'true',
  }));
});

app.get('/health', (c) => c.json({ status: 'ok' }));

// The benchmark's seed: a new key of a new project with `per_minute` requests a minute.
app.post('/bench/setup', async (c) => {
  if (!c.env.SETUP_TOKEN || c.req.header('authorization') !== `Bearer ${c.env.SETUP_TOKEN}`) {
    return error(c, 401, 'UNAUTHORIZED', 'The setup token is missing or wrong.');
  }
  const { per_minute = 1_000_000 } = await c.req.json<{ per_minute?: number }>();
  const secret = `pk_${(await sha256Hex(crypto.randomUUID())).slice(0, 40)}`;
  const key = { id: `key_${crypto.randomUUID()}`, project_id: `prj_${crypto.randomUUID()}`, type: 'server', rate_limit: per_minute };
  await c.env.DB.prepare('INSERT INTO api_keys (key_hash, id, project_id, type, rate_limit, created_at) VALUES (?, ?, ?, ?, ?, ?)')
    .bind(await sha256Hex(secret), key.id, key.project_id, key.type, key.rate_limit, Date.now())
    .run();
  return c.json({ ...key, key: secret }, 201);
});

// The public API: the key by the SHA-256 of its secret, then its rate limit (one object per key).
const authenticate = createMiddleware<Env>(async (c, next) => {
  const secret = /^Bearer (\S+)$/.exec(c.req.header('authorization') ?? '')?.[1];
  const key = secret
    ? await c.var.db.prepare('SELECT id, project_id, type, rate_limit FROM api_keys WHERE key_hash = ?')
        .bind(await sha256Hex(secret))
        .first<ApiKey>()
    : null;
  if (!key) return error(c, 401, 'INVALID_API_KEY', 'The API key is missing or not valid.');
  c.set('key', key);
  await next();
});
const limit = createMiddleware<Env>((c, next) =>
  rateLimiter<Env>({
    windowMs: 60_000,
    limit: (c) => c.var.key!.rate_limit,
    keyGenerator: (c) => c.var.key!.id,
    store: new DurableObjectStore({ namespace: c.var.limiter }),
  })(c, next));
app.use('/public/v1/*', authenticate, limit);

// Proxy mode's twin (Gatehouse's UPSTREAMS): with BENCH_ORIGIN set, /bench/items is forwarded to it
// after the same key check and rate limit — the request's method, path, query and headers, the
// origin's answer as it is. Gatehouse also signs the forwarded request, adds identity headers,
// holds the answer to a deadline and filters the headers both ways.
app.use('/bench/items', authenticate, limit);
app.all('/bench/items', async (c) => {
  if (!c.env.BENCH_ORIGIN) return error(c, 404, 'NOT_FOUND', 'No such route.');
  const url = new URL(c.req.url);
  const answer = await fetch(new URL(url.pathname + url.search, c.env.BENCH_ORIGIN), {
    method: c.req.method, headers: c.req.raw.headers, body: c.req.raw.body, redirect: 'manual',
  });
  // A fetched response's headers are immutable; the middleware adds x-request-id.
  return new Response(answer.body, answer);
});
app.get('/public/v1/me', (c) => {
  const key = c.var.key!;
  const usage = c.var.rateLimit!;
  return c.json({
    key_id: key.id,
    type: key.type,
    project_id: key.project_id,
    rate_limit: { limit: usage.limit, remaining: usage.remaining, reset: usage.resetTime?.toISOString() },
  });
});

type ContactInput = { name?: string; phone?: string; email?: string; external_id?: string };
const CONTACT_FIELDS = ['name', 'phone', 'email', 'external_id'] as const;

app.post(
  '/public/v1/contacts',
  idempotency({ kv: (c) => c.var.kv, scope: (c) => c.var.key!.id }),
  async (c) => {
    const input = await c.req.json<ContactInput>().catch(() => null);
    const fields = CONTACT_FIELDS.map((f) => input?.[f] ?? null);
    if (!input || fields.some((v) => v !== null && typeof v !== 'string') || fields.every((v) => v === null)) {
      return error(c, 400, 'VALIDATION_ERROR', 'A contact is an object with at least one of name, phone, email, external_id (strings).');
    }
    const [name, phone, email, external_id] = fields;
    const contact = { id: `con_${crypto.randomUUID()}`, name, phone, email, external_id };
    const createdAt = Date.now();
    await c.var.db.prepare('INSERT INTO contacts (id, project_id, name, phone, email, external_id, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)')
      .bind(contact.id, c.var.key!.project_id, name, phone, email, external_id, createdAt)
      .run();
    return c.json({ ...contact, created_at: new Date(createdAt).toISOString() }, 201);
  },
);

app.notFound((c) => error(c, 404, 'NOT_FOUND', 'No such route.'));

export default {
  fetch: app.fetch,
  // The audit consumer: the whole message batch in one D1 batch (a redelivered row is ignored).
  async queue(batch: MessageBatch<AuditRow>, env: Bindings) {
    const insert = env.AUDIT_DB.prepare(`INSERT OR IGNORE INTO audit_log (request_id, ts, project_id, key_id, method, path, status,
      response_time_ms, idempotency_key, replayed) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`);
    await env.AUDIT_DB.batch(batch.messages.map(({ body: r }) =>
      insert.bind(r.request_id, r.ts, r.project_id, r.key_id, r.method, r.path, r.status, r.response_time_ms, r.idempotency_key, r.replayed ? 1 : 0)));
  },
} satisfies ExportedHandler<Bindings, AuditRow>;
