// The gateway's cost per request, measured against a running gateway (see scripts/bench).
// Usage: node scripts/bench.mjs [--quick]   (GATEHOUSE_URL, GATEHOUSE_ADMIN_TOKEN, GATEHOUSE_STATE)
// With PEER_URL, PEER_STATE and PEER_SETUP_TOKEN (start_peer in scripts/lib.sh) it also drives the
// TypeScript peer (bench/peer; SPEC §16) through the scenarios both serve, alternating with the
// gateway round by round, and checks exactness on both sides. Without them it measures the gateway alone.
// Prints tables and writes $GATEHOUSE_STATE/bench.json. Numbers are reported, never asserted;
// the run fails only when a scenario never got its expected answer, the events consumer did not
// store every accepted event, or the gateway failed an exactness check (the gateway is broken).
// Other answers are counted in the "errors" column.
import { readFileSync, writeFileSync, statSync } from 'node:fs';
import { gzipSync } from 'node:zlib';
import { randomUUID } from 'node:crypto';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { ADMIN, BASE, CONNECTIONS, api, benchProject, coldKeys, coldScenario, completedKey, cpuSeconds, processesOf, scenarios as single, drive, startBenchOrigin } from './load.mjs';

const quick = process.argv.includes('--quick');
const STATE = process.env.GATEHOUSE_STATE;
const DURATION = quick ? 2 : 10;
const PEER = process.env.PEER_URL;
const PEER_STATE = process.env.PEER_STATE;
// Side by side: each round runs both (gateway first in even rounds, the peer first in odd ones),
// after a pause that lets the other side's queue consumers finish the previous run's work.
const ROUNDS = quick ? 1 : 3;
const SETTLE_MS = quick ? 500 : 2000;
// Before its rounds, each side of a scenario is driven this long unmeasured: the rounds measure the
// steady state. A fresh key's first creates make its claim objects (SPEC §20: up to 31 new
// Durable Objects, each a new SQLite database under wrangler dev), which stalled every request in
// flight and made all of create's slowest 1 % in a test run (docs/performance.md, runs 29–31).
const WARM_UP_SECONDS = quick ? 1 : 2;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const { project, owner, server, replayKey } = await benchProject();
const auth = { authorization: `Bearer ${server.key}`, 'content-type': 'application/json' };
const one = single({ server, replayKey });

/** A key of the peer (POST /bench/setup) with `perMinute` requests a minute. */
async function peerKey(perMinute) {
  const res = await api('POST', '/bench/setup', { base: PEER, body: { per_minute: perMinute }, headers: { authorization: `Bearer ${process.env.PEER_SETUP_TOKEN}` } });
  if (res.status !== 201) throw new Error(`the peer made no key: ${res.status} ${JSON.stringify(res.body)}`);
  return res.body.key;
}
// Proxy mode (SPEC §16: a proxied GET ≥ 0.8× GET /public/v1/me), when scripts/bench or scripts/test
// route /bench/ to GATEHOUSE_BENCH_ORIGIN_PORT (and the peer's BENCH_ORIGIN to the same origin).
const ORIGIN_PORT = process.env.GATEHOUSE_BENCH_ORIGIN_PORT;
// The peer's twins of the scenarios both serve, by key.
let peer = {};
if (PEER) {
  const key = await peerKey(1_000_000);
  const { floor, me, create, replay, proxy } = single({ server: { key }, replayKey: await completedKey(PEER, key) }, PEER);
  peer = { floor, me, create, replay, ...(ORIGIN_PORT ? { proxy } : {}) };
}

if (ORIGIN_PORT) await startBenchOrigin(ORIGIN_PORT);

const COLD_KEYS = quick ? 50 : 200;
one.cold = coldScenario(await coldKeys(async () => (await api('POST', '/public/v1/keys', { key: owner.key, body: { type: 'server' } })).body.key, BASE, COLD_KEYS));
if (PEER) peer.cold = coldScenario(await coldKeys(() => peerKey(1_000_000), PEER, COLD_KEYS), PEER);

