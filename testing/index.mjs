// @gatehouse/testing: the real Gatehouse worker, booted in-process on Miniflare (the workerd that
// wrangler runs), for an integrator's own test suite. A test clock moves Gatehouse's time; a
// webhook sink on loopback captures and verifies deliveries. See README.md.
import { createHmac, createPublicKey, randomBytes, timingSafeEqual, verify } from 'node:crypto';
import { appendFileSync, readFileSync, readdirSync } from 'node:fs';
import { createServer } from 'node:http';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Miniflare, Response } from 'miniflare';
import { created } from './created.mjs';

const DIST = join(dirname(fileURLToPath(import.meta.url)), 'dist');

/** The production defaults of `wrangler.toml` the kit starts from (copied by the build). */
const defaults = () => JSON.parse(readFileSync(join(DIST, 'config.json'), 'utf8'));

const secret = () => randomBytes(24).toString('hex');
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * The statements of a migration file: split on `;` outside quotes and comments (D1's `exec` takes
 * one statement per line, and ours span lines).
 */
export function statements(sql) {
  const out = [];
  let current = '';
  let quote = null;
  for (let i = 0; i < sql.length; i++) {
    const c = sql[i];
    if (quote) {
      current += c;
      if (c === quote) quote = null;
    } else if (c === '-' && sql[i + 1] === '-') {
      while (i < sql.length && sql[i] !== '\n') i++;
      current += '\n';
    } else if (c === "'" || c === '"') {
      quote = c;
      current += c;
    } else if (c === ';') {
      if (current.trim()) out.push(current.trim());
      current = '';
    } else {
      current += c;
    }
  }
  if (current.trim()) out.push(current.trim());
  return out;
}

/** Applies the migrations of `dir` the database has not had yet, each file in one batch. */
async function migrate(db, dir) {
  await db.exec('CREATE TABLE IF NOT EXISTS d1_migrations (id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT UNIQUE, applied_at TEXT)');
  const { results } = await db.prepare('SELECT name FROM d1_migrations').all();
  const applied = new Set(results.map((r) => r.name));
  for (const file of readdirSync(dir).filter((f) => f.endsWith('.sql') && !applied.has(f)).sort()) {
    const list = statements(readFileSync(join(dir, file), 'utf8'));
    const record = db.prepare("INSERT INTO d1_migrations (name, applied_at) VALUES (?, datetime('now'))").bind(file);
    await db.batch([...list.map((s) => db.prepare(s)), record]);
  }
}

/** Every table of a database the kit empties on `reset()` (its migrations' own table stays). */
async function emptyTables(db) {
  const { results } = await db
    .prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' AND name NOT LIKE '_cf_%' AND name != 'd1_migrations'")
    .all();
  // One batch is one transaction: foreign keys are checked at its end, when every table is empty.
  const deletes = results.map(({ name }) => db.prepare(`DELETE FROM "${name}"`));
  if (deletes.length) await db.batch([db.prepare('PRAGMA defer_foreign_keys = on'), ...deletes]);
}

/** The most webhook attempts one `clock.advance` stops at (a schedule has 6; a test has few). */
const MAX_STOPS = 1_000;

/**
 * The clock Gatehouse reads while the kit runs it: the real time plus an offset that only moves
 * forward. The worker and its objects ask the kit for the offset as each request, batch, cron run,
 * object command or alarm begins (the `TEST_CLOCK` binding, which only the kit provides).
 */
