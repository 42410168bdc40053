// Shared helpers for the end-to-end suite: real HTTP to the worker under `wrangler dev`.
// scripts/test sets GATEHOUSE_URL and GATEHOUSE_ADMIN_TOKEN.
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { createServer } from 'node:http';
import { connect } from 'node:net';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Agent, fetch, Headers } from 'undici';

export const BASE = process.env.GATEHOUSE_URL ?? 'http://127.0.0.1:8787';
export const ADMIN_TOKEN = process.env.GATEHOUSE_ADMIN_TOKEN;
/** The path that runs the cron at once: `wrangler dev --test-scheduled`'s, or the test kit's. */
export const SCHEDULED = process.env.GATEHOUSE_SCHEDULED_PATH ?? '/__scheduled';

// A fresh connection per request: the local server closes idle keep-alive connections on its own
// schedule, and a request sent on one it just closed fails with "other side closed".
const dispatcher = new Agent({ pipelining: 0 });

/**
 * The client address this test process presents (IPv6 documentation range, RFC 3849). Failed
 * authentications are limited per address, so each test file gets its own.
 */
export const CLIENT_IP = randomIp();

export function randomIp() {
  const hex = () => Math.floor(Math.random() * 0x10000).toString(16);
  return `2001:db8:${hex()}:${hex()}::${hex()}`;
}

const UUID_V7 = /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

/**
 * One request (to `base`, the test gateway unless named). `idem` becomes the Idempotency-Key header;
 * `key` becomes `Authorization: Bearer <key>`; `body` is JSON-encoded unless it is a string;
 * `timeoutMs` aborts the request (a TimeoutError) when no answer came by then. Answers
 * {status, headers, body (parsed JSON or text), text}.
 */
/**
 * wrangler dev's own 503, not the gateway's: its proxy lost the connection to the local runtime
 * before the worker had the request (no X-Request-Id; workers-sdk#14641: a keep-alive timeout
 * race, "the worker never restarted"), and it retries only GET and HEAD itself.
 */
export const wranglerLostIt = (status, headers, text) =>
  status === 503 && !headers.get('x-request-id') && text.includes('Your worker restarted mid-request');

/**
 * Runs `work` (a request) and, once it has waited 20 s, sends a GET /health to `base` every 5 s
 * until it ends: wrangler dev's proxy parks a GET whose forward to the local runtime failed until
 * the next request reaches its port (docs/performance.md, "Found: wrangler dev's proxy parks
 * requests"; one such GET waited 300 s in a full run of 2026-12-06, then failed). The nudge is
 * that next request; it changes nothing the gateway answers or measures.
 */
export async function unparked(base, work) {
  let timer;
  const nudge = () => fetch(`${base}/health`, { dispatcher }).then((r) => r.arrayBuffer()).catch(() => {});
  const start = setTimeout(() => { nudge(); timer = setInterval(nudge, 5_000); }, 20_000);
  try {
    return await work();
  } finally {
    clearTimeout(start);
    clearInterval(timer);
  }
}

/** The same nudge, every 5 s until stopped, for a browser test's page loads (stop() ends it). */
export function nudging(base = BASE) {
  const timer = setInterval(() => fetch(`${base}/health`, { dispatcher }).then((r) => r.arrayBuffer()).catch(() => {}), 5_000);
  return { stop: () => clearInterval(timer) };
}

/**
 * One request to the gateway; answers {status, headers, body (JSON when it parses), text}. A
 * request wrangler dev lost on its way to the worker (above) is sent again, up to four times, as
 * a client would; `resend: false` leaves that to the caller.
 */
export async function call(method, path, { key, body, headers = {}, idem, base = BASE, timeoutMs, resend = true } = {}) {
  // A Headers object keeps repeated names, so a test can send a header twice. An address the test
  // gives replaces this file's (appended, the worker would see "CLIENT_IP, address": no address).
  const h = new Headers();
  for (const [name, value] of Array.isArray(headers) ? headers : Object.entries(headers)) h.append(name, value);
  if (!h.has('cf-connecting-ip')) h.set('cf-connecting-ip', CLIENT_IP);
  if (key !== undefined) h.set('authorization', `Bearer ${key}`);
  if (idem !== undefined) h.set('idempotency-key', idem);
  const init = { method, headers: h, dispatcher };
  if (timeoutMs !== undefined) init.signal = AbortSignal.timeout(timeoutMs);
  if (body !== undefined) {
    init.body = typeof body === 'string' ? body : JSON.stringify(body);
    if (!h.has('content-type')) h.set('content-type', 'application/json');
  }
  let res = await unparked(base, () => fetch(base + path, init));
  let text = await res.text();
  for (let tries = 1; resend && tries < 5 && wranglerLostIt(res.status, res.headers, text); tries += 1) {
    res = await unparked(base, () => fetch(base + path, init));
    text = await res.text();
  }
  let parsed = text;
  try { parsed = JSON.parse(text); } catch { /* not JSON */ }
  return { status: res.status, headers: res.headers, body: parsed, text };
}