const trackBody = (n) => JSON.stringify({
  batch: Array.from({ length: n }, (_, i) => ({ event_id: randomUUID(), event: 'Bench Event', anonymous_id: `a-${i}`, properties: { i } })),
});

// The scenarios both serve come first, so that the two workers have served the same requests when
// they are compared: under wrangler dev a worker's latency tail grows with the requests it has
// served (on both sides alike: p99 of /me from ≈ 36 to ≈ 55 ms over six rounds), and 20 s of the
// gateway's own scenarios run first made its /me p99 ≈ 30 ms worse than the fresher peer's.
const scenarios = [
  one.floor, one.me, one.cold, one.create, one.replay,
  ...(ORIGIN_PORT ? [one.proxy] : []),
  one.guard,
  ...[1, 10, 100, 500].map((n) => ({
    name: `POST /v1/track, batch of ${n}`, key: `track${n}`, method: 'POST', path: '/v1/track', headers: auth, events: n,
    setup: (req) => ({ ...req, body: trackBody(n) }), expect: 202,
  })),
];

// The processes of each side (scripts/bench and scripts/test pass them: `worker_processes` in
// scripts/lib.sh), whose CPU time per request each scenario reports, with this process's own (the
// client, autocannon): on a 2-core machine a side's throughput is bounded by all of them together.
const PROCESSES = [processesOf(process.env.GATEHOUSE_PIDS), processesOf(process.env.PEER_PIDS)];

/** drive(), adding to `cpu` the CPU seconds each process of `processes` and the client spent. */
async function driveCounted(s, processes, cpu, latencies, gatewayMs) {
  const before = processes.map(([, pid]) => cpuSeconds(pid));
  const own = process.cpuUsage();
  const result = await drive(s, DURATION, latencies, gatewayMs);
  const used = process.cpuUsage(own);
  processes.forEach(([role, pid], i) => { cpu[role] = (cpu[role] ?? 0) + cpuSeconds(pid) - before[i]; });
  cpu.client = (cpu.client ?? 0) + (used.user + used.system) / 1e6;
  return result;
}

let failed = false;
const sum = (runs, f) => runs.reduce((total, r) => total + f(r), 0);
/** The `p` quantile (0–1) of `values`, rounded; 0 when there are none. */
function percentileOf(values, p) {
  const sorted = [...values].sort((a, b) => a - b);
  return Math.round(sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * p))] ?? 0);
}

/** The runs of one side (`label`) of a scenario as one row: the mean of their req/s, and p50 and
 *  p99 over all their responses. */
function summarize(s, label, runs, latencies, gatewayMs = [], cpu = {}) {
  const wrong = sum(runs, (r) => r.non2xx + r.errors + r.timeouts);
  const expected = sum(runs, (r) => r.statusCodeStats?.[String(s.expect)]?.count ?? 0);
  if (expected === 0) failed = true;
  if (wrong > 0 || expected === 0) console.error(`${s.name}${label}: ${wrong} unexpected answers ${JSON.stringify(runs.map((r) => r.statusCodeStats))}`);
  const percentile = (p) => percentileOf(latencies, p);
  return {
    name: s.name,
    requests_per_second: sum(runs, (r) => r.requests.average) / runs.length,
    // Each round's, in the order run: a side that warms up or slows down shows here.
    rounds_requests_per_second: runs.map((r) => Math.round(r.requests.average)),
    // Accepted events only: a refused batch carried none.
    events_per_second: s.events ? (sum(runs, (r) => r['2xx']) * s.events) / sum(runs, (r) => r.duration) : undefined,
    events_accepted: s.events ? sum(runs, (r) => r['2xx']) * s.events : undefined,
    p50_ms: percentile(0.5),
    p99_ms: percentile(0.99),
    // The gateway's own time as its Server-Timing says (SPEC §16; none from the peer).
    gateway_p50_ms: gatewayMs.length ? percentileOf(gatewayMs, 0.5) : undefined,
    gateway_p99_ms: gatewayMs.length ? percentileOf(gatewayMs, 0.99) : undefined,
    requests: sum(runs, (r) => r.requests.total),
    unexpected: wrong,
    // Per request, in µs: each process's CPU time (NaN when it ended meanwhile), and their sum.
    cpu_us_per_request: Object.keys(cpu).length ? cpuPerRequest(cpu, sum(runs, (r) => r.requests.total)) : undefined,
  };
}