class Clock {
  #kit;
  offsetMs = 0;
  /** How many times the kit was reset: the worker reaches each Durable Object under a name of
   * this generation, so a reset starts every object afresh. */
  generation = 0;
  constructor(kit) {
    this.#kit = kit;
  }
  /** Gatehouse's time now. */
  now() {
    return new Date(Date.now() + this.offsetMs);
  }
  /**
   * Moves Gatehouse's time `seconds` forward and runs what falls inside, in order, as Stripe's
   * test clocks do: the clock stops at each webhook attempt due on the way (a retry an attempt
   * schedules inside the advance is attempted too), runs the minute cron there and waits for the
   * attempts; then it runs the cron once more at the new time (the webhook sweep, the audit
   * roll-up). At most `MAX_STOPS` stops in one advance.
   */
  async advance(seconds) {
    if (!(Number.isFinite(seconds) && seconds >= 0)) throw new RangeError('advance(seconds): seconds must be a number ≥ 0');
    const target = Date.now() + this.offsetMs + Math.round(seconds * 1000);
    for (let stops = 0; ; stops++) {
      const due = await this.#kit.nextAttemptBy(target);
      if (due === null) break;
      if (stops >= MAX_STOPS) throw new Error(`clock.advance: more than ${MAX_STOPS} webhook attempts due in ${seconds} s`);
      this.offsetMs = Math.max(this.offsetMs, due - Date.now());
      await this.#kit.tick();
    }
    this.offsetMs = Math.max(this.offsetMs, target - Date.now());
    await this.#kit.tick();
  }
  /** Moves Gatehouse's time to `time` (a Date, an RFC 3339 string or Unix ms); never backwards. */
  async set(time) {
    const at = new Date(time).getTime();
    if (Number.isNaN(at)) throw new RangeError(`clock.set: ${time} is not a time`);
    const now = Date.now() + this.offsetMs;
    if (at < now) throw new RangeError(`clock.set: ${new Date(at).toISOString()} is before the clock's ${new Date(now).toISOString()} (the clock only moves forward)`);
    await this.advance((at - now) / 1000);
  }
}

/** Deliveries captured by the kit's loopback receiver. */
class WebhookSink {
  #server;
  #url;
  #received = [];
  #taken = new Set();
  #failNext = 0;
  #secrets = new Set();
  #waiters = new Set();
  #kit;

  constructor(kit) {
    this.#kit = kit;
  }