/**
 * Runs the worker's every-minute cron once through wrangler dev's scheduled path, over `call`'s
 * fresh connection (a kept-alive one the local server has closed fails with 'other side closed').
 */
export function runCron({ base = BASE, timeoutMs = 120_000 } = {}) {
  return call('GET', `${SCHEDULED}?cron=${encodeURIComponent('* * * * *')}`, { base, timeoutMs });
}

/** Asserts the SPEC §3 error shape and returns the error object. */
export function assertError(res, status, code) {
  assert.equal(res.status, status, `expected ${status} ${code}, got ${res.status}: ${res.text}`);
  assert.match(res.headers.get('content-type') ?? '', /^application\/json/);
  const e = res.body.error;
  assert.ok(e, `no error object in ${res.text}`);
  assert.equal(e.code, code);
  assert.equal(typeof e.message, 'string');
  assert.equal(typeof e.retryable, 'boolean');
  assert.equal(typeof e.details, 'object');
  assert.equal(e.request_id, res.headers.get('x-request-id'));
  return e;
}

export function assertRequestId(res) {
  const id = res.headers.get('x-request-id');
  assert.match(id ?? '', UUID_V7, `X-Request-Id ${id} is not a UUIDv7`);
  return id;
}

/**
 * A new project through the admin bootstrap, on the trial plan unless `plan` names another (only
 * the operator chooses plans); answers {projectId, owner: {id, key, prefix}}.
 */
export async function createProject(name = 'e2e project', { plan, base } = {}) {
  const res = await call('POST', '/admin/v1/projects', {
    body: { name, plan },
    headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
    base,
  });
  assert.equal(res.status, 201, res.text);
  return { projectId: res.body.project_id, owner: res.body.owner_key };
}

/** A new key of `type` in the project of `ownerKey`; answers the creation body (with `key`). */
export async function createKey(ownerKey, type, extra = {}, { base } = {}) {
  const res = await call('POST', '/public/v1/keys', { key: ownerKey, body: { type, ...extra }, base });
  assert.equal(res.status, 201, res.text);
  return res.body;
}

/** The seconds of the current UTC month: the `w` of the "month" policy in RateLimit-Policy. */
export function monthSeconds(now = new Date()) {
  return (Date.UTC(now.getUTCFullYear(), now.getUTCMonth() + 1, 1) - Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), 1)) / 1000;
}

export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Waits for a fresh rate window when fewer than `needSeconds` remain in the current wall-clock
 * minute, so a test that counts within one window never straddles a boundary.
 */
export async function freshWindow(needSeconds = 15) {
  const left = 60_000 - (Date.now() % 60_000);
  if (left < needSeconds * 1000) await sleep(left + 250);
}

/** Lines the worker logged (JSON objects), from the wrangler dev log that scripts/test keeps. */
export async function workerLog() {
  const { readFile } = await import('node:fs/promises');
  const text = await readFile(`${process.env.GATEHOUSE_STATE}/wrangler.log`, 'utf8');
  return text.split('\n').flatMap((line) => {
    const start = line.indexOf('{"');
    if (start < 0) return [];
    try { return [JSON.parse(line.slice(start))]; } catch { return []; }
  });
}

/** A fresh unique Idempotency-Key. */
export const idemKey = () => `idem-${crypto.randomUUID()}`;

/** A project on the business plan (2000/min) with a server key, for tests that make many calls. */
export async function businessProject() {
  const project = await createProject('e2e business project', { plan: 'business' });
  const server = await createKey(project.owner.key, 'server');
  return { ...project, server };
}

/** Every item of a paginated list, following next_cursor. */
export async function listAll(path, key) {
  const items = [];
  let cursor = null;
  do {
    const sep = path.includes('?') ? '&' : '?';
    const res = await call('GET', `${path}${sep}limit=200${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`, { key });
    if (res.status !== 200) throw new Error(`${path}: ${res.status} ${res.text}`);
    items.push(...res.body.data);
    cursor = res.body.next_cursor;
  } while (cursor);
  return items;
}

/**
 * Runs a command to its end without blocking this process (a receiver it serves keeps answering
 * meanwhile: a `spawnSync` of wrangler, seconds on a loaded machine, once held a webhook's answer
 * past the gateway's 3 s and earned a retry). Answers {status, stdout, stderr}; `status` is null
 * when it could not start or ran past `timeout` ms (default 2 minutes) and was stopped.
 */