function cpuPerRequest(cpu, requests) {
  const each = Object.fromEntries(Object.entries(cpu).map(([role, seconds]) => [role, Math.round((1e6 * seconds) / Math.max(requests, 1))]));
  return { ...each, total: Object.values(each).reduce((a, b) => a + b, 0) };
}

/** The I/O one request of a scenario made, from its side's per-request log lines. */
async function ioOf(s, state) {
  if (!state) return null;
  const ids = [];
  for (let i = 0; i < 5; i++) {
    const headers = { ...(s.headers ?? {}) };
    if (s.key === 'create') headers['idempotency-key'] = randomUUID();
    const res = await fetch((s.url ?? BASE) + s.path, { method: s.method ?? 'GET', headers, body: s.key === 'create' || s.key === 'replay' ? s.body : undefined });
    ids.push(res.headers.get('x-request-id'));
  }
  await sleep(500);
  const lines = readFileSync(`${state}/wrangler.log`, 'utf8').split('\n')
    .map((l) => { try { return JSON.parse(l.slice(l.indexOf('{'))); } catch { return null; } })
    .filter((l) => l && ids.includes(l.request_id));
  if (lines.length === 0) return null; // REQUEST_LOG=errors: no line for a request answered 2xx
  const avg = (k) => lines.reduce((sum, l) => sum + l[k], 0) / Math.max(lines.length, 1);
  return { durable_object_calls: avg('durable_object_calls'), d1_queries: avg('d1_queries'), kv_operations: avg('kv_operations') };
}

// p99 at equal load: as fast as they go, the faster side loads the two shared cores more (wrangler,
// its proxy, the client), and its worker's thread waits for a core more often — its tail then
// measures the machine. So each side of the scenarios whose p99 SPEC §16 compares is also driven at
// the same fixed rate, 80 % of the slower side's throughput in its rounds, right after them (before
// the track scenarios leave the gateway's events consumer a backlog).
const EQUAL_LOAD = ['me', 'create', 'replay'];
async function equalLoad({ gatehouse: g, peer: p }, key) {
  const rate = Math.max(1, Math.floor(0.8 * Math.min(g.requests_per_second, p.requests_per_second)));
  for (const [side, s] of [[g, one[key]], [p, peer[key]]]) {
    await sleep(SETTLE_MS);
    const latencies = [];
    const run = await drive({ ...s, rate }, DURATION, latencies);
    side.equal_load = { requests_per_second: rate, p50_ms: percentileOf(latencies, 0.5), p99_ms: percentileOf(latencies, 0.99), non_2xx: run.non2xx };
  }
}