  async listen() {
    this.#server = createServer((req, res) => {
      const chunks = [];
      req.on('data', (c) => chunks.push(c));
      req.on('end', () => {
        const body = Buffer.concat(chunks).toString('utf8');
        const status = this.#failNext > 0 ? 500 : 200;
        if (status === 500) this.#failNext--;
        this.#record(req.headers, body, status);
        res.writeHead(status, { 'content-type': 'text/plain' }).end(status === 200 ? 'ok' : 'failing as told');
      });
    });
    await new Promise((resolve) => this.#server.listen(0, '127.0.0.1', resolve));
    this.#url = `http://127.0.0.1:${this.#server.address().port}`;
    return this.#url;
  }

  get origin() {
    return this.#url;
  }

  #record(headers, body, status) {
    let payload = null;
    try { payload = JSON.parse(body); } catch { /* kept as text */ }
    const id = headers['webhook-id'];
    const delivery = {
      id,
      type: payload?.type ?? headers['x-gatehouse-event'] ?? null,
      data: payload?.data ?? null,
      payload,
      body,
      headers: { ...headers },
      verified: this.#verify(headers, body),
      attempt: this.#received.filter((d) => d.id === id).length + 1,
      answered: status,
      receivedAt: new Date(),
    };
    this.#received.push(delivery);
    for (const wake of this.#waiters) wake();
  }

  /**
   * Standard Webhooks signature against every key the kit knows — `v1` with a `whsec_` secret,
   * `v1a` (Ed25519) with a `whpk_` public key —; `null` when it knows none.
   */
  #verify(headers, body) {
    if (this.#secrets.size === 0) return null;
    const signed = Buffer.from(`${headers['webhook-id']}.${headers['webhook-timestamp']}.${body}`);
    const given = String(headers['webhook-signature'] ?? '').split(' ').map((s) => s.trim()).filter(Boolean);
    for (const s of this.#secrets) {
      if (s.startsWith('whpk_')) {
        // The raw 32-byte key as SubjectPublicKeyInfo: the fixed Ed25519 prefix, then the key.
        const der = Buffer.concat([Buffer.from('302a300506032b6570032100', 'hex'), Buffer.from(s.slice(5), 'base64')]);
        const key = createPublicKey({ key: der, format: 'der', type: 'spki' });
        if (given.some((g) => g.startsWith('v1a,') && verify(null, signed, key, Buffer.from(g.slice(4), 'base64')))) return true;
        continue;
      }
      const key = Buffer.from(s.replace(/^whsec_/, ''), 'base64');
      const expected = Buffer.from(`v1,${createHmac('sha256', key).update(signed).digest('base64')}`);
      if (given.some((g) => g.length === expected.length && timingSafeEqual(Buffer.from(g), expected))) return true;
    }
    return false;
  }

  /** A URL (on loopback) whose deliveries the kit captures; `path` tells subscriptions apart. */
  endpoint(path = '/webhooks') {
    return `${this.#url}${path.startsWith('/') ? path : `/${path}`}`;
  }

  /** Verifies deliveries with `secret` too (a subscription your own code made): a `v1` secret, or a `v1a` public key (`whpk_…`). */
  trust(secret) {
    this.#secrets.add(secret);
  }

  /**
   * Subscribes the project (with its owner key, or `key`) to `events` at this sink, signed with
   * `signature` (`v1`, the default, or `v1a`), and trusts the subscription's secret (or public
   * key). Answers the subscription as the API created it.
   */
  async subscribe(events, { key, path, signature } = {}) {
    const res = await fetch(`${this.#kit.url}/public/v1/webhooks`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key ?? this.#kit.project.keys.owner}`, 'content-type': 'application/json' },
      body: JSON.stringify({ url: this.endpoint(path), events, ...(signature ? { signature } : {}) }),
    });
    const created = await res.json();
    if (res.status !== 201) throw new Error(`subscribing the sink: ${res.status} ${JSON.stringify(created)}`);
    this.trust(created.secret ?? created.public_key);
    return created;
  }

  /** Answers 500 to the next `n` deliveries. */
  fail(n = 1) {
    this.#failNext = n;
  }

  /** Every delivery received so far (failed attempts included), oldest first. */
  all() {
    return [...this.#received];
  }

  /** Forgets what was received and any failures still to answer. */
  clear() {
    this.#received = [];
    this.#taken.clear();
    this.#failNext = 0;
  }

  /**
   * The next delivery answered 2xx that `next` has not returned yet (of `type`, when given),
   * waiting up to `timeout` ms for it.
   */
  async next({ type, timeout = 5000 } = {}) {
    const deadline = Date.now() + timeout;
    for (;;) {
      const found = this.#received.find((d) => d.answered < 300 && !this.#taken.has(d) && (!type || d.type === type));
      if (found) {
        this.#taken.add(found);
        return found;
      }
      const left = deadline - Date.now();
      if (left <= 0) {
        const seen = this.#received.map((d) => `${d.type} (${d.answered})`).join(', ') || 'none';
        throw new Error(`no ${type ?? ''} webhook delivery within ${timeout} ms (received: ${seen})`);
      }
      await new Promise((resolve) => {
        const wake = () => { this.#waiters.delete(wake); resolve(); };
        this.#waiters.add(wake);
        setTimeout(wake, Math.min(left, 250));
      });
    }
  }

  async close() {
    await new Promise((resolve) => this.#server?.close(resolve) ?? resolve());
  }
}

/** A running Gatehouse: see `Gatehouse.start`. */
export class Gatehouse {
  /** The gateway's base URL (`http://127.0.0.1:<port>`). */
  url;
  /** The admin token (`/admin/v1/…`). */
  adminToken;
  /** The project the kit made: its id and a key of each type. */
  project;
  clock;
  webhooks;
  #mf;
  /** `dist/config.json`: the bindings and settings of `wrangler.toml`, read once at start. */
  #base;
  #logs = [];

  /**
   * Boots the built worker in-process and makes a project with a key of each type.
   * Options: `plans` (the `PLANS` object), `upstreams` (the `UPSTREAMS` array), `vars` (any other
   * setting), `plan` (the project's plan, default `trial`), `persist` (a directory to keep state
   * in; default: none, state is in memory and gone at `stop()`), `log` (print the worker's log).
   */
  static async start(options = {}) {
    const kit = new Gatehouse();
    try {
      await kit.#boot(options);
    } catch (e) {
      await kit.stop().catch(() => {});
      throw e;
    }
    return kit;
  }

  async #boot({ plans, upstreams, vars = {}, plan, persist, log = false, logFile } = {}) {
    const started = Date.now();
    const base = (this.#base = defaults());
    this.clock = new Clock(this);
    this.webhooks = new WebhookSink(this);
    const sink = await this.webhooks.listen();
    this.adminToken = secret();
    this.plan = plan;
    const bindings = {
      ...base.vars,
      // The kit's own settings: a short attempt timeout, quick queue retries, the sweep taking
      // deliveries as soon as they are due (queue delays run on the real time, not the kit's clock),
      // and its sink allowed as a webhook target (no other private address is).
      WEBHOOK_TIMEOUT_MS: '5000',
      QUEUE_RETRY_BASE_SECONDS: '1',
      QUEUE_RETRY_MAX_SECONDS: '2',
      WEBHOOK_SWEEP_GRACE_SECONDS: '0',
      PRIVATE_WEBHOOK_ORIGINS: sink,
      KEY_PEPPER: secret(),
      WEBHOOK_SECRETS_KEY: secret(),
      AUDIT_SIGNING_KEY: randomBytes(32).toString('hex'),
      ADMIN_TOKEN: this.adminToken,
      EVENTS_SECRET: secret(),
      ...(plans ? { PLANS: JSON.stringify(plans) } : {}),
      ...(upstreams ? { UPSTREAMS: JSON.stringify(upstreams), ORIGIN_SECRET: secret() } : {}),
      ...Object.fromEntries(Object.entries(vars).map(([k, v]) => [k, typeof v === 'string' ? v : JSON.stringify(v)])),
    };
    const clock = this.clock;
    this.#mf = new Miniflare({
      host: '127.0.0.1',
      port: 0,
      modules: true,
      scriptPath: join(DIST, 'worker.mjs'),
      modulesRoot: DIST,
      modulesRules: [
        { type: 'ESModule', include: ['**/*.js', '**/*.mjs'] },
        { type: 'CompiledWasm', include: ['**/*.wasm'] },
      ],
      compatibilityDate: base.compatibility_date,
      compatibilityFlags: base.compatibility_flags,
      bindings,
      serviceBindings: { TEST_CLOCK: async () => new Response(`${clock.offsetMs} ${clock.generation}`) },
      name: base.name,
      durableObjects: Object.fromEntries(base.durable_objects.map((d) => [d.name, { className: d.class_name, useSQLite: true }])),
      kvNamespaces: Object.fromEntries(base.kv_namespaces.map((k) => [k.binding, k.id])),
      d1Databases: Object.fromEntries(base.d1_databases.map((d) => [d.binding, d.id])),
      r2Buckets: Object.fromEntries(base.r2_buckets.map((b) => [b.binding, b.id])),
      // `/cdn-cgi/handler/scheduled` runs the cron, as `wrangler dev --test-scheduled`'s `/__scheduled` does.
      unsafeTriggerHandlers: true,
      queueProducers: Object.fromEntries(base.queue_producers.map((q) => [q.binding, q.queue])),
      queueConsumers: Object.fromEntries(base.queue_consumers.map((q) => [q.queue, {
        maxBatchSize: q.max_batch_size,
        maxBatchTimeout: q.max_batch_timeout,
        maxRetries: q.max_retries,
        retryDelay: q.retry_delay,
        ...(q.dead_letter_queue ? { deadLetterQueue: q.dead_letter_queue } : {}),
      }])),
      // In memory unless `persist` names a directory.
      ...(persist ? { defaultPersistRoot: persist, d1Persist: true, kvPersist: true, r2Persist: true, durableObjectsPersist: true } : {}),
      handleRuntimeStdio: (stdout, stderr) => {
        for (const stream of [stdout, stderr]) {
          stream.on('data', (chunk) => {
            for (const line of String(chunk).split('\n').filter(Boolean)) {
              this.#logs.push(line);
              if (this.#logs.length > 2000) this.#logs.shift();
              if (log) console.error(`[gatehouse] ${line}`);
              if (logFile) appendFileSync(logFile, `${line}\n`);
            }
          });
        }
      },
    });
    const url = await this.#mf.ready;
    this.url = url.origin;
    await Promise.all(base.d1_databases.map(async (d) => migrate(await this.#mf.getD1Database(d.binding), join(DIST, d.migrations_dir))));
    this.project = await this.#makeProject();
    this.startedInMs = Date.now() - started;
  }

  async #makeProject() {
    const post = (path, token, body) => created(this.url, path, token, body);
    const made = await post('/admin/v1/projects', this.adminToken, { name: 'Test project', ...(this.plan ? { plan: this.plan } : {}) });
    // Made by the operator's route: the project's windows and quota stay untouched.
    const keys = { owner: made.owner_key.key };
    await Promise.all(['server', 'browser', 'cicd'].map(async (type) => {
      keys[type] = (await post(`/admin/v1/projects/${made.project_id}/keys`, this.adminToken, { type, name: `test ${type}` })).key;
    }));
    return { id: made.project_id, keys };
  }

  /**
   * An empty state with a fresh project: every row of the databases, every KV entry and R2 object
   * goes, the webhook sink forgets what it received, and every Durable Object starts afresh (the
   * worker reaches them under names of a new generation), so the previous test's keys are refused
   * (401) at once: no old key reaches a guard that still holds its record. The clock keeps its
   * time (it never moves back).
   */
  async reset() {
    const base = this.#base;
    this.clock.generation += 1;
    await Promise.all(base.d1_databases.map(async (d) => emptyTables(await this.#mf.getD1Database(d.binding))));
    const kv = await this.#mf.getKVNamespace(base.kv_namespaces[0].binding);
    for (let cursor; ;) {
      const page = await kv.list({ cursor });
      await Promise.all(page.keys.map((k) => kv.delete(k.name)));
      if (page.list_complete) break;
      cursor = page.cursor;
    }
    const bucket = await this.#mf.getR2Bucket(base.r2_buckets[0].binding);
    for (let cursor; ;) {
      const page = await bucket.list({ cursor });
      if (page.objects.length) await bucket.delete(page.objects.map((o) => o.key));
      if (!page.truncated) break;
      cursor = page.cursor;
    }
    this.webhooks.clear();
    this.project = await this.#makeProject();
  }

  /** When the next webhook attempt is due (Unix ms), if one is due by `at`. */
  async nextAttemptBy(at) {
    const db = await this.#mf.getD1Database('DB');
    const next = await db
      .prepare("SELECT min(scheduled_at) AS at FROM webhook_deliveries WHERE status = 'pending' AND scheduled_at <= ?")
      .bind(at)
      .first();
    return next?.at ?? null;
  }

  /** Runs the minute cron at the clock's time and waits for the deliveries due by then. */
  async tick() {
    const now = this.clock.now();
    const worker = await this.#mf.getWorker();
    await worker.scheduled({ cron: '* * * * *', scheduledTime: now });
    const db = await this.#mf.getD1Database('DB');
    const deadline = Date.now() + 15_000;
    for (;;) {
      const due = await db
        .prepare("SELECT count(*) AS n FROM webhook_deliveries WHERE status = 'pending' AND scheduled_at <= ?")
        .bind(now.getTime())
        .first();
      if (!due?.n) return;
      if (Date.now() > deadline) throw new Error(`clock: ${due.n} webhook deliveries due by ${now.toISOString()} not attempted within 15 s`);
      await sleep(25);
    }
  }

  /** The worker's log lines so far (its `console` output), newest last. */
  logs() {
    return [...this.#logs];
  }

  /** Stops the gateway and the sink; in-memory state is gone. */
  async stop() {
    await this.#mf?.dispose();
    await this.webhooks?.close();
  }
}

export default Gatehouse;