export function run(command, args, { timeout = 120_000, ...options } = {}) {
  return new Promise((resolve) => {
    const child = spawn(command, args, { ...options, timeout, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (chunk) => { stdout += chunk; });
    child.stderr.setEncoding('utf8').on('data', (chunk) => { stderr += chunk; });
    child.on('error', (e) => resolve({ status: null, stdout, stderr: `${stderr}${e.message}` }));
    child.on('close', (status) => resolve({ status, stdout, stderr }));
  });
}

/**
 * Rows of a query against a local D1 of the running gateway (wrangler d1 execute): `DB` (keys and
 * resources) unless `database` names an audit database (`AUDIT_DB`, `AUDIT_DB_1`: see `auditDbOf`);
 * the suite's gateway unless `state` names another's state folder.
 */
export async function d1(sql, database = 'DB', state = process.env.GATEHOUSE_STATE) {
  // This is a second process on the gateway's local SQLite file: while the gateway writes, SQLite
  // answers SQLITE_BUSY (no such contention exists on D1 itself), so that one error is retried.
  for (let attempt = 1; ; attempt++) {
    const out = await run('npx', ['wrangler', 'd1', 'execute', database, '--local', '--persist-to',
      state, '--json', '--command', sql], { cwd: ROOT });
    if (out.status === 0) return JSON.parse(out.stdout)[0].results;
    if (attempt >= 5 || !/SQLITE_BUSY|database is locked/.test(out.stderr + out.stdout)) {
      throw new Error(`d1 execute failed: ${out.stderr}${out.stdout}`);
    }
    await sleep(250 * attempt);
  }
}

/**
 * What `sql` selects in every KeyGuard object of a gateway's local state (one SQLite file each),
 * read-only with Python's sqlite3 (Node 20 has no SQLite of its own): `[{ object, rows }]`, for
 * the objects that have the tables the query names. Counts what the objects keep (SPEC §23).
 */
export function guardRows(stateDir, sql) {
  const script = `
import json, os, sqlite3, sys
root, sql = sys.argv[1], sys.argv[2]
out = []
for name in sorted(os.listdir(root)):
    if not name.endswith('.sqlite') or name == 'metadata.sqlite':
        continue
    db = sqlite3.connect('file:' + os.path.join(root, name) + '?mode=ro', uri=True, timeout=5)
    db.row_factory = sqlite3.Row
    try:
        out.append({'object': name, 'rows': [dict(r) for r in db.execute(sql)]})
    except sqlite3.OperationalError as e:
        if 'no such table' not in str(e):
            raise
    finally:
        db.close()
print(json.dumps(out))
`;
  const out = spawnSync('python3', ['-c', script, join(stateDir, 'v3/do/gatehouse-KeyGuardObject'), sql],
    { encoding: 'utf8' });
  if (out.status !== 0) throw new Error(`reading the objects' storage failed: ${out.stderr}`);
  return JSON.parse(out.stdout);
}

/** The binding of the audit database that holds a project's rows (SPEC §20: `projects.audit_db`). */
export async function auditDbOf(projectId) {
  const [row] = await d1(`SELECT audit_db FROM projects WHERE id = '${projectId}'`);
  assert.ok(row, `project ${projectId} is stored`);
  return row.audit_db > 0 ? `AUDIT_DB_${row.audit_db}` : 'AUDIT_DB';
}

/** Polls `probe` until it returns a truthy value or `ms` pass; answers the last value. */
export async function eventually(probe, ms = 15_000) {
  const end = Date.now() + ms;
  let value;
  while (!(value = await probe()) && Date.now() < end) await sleep(250);
  return value;
}

/**
 * An HTTP server on 127.0.0.1 standing in for a webhook receiver or a proxied origin; it keeps
 * every request it got. Once a request's body is in, `respond(request, res)` answers it with a
 * status, or `{status, headers, body}` (200 and an empty body unless named), or a promise of one;
 * or with nothing, when it answers through `res` itself or never (a receiver that hangs). Without
 * `respond` every request gets 200 "ok". `port` 0 takes a free port.
 *
 * A request is {method, url, path (the url without its query), headers, raw (the body's bytes),
 * body (the same as text), n (its number among the requests to its path, from 1), at (Unix ms it
 * arrived), closedAt (Unix ms its response closed, null until then)}.
 *
 * Answers {url (http://127.0.0.1:port), port, received (every request, in order), requestsTo(path),
 * waitFor(path, n, ms) (whether `path` got n requests within ms), endpoint(respond, name) (a fresh
 * path /name-N answered by its own `respond`), close()}.
 */
export async function receiver(respond = () => ({ status: 200, body: 'ok' }), { port = 0 } = {}) {
  const received = [];
  const byPath = new Map();
  const routes = new Map();
  const requestsTo = (path) => byPath.get(path) ?? [];
  const server = createServer((req, res) => {
    const request = { method: req.method, url: req.url, path: req.url.split('?')[0], headers: req.headers, at: Date.now(), closedAt: null };
    res.on('close', () => { request.closedAt = Date.now(); });
    const chunks = [];
    // A request the gateway breaks off (a body over its limit) just ends here, unrecorded.
    req.on('error', () => {});
    req.on('data', (c) => chunks.push(c));
    req.on('end', async () => {
      request.raw = Buffer.concat(chunks);
      request.body = request.raw.toString();
      request.n = requestsTo(request.path).length + 1;
      byPath.set(request.path, [...requestsTo(request.path), request]);
      received.push(request);
      const answer = await (routes.get(request.path) ?? respond)(request, res);
      if (answer === undefined || answer === null) return;
      const { status = 200, headers = {}, body = '' } = typeof answer === 'number' ? { status: answer } : answer;
      res.writeHead(status, headers).end(body);
    });
  });
  await new Promise((resolve) => server.listen(port, '127.0.0.1', resolve));
  const { port: bound } = server.address();
  let endpoints = 0;
  return {
    url: `http://127.0.0.1:${bound}`,
    port: bound,
    received,
    requestsTo,
    waitFor: (path, n, ms = 15_000) => eventually(async () => requestsTo(path).length >= n, ms),
    endpoint(answer, name = 'hook') {
      const path = `/${name}-${++endpoints}`;
      routes.set(path, answer);
      return path;
    },
    close() {
      // Connections still open (a hanging answer, a keep-alive one) would keep it from closing.
      server.closeAllConnections();
      return new Promise((resolve) => server.close(resolve));
    },
  };
}

/** A port on 127.0.0.1 that nothing listens on (connections to it are refused). */
export function freePort() {
  return new Promise((resolve) => {
    const s = createServer().listen(0, '127.0.0.1', () => { const { port } = s.address(); s.close(() => resolve(port)); });
  });
}

/** The repository's root: where the project's scripts run. */
export const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');

/** Whether anything accepts a connection on 127.0.0.1:`port` (a server left behind, say). */
export function listening(port) {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1');
    socket.on('connect', () => { socket.destroy(); resolve(true); });
    socket.on('error', () => resolve(false));
  });
}