const results = {};
const sideBySide = {};
for (const s of scenarios) {
  const twin = peer[s.key];
  const sides = [s, ...(twin ? [twin] : [])].map((scenario, i) => ({ s: scenario, processes: PROCESSES[i], cpu: {}, runs: [], latencies: [], gatewayMs: [] }));
  if (twin) for (const side of sides) await drive(side.s, WARM_UP_SECONDS);
  for (let round = 0; round < (twin ? ROUNDS : 1); round++) {
    for (const side of round % 2 === 0 ? sides : [...sides].reverse()) {
      if (twin) await sleep(SETTLE_MS);
      side.runs.push(await driveCounted(side.s, side.processes, side.cpu, side.latencies, side.gatewayMs));
    }
  }
  const [gatehouse, other] = sides.map((side, i) => summarize(side.s, i ? ' (peer)' : '', side.runs, side.latencies, side.gatewayMs, side.cpu));
  results[s.key] = { ...gatehouse, io_per_request: ['me', 'create', 'replay', 'proxy'].includes(s.key) ? await ioOf(s, STATE) : undefined };
  if (twin) sideBySide[s.key] = { gatehouse: results[s.key], peer: { ...other, io_per_request: await ioOf(twin, PEER_STATE) } };
  if (twin && EQUAL_LOAD.includes(s.key)) await equalLoad(sideBySide[s.key], s.key);
}

const scenariosEnd = performance.now();

/** The rows of a command on a local D1 database (`binding`: DB, AUDIT_DB, AUDIT_DB_1) of the side whose state
 *  folder is `state`; SQLITE_BUSY (its queue consumer is writing) means try again. The command runs
 *  as a child process this process does not wait for synchronously: a blocked event loop keeps in
 *  fetch's pool a kept-alive connection the local server closed meanwhile (workerd closes one idle
 *  for 5 s; fetch drops its own after 4 s, when its timer can run), and the next request sent on it
 *  fails with "other side closed". */
const execFileAsync = promisify(execFile);
async function localDb(state, command, binding = 'AUDIT_DB') {
  for (let attempt = 1; ; attempt++) {
    try {
      const args = ['wrangler', 'd1', 'execute', binding, '--local', '--persist-to', state, '--json', '--command', command.replace(/\s+/g, ' ')];
      return JSON.parse((await execFileAsync('npx', args, { encoding: 'utf8', timeout: 60_000, maxBuffer: 64 << 20 })).stdout)[0].results;
    } catch (e) {
      if (attempt >= 10 || !String(e.stderr).includes('SQLITE_BUSY')) throw e;
      await sleep(1000);
    }
  }
}

/** Waits until the events consumer has stored every event the track scenarios had accepted (and
 *  the count stays put for 3 s: a batch autocannon left in flight is accepted too), at most five
 *  minutes from `since` (the end of the scenarios). Under wrangler dev each consumer batch writes
 *  its events to the local D1 in one synchronous SQLite transaction on the worker's one thread,
 *  which holds every request for seconds (docs/performance.md, "Found"): the exactness burst is
 *  sent once the events backlog is stored, as the peer's is sent with none. A count that fails
 *  (SQLITE_BUSY throughout, a timeout) counts as unchanged. */
async function eventsStored(accepted, since) {
  if (!STATE || accepted === 0) return null;
  const count = async () => {
    try {
      return (await localDb(STATE, `SELECT count(*) AS n FROM events WHERE project_id = '${project.body.project_id}'`, 'DB'))[0].n;
    } catch {
      return null;
    }
  };
  let stored = 0;
  let changed = performance.now();
  let allStoredMs = null;
  for (;;) {
    const n = await count();
    if (n !== null && n !== stored) { stored = n; changed = performance.now(); }
    if (stored >= accepted && allStoredMs === null) allStoredMs = Math.round(changed - since);
    const waited = performance.now() - since;
    if ((stored >= accepted && performance.now() - changed >= 3000) || waited > 300_000) {
      return { accepted, stored, all_stored_after_ms: allStoredMs, waited_ms: Math.round(waited) };
    }
    await sleep(1000);
  }
}

/** Exactness on one side (SPEC §4 and §5), with its key `key` and a key limited to 30 requests a
 *  minute: 20 identical POSTs at once with one Idempotency-Key create one contact (the distinct ids
 *  of the 201 answers), and of 100 requests at once exactly 30 pass. Each of the 100 carries its own
 *  User-Agent and waits at most a minute: one left unanswered is looked up in the side's audit log
 *  (`state`), which tells whether the worker answered it (and the answer was lost on its way back
 *  through wrangler's local proxy) or never finished it (the peer's audit rows have no User-Agent).
 *  Those still waiting after 20 s are counted (`waiting_after_20_s`); from then on one more request
 *  every 5 s releases any GET that wrangler dev's proxy parked (docs/performance.md, "Found"). */
