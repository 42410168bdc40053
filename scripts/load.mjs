// What scripts/bench.mjs and scripts/profile.mjs share: a bench project on a running gateway
// (GATEHOUSE_URL, GATEHOUSE_ADMIN_TOKEN), the request scenarios, and autocannon to drive one. The
// scenarios can also name another base URL: the benchmark's TypeScript peer (bench/peer).
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import autocannon from 'autocannon';

export const BASE = process.env.GATEHOUSE_URL;
export const ADMIN = process.env.GATEHOUSE_ADMIN_TOKEN;
export const CONNECTIONS = 8;

export async function api(method, path, { base = BASE, key, body, headers = {}, timeoutMs } = {}) {
  const res = await fetch(base + path, {
    method,
    signal: timeoutMs ? AbortSignal.timeout(timeoutMs) : undefined,
    headers: { 'content-type': 'application/json', ...(key ? { authorization: `Bearer ${key}` } : {}), ...headers },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: res.status, headers: res.headers, body: await res.json().catch(() => null) };
}

/** A project on the `bench` plan (a million requests a minute, which scripts/bench, scripts/profile
 *  and scripts/test define in PLANS): the limits are not what is measured. Its owner key, a server
 *  key, and one completed Idempotency-Key to replay. */
export async function benchProject() {
  const project = await api('POST', '/admin/v1/projects', { body: { name: 'bench', plan: 'bench' }, headers: { authorization: `Bearer ${ADMIN}` } });
  if (project.status !== 201) throw new Error(`no bench project (is the "bench" plan in PLANS?): ${JSON.stringify(project.body)}`);
  const owner = project.body.owner_key;
  const server = (await api('POST', '/public/v1/keys', { key: owner.key, body: { type: 'server' } })).body;
  return { project, owner, server, replayKey: await completedKey(BASE, server.key) };
}

/** An Idempotency-Key of a completed POST /public/v1/contacts by `key` on `base`, to replay. */
export async function completedKey(base, key) {
  const replayKey = `bench-replay-${randomUUID()}`;
  await api('POST', '/public/v1/contacts', { base, key, body: { name: 'Replayed' }, headers: { 'idempotency-key': replayKey } });
  return replayKey;
}

/** The single-request scenarios, by key (`floor`, `guard`, `me`, `proxy`, `create`, `replay`), on
 *  `url`; `proxy` needs /bench/ routed to the origin of startBenchOrigin. */
export function scenarios({ server, replayKey }, url = BASE) {
  const auth = { authorization: `Bearer ${server.key}`, 'content-type': 'application/json' };
  return {
    floor: { name: 'floor: GET /health (no auth, no storage)', key: 'floor', url, path: '/health', expect: 200 },
    guard: { name: 'one DO round trip: GET /admin/v1/health', key: 'guard', url, path: '/admin/v1/health', headers: { authorization: `Bearer ${ADMIN}` }, expect: 200 },
    me: { name: 'GET /public/v1/me', key: 'me', url, path: '/public/v1/me', headers: auth, expect: 200 },
    proxy: { name: 'proxied GET /bench/items (local origin)', key: 'proxy', url, path: '/bench/items?page=1', headers: auth, expect: 200 },
    create: { name: 'POST /public/v1/contacts, fresh Idempotency-Key', key: 'create', url, method: 'POST', path: '/public/v1/contacts', headers: auth,
      body: JSON.stringify({ name: 'Bench' }), setup: (req) => ({ ...req, headers: { ...req.headers, 'idempotency-key': randomUUID() } }), expect: 201 },
    replay: { name: 'replay of one completed key', key: 'replay', url, method: 'POST', path: '/public/v1/contacts', headers: { ...auth, 'idempotency-key': replayKey },
      body: JSON.stringify({ name: 'Replayed' }), expect: 201 },
  };
}

/** Cold keys (SPEC §20): `count` keys made by `make`, each used once on `base` so that its guard
 *  knows it (the steady state: no D1 query), for coldScenario. */
export async function coldKeys(make, base, count) {
  const keys = [];
  while (keys.length < count) keys.push(...await Promise.all(Array.from({ length: 10 }, make)));
  await Promise.all(keys.map((key) => api('GET', '/public/v1/me', { base, key })));
  return keys;
}

/** GET /public/v1/me over `keys` in turn, each far below LEASE_ABOVE_PER_SECOND, so every request
 *  asks its key's guard (no lease). */
export function coldScenario(keys, url = BASE) {
  let turn = 0;
  return {
    name: `GET /public/v1/me, ${keys.length} keys in turn (cold)`, key: 'cold', url, path: '/public/v1/me', expect: 200,
    setup: (req) => ({ ...req, headers: { ...req.headers, authorization: `Bearer ${keys[turn++ % keys.length]}` } }),
  };
}

/** The proxy scenario's origin: a minimal HTTP server in its own process on 127.0.0.1:`port`,
 *  answering `{"ok":true}`; stopped when this process exits. Resolves to its pid once it listens. */
export async function startBenchOrigin(port) {
  const { spawn } = await import('node:child_process');
  const server = `require('node:http').createServer((q, s) => { q.resume(); q.on('end', () => { s.writeHead(200, { 'content-type': 'application/json' }); s.end('{"ok":true}'); }); }).listen(${Number(port)}, '127.0.0.1', () => console.log('ready'))`;
  const origin = spawn(process.execPath, ['-e', server], { stdio: ['ignore', 'pipe', 'inherit'] });
  process.on('exit', () => origin.kill());
  await new Promise((resolve) => origin.stdout.once('data', resolve));
  return origin.pid;
}

/** CPU seconds (user + system) of a process so far, from /proc (Linux); NaN once it is gone. */
export function cpuSeconds(pid) {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(f[11]) + Number(f[12])) / 100;
  } catch { return NaN; }
}