/**
 * Builds the `gatehouse` CLI (crates/gatehouse-cli) and answers a runner: `gatehouse(args, {key, input})` runs it
 * against the test gateway (with GATEHOUSE_KEY when `key` is given) and answers {status, stdout,
 * stderr}; `gatehouse.bin` is the binary's path.
 */
export function buildCli() {
  const build = spawnSync('cargo', ['build', '--quiet', '-p', 'gatehouse-cli'], { cwd: ROOT, stdio: 'inherit' });
  assert.equal(build.status, 0, 'the gatehouse binary builds');
  const meta = JSON.parse(spawnSync('cargo', ['metadata', '--format-version', '1', '--no-deps'], { cwd: ROOT, encoding: 'utf8' }).stdout);
  const bin = join(meta.target_directory, 'debug', 'gatehouse');
  const gatehouse = (args, { key, input } = {}) => {
    const env = { ...process.env, GATEHOUSE_URL: BASE };
    delete env.GATEHOUSE_KEY;
    if (key) env.GATEHOUSE_KEY = key;
    const out = spawnSync(bin, args, { input, encoding: 'utf8', env });
    return { status: out.status, stdout: out.stdout, stderr: out.stderr };
  };
  gatehouse.bin = bin;
  return gatehouse;
}

/**
 * A gateway of the test's own on `stateDir` (as scripts/test starts its own: scripts/lib.sh
 * `start_test_gateway`), with more `--var`s (`vars`) and an `--env-file` when given. Answers
 * {base, log (its wrangler log's path), stop()}.
 */
export async function startGateway(stateDir, { vars = {}, envFile } = {}) {
  const args = Object.entries(vars).map(([k, v]) => `--var "${k}:${v}"`);
  if (envFile) args.push(`--env-file "${envFile}"`);
  const script = `source scripts/lib.sh && port=$(free_port) && start_test_gateway "${stateDir}" "$port" ${args.join(' ')} >&2 && echo "READY $port $GATEWAY_PID" && sleep 900`;
  const child = spawn('bash', ['-c', script], { cwd: ROOT, stdio: ['ignore', 'pipe', 'inherit'] });
  const line = await new Promise((resolve, reject) => {
    let out = '';
    child.stdout.on('data', (c) => { out += c; if (out.includes('\n')) resolve(out.trim()); });
    child.on('exit', (code) => reject(new Error(`the gateway on ${stateDir} did not start (${code})`)));
  });
  const [, port, pid] = line.split(' ');
  return {
    base: `http://127.0.0.1:${port}`,
    log: `${stateDir}/wrangler.log`,
    stop: () => {
      spawnSync('bash', ['-c', `source scripts/lib.sh && stop_group ${pid}`], { cwd: ROOT });
      child.kill();
    },
  };
}