async function exactness(url, key, limitedKey, state) {
  // Open the connections first: otherwise the first request is answered before the others connect.
  await Promise.all(Array.from({ length: 100 }, () => fetch(`${url}/health`).then((r) => r.arrayBuffer())));
  const once = `bench-once-${randomUUID()}`;
  const posts = await Promise.all(Array.from({ length: 20 }, () =>
    api('POST', '/public/v1/contacts', { base: url, key, body: { name: 'Once' }, headers: { 'idempotency-key': once } })));
  // Gatehouse's window is the wall-clock minute: a burst across its end would see two windows.
  while (new Date().getSeconds() >= 57) await sleep(250);
  const burst = randomUUID();
  let pending = 100;
  const gets = Array.from({ length: 100 }, (_, i) => {
    const agent = `bench-exactness-${burst}-${i}`;
    return api('GET', '/public/v1/me', { base: url, key: limitedKey, headers: { 'user-agent': agent }, timeoutMs: 60_000 })
      .catch((e) => ({ status: 'unanswered', agent, error: String(e.cause?.code ?? e.name ?? e) }))
      .finally(() => { pending--; });
  });
  // wrangler dev's proxy parks a GET whose forward failed until its next request comes.
  let waiting = 0;
  let nudge;
  const next = () => {
    waiting ||= pending;
    fetch(`${url}/health`).then((r) => r.arrayBuffer(), () => {});
    nudge = setTimeout(next, 5_000);
  };
  nudge = setTimeout(next, 20_000);
  const answers = await Promise.all(gets);
  clearTimeout(nudge);
  const statuses = (answers) => answers.reduce((n, a) => ({ ...n, [a.status]: (n[a.status] ?? 0) + 1 }), {});
  const unanswered = answers.filter((g) => g.status === 'unanswered');
  let audited;
  if (unanswered.length > 0 && state) {
    await sleep(5000); // the audit consumer's batch
    const prefix = `bench-exactness-${burst}-`;
    const query = `SELECT user_agent, status, response_time_ms FROM audit_log WHERE substr(user_agent, 1, ${prefix.length}) = '${prefix}'`;
    const found = (await Promise.all(['AUDIT_DB', 'AUDIT_DB_1'].map((db) => localDb(state, query, db)))).flat();
    const lost = new Set(unanswered.map((u) => u.agent));
    audited = { rows_of_the_100: found.length, rows_of_the_unanswered: found.filter((r) => lost.has(r.user_agent)) };
  }
  return {
    contacts_created_by_20_identical_posts: new Set(posts.filter((p) => p.status === 201).map((p) => p.body.id)).size,
    post_statuses: statuses(posts),
    passed_of_100_at_limit_30: answers.filter((g) => g.status === 200).length,
    get_statuses: statuses(answers),
    ...(waiting > 0 ? { waiting_after_20_s: waiting } : {}),
    ...(unanswered.length > 0 ? { unanswered: unanswered.map((u) => u.error), audited } : {}),
  };
}
let exact = null;
let backlog = null;
if (PEER) {
  // The owner key of a project on the `trial` plan: 30 requests a minute (scripts/bench and
  // scripts/test define it in PLANS).
  const trial = await api('POST', '/admin/v1/projects', { body: { name: 'bench-trial', plan: 'trial' }, headers: { authorization: `Bearer ${ADMIN}` } });
  if (trial.status !== 201) throw new Error(`no trial project: ${JSON.stringify(trial.body)}`);
  backlog = await eventsStored(Object.values(results).reduce((n, r) => n + (r.events_accepted ?? 0), 0), scenariosEnd);
  if (backlog && backlog.stored < backlog.accepted) {
    failed = true;
    console.error(`the events consumer stored ${backlog.stored} of ${backlog.accepted} accepted events in ${backlog.waited_ms} ms`);
  }
  exact = { gatehouse: await exactness(BASE, server.key, trial.body.owner_key.key, STATE), peer: await exactness(PEER, await peerKey(1_000_000), await peerKey(30)) };
  const g = exact.gatehouse;
  if (g.contacts_created_by_20_identical_posts !== 1 || g.passed_of_100_at_limit_30 !== 30 || g.unanswered) {
    failed = true;
    console.error(`the gateway failed an exactness check: ${JSON.stringify(g)}`);
  } else if (g.waiting_after_20_s) {
    console.error(`${g.waiting_after_20_s} requests of the gateway's burst were still waiting after 20 s; all were answered once more requests came`);
  }
}