/** The processes behind a worker under wrangler dev, from `worker_processes` in scripts/lib.sh
 *  ("role=pid …" in an environment variable): [[role, pid], …]. */
export function processesOf(value) {
  return String(value ?? '').split(/\s+/).filter(Boolean).map((p) => p.split('='));
}

/** The `gateway;dur` of a `Server-Timing` value (SPEC §16), or undefined. */
export function gatewayDuration(value) {
  const found = /(?:^|,)\s*gateway;dur=([0-9.]+)/.exec(String(value ?? ''));
  return found ? Number(found[1]) : undefined;
}

/** Drives one scenario with autocannon: CONNECTIONS connections for `duration` seconds, on its
 *  `url` (the gateway when it has none), as fast as they go or at its `rate` (requests/s). With
 *  `latencies`, every response time (ms) is added to it; with `gatewayMs`, every answer's
 *  `Server-Timing` `gateway;dur`. */
export function drive(s, duration, latencies, gatewayMs) {
  return new Promise((resolve, reject) => {
    const onResponse = (_status, _body, _context, headers) => {
      const ms = gatewayDuration(headers['server-timing'] ?? headers['Server-Timing']);
      if (ms !== undefined) gatewayMs.push(ms);
    };
    const instance = autocannon({
      url: s.url ?? BASE,
      connections: CONNECTIONS,
      duration,
      // A fixed rate across all connections (an open load), when the scenario names one.
      ...(s.rate ? { overallRate: s.rate } : {}),
      requests: [{
        method: s.method ?? 'GET', path: s.path, headers: s.headers, body: s.body,
        ...(s.setup ? { setupRequest: s.setup } : {}), ...(gatewayMs ? { onResponse } : {}),
      }],
    }, (err, result) => (err ? reject(err) : resolve(result)));
    if (latencies) instance.on('response', (_client, _status, _bytes, ms) => latencies.push(ms));
    autocannon.track(instance, { renderProgressBar: false, renderResultsTable: false, renderLatencyTable: false });
  });
}