/** A filtered log query over 100 000 audit rows of one project (rows inserted straight into the
 *  local audit D1, one a second over the last 28 hours), timed from the client: p50 and max of 20
 *  sequential requests — first with every row in D1 (hot), then after the minute cron's roll-up
 *  moved the rows older than AUDIT_HOT_SECONDS to R2 hour objects (cold; SPEC §18). */
async function logQueryOver100k() {
  if (!STATE) return null;
  const projectId = project.body.project_id;
  // The project's own audit database (SPEC §20: AUDIT_DB, AUDIT_DB_1, … by project).
  const [{ audit_db: index }] = await localDb(STATE, `SELECT audit_db FROM projects WHERE id = '${projectId}'`, 'DB');
  const db = index > 0 ? `AUDIT_DB_${index}` : 'AUDIT_DB';
  const sql = `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 100000)
    INSERT INTO audit_log (request_id, ts, project_id, key_id, method, path, route, status, response_bytes,
      response_time_ms, replayed, counted)
    SELECT 'seed-' || i, ${Date.now()} - i * 1000, '${projectId}', '${server.id}',
      CASE i % 3 WHEN 0 THEN 'POST' ELSE 'GET' END,
      '/public/v1/contacts/con_' || i, '/public/v1/contacts/{id}',
      CASE WHEN i % 10 = 0 THEN 404 WHEN i % 97 = 0 THEN 500 ELSE 200 END, 100, 5, 0, 1 FROM n`;
  await localDb(STATE, sql, db);
  const timed = async () => {
    const times = [];
    let rows = 0;
    for (let i = 0; i < 20; i++) {
      const t0 = performance.now();
      const url = `${BASE}/public/v1/logs?status=4xx&method=GET&path=${encodeURIComponent('/public/v1/contacts/*')}&limit=50&to=${Date.now() - 2 * 3_600_000}`;
      const init = { headers: { authorization: `Bearer ${owner.key}` } };
      // A kept-alive connection that idled through `wrangler d1 execute` may be closed by the
      // server just as it is reused: that one request is sent again.
      const res = await fetch(url, init).catch((e) => { if (e.cause?.code === 'UND_ERR_SOCKET') return fetch(url, init); throw e; });
      rows = (await res.json()).data?.length ?? 0;
      times.push(performance.now() - t0);
    }
    times.sort((a, b) => a - b);
    return { p50_ms: Math.round(times[10]), max_ms: Math.round(times[19]), rows_per_page: rows };
  };
  const hot = await timed();
  const t0 = performance.now();
  // The roll-up moves whole hours: rows before the start of the hour an hour ago.
  const cutoff = Math.floor((Date.now() - 3_600_000) / 3_600_000) * 3_600_000;
  await fetch(`${BASE}/__scheduled?cron=${encodeURIComponent('* * * * *')}`);
  const hotLeft = async () => (await localDb(STATE, `SELECT count(*) AS n FROM audit_log WHERE project_id = '${projectId}' AND request_id LIKE 'seed-%' AND ts < ${cutoff}`, db))[0].n;
  while (await hotLeft() > 0 && performance.now() - t0 < 300_000) await new Promise((r) => setTimeout(r, 500));
  const rollUpMs = Math.round(performance.now() - t0);
  const cold = await timed();
  return { rows: 100000, hot, cold, roll_up_ms: rollUpMs };
}
const logQuery = await logQueryOver100k();

const ratio = (a, b) => results[a].requests_per_second / results[b].requests_per_second;
const wasm = readFileSync(new URL('../build/index_bg.wasm', import.meta.url));
const report = {
  mode: quick ? 'quick' : 'full',
  duration_seconds: DURATION,
  connections: CONNECTIONS,
  machine: `${process.platform} ${process.arch}, node ${process.version}`,
  ratios: { me_over_one_do: ratio('me', 'guard'), cold_keys_over_one_do: ratio('cold', 'guard'), create_over_one_do: ratio('create', 'guard'), replay_over_one_do: ratio('replay', 'guard'),
    ...(results.proxy ? { proxied_get_over_me: ratio('proxy', 'me') } : {}) },
  wasm_bytes: { raw: statSync(new URL('../build/index_bg.wasm', import.meta.url)).size, gzip: gzipSync(wasm, { level: 9 }).length },
  scenarios: results,
  filtered_log_query_over_100k_rows: logQuery,
  ...(PEER ? {
    peer: {
      what: 'bench/peer: Hono, hono-rate-limiter with its Durable Object store, an Idempotency-Key middleware over KV, the key by SHA-256 in D1, an audit row per request through a queue into D1',
      packages: JSON.parse(readFileSync(new URL('../bench/peer/package.json', import.meta.url))).dependencies,
      rounds: ROUNDS,
      ratios: Object.fromEntries(Object.entries(sideBySide).map(([k, v]) => [k, v.gatehouse.requests_per_second / v.peer.requests_per_second])),
      scenarios: sideBySide,
      exactness: exact,
      events_backlog_before_the_burst: backlog,
    },
  } : {}),
};

const pad = (v, n) => String(v).padEnd(n);
console.log(`\n${pad('scenario', 50)}${pad('req/s', 10)}${pad('events/s', 10)}${pad('p50 ms', 8)}${pad('p99 ms', 8)}${pad('gateway;dur p50/p99', 21)}${pad('errors', 8)}DO/D1/KV per request`);
for (const r of Object.values(results)) {
  const io = r.io_per_request ? `${r.io_per_request.durable_object_calls}/${r.io_per_request.d1_queries}/${r.io_per_request.kv_operations}` : '';
  const own = r.gateway_p50_ms === undefined ? '—' : `${r.gateway_p50_ms}/${r.gateway_p99_ms}`;
  console.log(`${pad(r.name, 50)}${pad(r.requests_per_second.toFixed(0), 10)}${pad(r.events_per_second?.toFixed(0) ?? '', 10)}${pad(r.p50_ms, 8)}${pad(r.p99_ms, 8)}${pad(own, 21)}${pad(r.unexpected, 8)}${io}`);
}
console.log(`\nratios vs one DO round trip: /me ${report.ratios.me_over_one_do.toFixed(2)}, create ${report.ratios.create_over_one_do.toFixed(2)}, replay ${report.ratios.replay_over_one_do.toFixed(2)}`);
if (results.proxy) console.log(`proxied GET over GET /public/v1/me: ${report.ratios.proxied_get_over_me.toFixed(2)} (SPEC §16: ≥ 0.8)`);
console.log(`wasm: ${report.wasm_bytes.raw} bytes raw, ${report.wasm_bytes.gzip} bytes gzip`);
if (logQuery) {
  console.log(`filtered GET /public/v1/logs over ${logQuery.rows} rows, 20 requests: hot p50 ${logQuery.hot.p50_ms} ms (max ${logQuery.hot.max_ms}), `
    + `cold p50 ${logQuery.cold.p50_ms} ms (max ${logQuery.cold.max_ms}); roll-up of the older rows ${logQuery.roll_up_ms} ms`);
}
if (PEER) {
  console.log(`\nside by side with the TypeScript peer (bench/peer), ${ROUNDS} round${ROUNDS > 1 ? 's' : ''} of ${DURATION} s each, alternating; G = Gatehouse, P = peer`);
  console.log(`${pad('scenario', 50)}${pad('req/s G', 10)}${pad('req/s P', 10)}${pad('G/P', 7)}${pad('p50 G/P', 10)}${pad('p99 G/P', 10)}${pad('errors G/P', 12)}DO/D1/KV per request G | P`);
  const io = (r) => (r.io_per_request ? `${r.io_per_request.durable_object_calls}/${r.io_per_request.d1_queries}/${r.io_per_request.kv_operations}` : '-');
  for (const [key, { gatehouse: g, peer: p }] of Object.entries(sideBySide)) {
    console.log(`${pad(g.name, 50)}${pad(g.requests_per_second.toFixed(0), 10)}${pad(p.requests_per_second.toFixed(0), 10)}${pad(report.peer.ratios[key].toFixed(2), 7)}`
      + `${pad(`${g.p50_ms}/${p.p50_ms}`, 10)}${pad(`${g.p99_ms}/${p.p99_ms}`, 10)}${pad(`${g.unexpected}/${p.unexpected}`, 12)}${io(g)} | ${io(p)}`);
  }
  console.log('p99 at equal load (each side at 80 % of the slower side\'s req/s above), ms G/P:');
  for (const key of EQUAL_LOAD.filter((k) => sideBySide[k]?.gatehouse.equal_load)) {
    const { gatehouse: g, peer: p } = sideBySide[key];
    console.log(`  ${pad(g.name, 48)}at ${g.equal_load.requests_per_second} req/s: p50 ${g.equal_load.p50_ms}/${p.equal_load.p50_ms}, p99 ${g.equal_load.p99_ms}/${p.equal_load.p99_ms}`);
  }
  const cpuOf = (r) => (r.cpu_us_per_request ? Object.entries(r.cpu_us_per_request).map(([role, us]) => `${role} ${us}`).join(', ') : '-');
  if (PROCESSES[0].length) {
    console.log('CPU per request, µs (the worker\'s workerd, wrangler\'s proxy workerd, wrangler, the client autocannon; G | P):');
    for (const { gatehouse: g, peer: p } of Object.values(sideBySide)) console.log(`  ${pad(g.name, 48)}${cpuOf(g)} | ${cpuOf(p)}`);
  }
  if (sideBySide.proxy) {
    const over = (side) => sideBySide.proxy[side].requests_per_second / sideBySide.me[side].requests_per_second;
    console.log(`proxied GET over GET /public/v1/me, G | P: ${over('gatehouse').toFixed(2)} | ${over('peer').toFixed(2)}`);
  }
  console.log('exactness (G | P): contacts created by 20 identical POSTs at once with one Idempotency-Key '
    + `${exact.gatehouse.contacts_created_by_20_identical_posts} | ${exact.peer.contacts_created_by_20_identical_posts} (1 expected); `
    + `of 100 requests at once at 30 a minute, passed ${exact.gatehouse.passed_of_100_at_limit_30} | ${exact.peer.passed_of_100_at_limit_30} (30 expected)`);
  if (backlog?.all_stored_after_ms != null) console.log(`before the burst: the events consumer had stored all ${backlog.accepted} accepted events ${backlog.all_stored_after_ms} ms after the scenarios ended`);
}
if (STATE) {
  writeFileSync(`${STATE}/bench.json`, JSON.stringify(report, null, 2));
  console.log(`results: ${STATE}/bench.json`);
}
process.exit(failed ? 1 : 0);
