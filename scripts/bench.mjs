// The gateway's cost per request, measured against a running gateway (see scripts/bench).
// Usage: node scripts/bench.mjs [--quick]   (GATEHOUSE_URL, GATEHOUSE_ADMIN_TOKEN, GATEHOUSE_STATE)
// Prints a table and writes $GATEHOUSE_STATE/bench.json. Numbers are reported, never asserted;
// the run fails only when a scenario never got its expected answer (the gateway is broken). Other
// answers are counted in the "errors" column.
import { readFileSync, writeFileSync, statSync } from 'node:fs';
import { gzipSync } from 'node:zlib';
import { randomUUID } from 'node:crypto';
import { BASE, CONNECTIONS, benchProject, scenarios as single, drive } from './load.mjs';

const quick = process.argv.includes('--quick');
const STATE = process.env.GATEHOUSE_STATE;
const DURATION = quick ? 2 : 10;

const { project, owner, server, replayKey } = await benchProject();
const auth = { authorization: `Bearer ${server.key}`, 'content-type': 'application/json' };
const one = single({ server, replayKey });

// Proxy mode (SPEC §16: a proxied GET ≥ 0.8× GET /public/v1/me): a minimal origin in its own
// process on GATEHOUSE_BENCH_ORIGIN_PORT, which scripts/bench and scripts/test route /bench/ to.
const ORIGIN_PORT = process.env.GATEHOUSE_BENCH_ORIGIN_PORT;
let originProcess = null;
if (ORIGIN_PORT) {
  const { spawn } = await import('node:child_process');
  const server = `require('node:http').createServer((q, s) => { q.resume(); q.on('end', () => { s.writeHead(200, { 'content-type': 'application/json' }); s.end('{"ok":true}'); }); }).listen(${Number(ORIGIN_PORT)}, '127.0.0.1', () => console.log('ready'))`;
  originProcess = spawn(process.execPath, ['-e', server], { stdio: ['ignore', 'pipe', 'inherit'] });
  await new Promise((resolve) => originProcess.stdout.once('data', resolve));
}

const trackBody = (n) => JSON.stringify({
  batch: Array.from({ length: n }, (_, i) => ({ event_id: randomUUID(), event: 'Bench Event', anonymous_id: `a-${i}`, properties: { i } })),
});

const scenarios = [
  one.floor, one.guard, one.me,
  ...(ORIGIN_PORT ? [{ name: 'proxied GET /bench/items (local origin)', key: 'proxy', path: '/bench/items?page=1', headers: auth, expect: 200 }] : []),
  one.create, one.replay,
  ...[1, 10, 100, 500].map((n) => ({
    name: `POST /v1/track, batch of ${n}`, key: `track${n}`, method: 'POST', path: '/v1/track', headers: auth, events: n,
    setup: (req) => ({ ...req, body: trackBody(n) }), expect: 202,
  })),
];

/** The I/O one request of a scenario made, from the worker's per-request log lines. */
async function ioOf(s) {
  if (!STATE) return null;
  const ids = [];
  for (let i = 0; i < 5; i++) {
    const headers = { ...(s.headers ?? {}) };
    if (s.key === 'create') headers['idempotency-key'] = randomUUID();
    const res = await fetch(BASE + s.path, { method: s.method ?? 'GET', headers, body: s.key === 'create' || s.key === 'replay' ? s.body : undefined });
    ids.push(res.headers.get('x-request-id'));
  }
  await new Promise((r) => setTimeout(r, 500));
  const lines = readFileSync(`${STATE}/wrangler.log`, 'utf8').split('\n')
    .map((l) => { try { return JSON.parse(l.slice(l.indexOf('{'))); } catch { return null; } })
    .filter((l) => l && ids.includes(l.request_id));
  const avg = (k) => lines.reduce((sum, l) => sum + l[k], 0) / Math.max(lines.length, 1);
  return { durable_object_calls: avg('durable_object_calls'), d1_queries: avg('d1_queries'), kv_operations: avg('kv_operations') };
}

const results = {};
let failed = false;
for (const s of scenarios) {
  const r = await drive(s, DURATION);
  const wrong = r.non2xx + r.errors + r.timeouts;
  const statusOk = (r.statusCodeStats?.[String(s.expect)]?.count ?? 0) > 0;
  if (!statusOk) failed = true;
  if (wrong > 0 || !statusOk) console.error(`${s.name}: ${wrong} unexpected answers ${JSON.stringify(r.statusCodeStats)}`);
  results[s.key] = {
    name: s.name,
    requests_per_second: r.requests.average,
    // Accepted events only: a refused batch carried none.
    events_per_second: s.events ? (r['2xx'] * s.events) / r.duration : undefined,
    p50_ms: r.latency.p50,
    p99_ms: r.latency.p99,
    requests: r.requests.total,
    unexpected: wrong,
    io_per_request: ['me', 'create', 'replay', 'proxy'].includes(s.key) ? await ioOf(s) : undefined,
  };
}

/** A filtered log query over 100 000 audit rows of one project (rows inserted straight into the
 *  local audit D1, one a second over the last 28 hours), timed from the client: p50 and max of 20
 *  sequential requests — first with every row in D1 (hot), then after the minute cron's roll-up
 *  moved the rows older than AUDIT_HOT_SECONDS to R2 hour objects (cold; SPEC §18). */
async function logQueryOver100k() {
  if (!STATE) return null;
  const { execFileSync } = await import('node:child_process');
  const projectId = project.body.project_id;
  const sql = `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 100000)
    INSERT INTO audit_log (request_id, ts, project_id, key_id, method, path, route, status, response_bytes,
      response_time_ms, replayed, counted)
    SELECT 'seed-' || i, ${Date.now()} - i * 1000, '${projectId}', '${server.id}',
      CASE i % 3 WHEN 0 THEN 'POST' ELSE 'GET' END,
      '/public/v1/contacts/con_' || i, '/public/v1/contacts/{id}',
      CASE WHEN i % 10 = 0 THEN 404 WHEN i % 97 = 0 THEN 500 ELSE 200 END, 100, 5, 0, 1 FROM n`;
  // The queue consumer may still be writing the load's audit rows: SQLITE_BUSY means try again.
  const auditDb = async (command) => {
    for (let attempt = 1; ; attempt++) {
      try {
        return execFileSync('npx', ['wrangler', 'd1', 'execute', 'AUDIT_DB', '--local', '--persist-to', STATE, '--json', '--command', command.replace(/\s+/g, ' ')],
          { stdio: ['ignore', 'pipe', 'pipe'], encoding: 'utf8' });
      } catch (e) {
        if (attempt >= 10 || !String(e.stderr).includes('SQLITE_BUSY')) throw e;
        await new Promise((r) => setTimeout(r, 1000));
      }
    }
  };
  await auditDb(sql);
  const timed = async () => {
    const times = [];
    let rows = 0;
    for (let i = 0; i < 20; i++) {
      const t0 = performance.now();
      const res = await fetch(`${BASE}/public/v1/logs?status=4xx&method=GET&path=${encodeURIComponent('/public/v1/contacts/*')}&limit=50&to=${Date.now() - 2 * 3_600_000}`, { headers: { authorization: `Bearer ${owner.key}` } });
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
  const hotLeft = async () => JSON.parse(await auditDb(`SELECT count(*) AS n FROM audit_log WHERE project_id = '${projectId}' AND request_id LIKE 'seed-%' AND ts < ${cutoff}`))[0].results[0].n;
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
  ratios: { me_over_one_do: ratio('me', 'guard'), create_over_one_do: ratio('create', 'guard'), replay_over_one_do: ratio('replay', 'guard'),
    ...(results.proxy ? { proxied_get_over_me: ratio('proxy', 'me') } : {}) },
  wasm_bytes: { raw: statSync(new URL('../build/index_bg.wasm', import.meta.url)).size, gzip: gzipSync(wasm, { level: 9 }).length },
  scenarios: results,
  filtered_log_query_over_100k_rows: logQuery,
};

const pad = (v, n) => String(v).padEnd(n);
console.log(`\n${pad('scenario', 50)}${pad('req/s', 10)}${pad('events/s', 10)}${pad('p50 ms', 8)}${pad('p99 ms', 8)}${pad('errors', 8)}DO/D1/KV per request`);
for (const r of Object.values(results)) {
  const io = r.io_per_request ? `${r.io_per_request.durable_object_calls}/${r.io_per_request.d1_queries}/${r.io_per_request.kv_operations}` : '';
  console.log(`${pad(r.name, 50)}${pad(r.requests_per_second.toFixed(0), 10)}${pad(r.events_per_second?.toFixed(0) ?? '', 10)}${pad(r.p50_ms, 8)}${pad(r.p99_ms, 8)}${pad(r.unexpected, 8)}${io}`);
}
console.log(`\nratios vs one DO round trip: /me ${report.ratios.me_over_one_do.toFixed(2)}, create ${report.ratios.create_over_one_do.toFixed(2)}, replay ${report.ratios.replay_over_one_do.toFixed(2)}`);
if (results.proxy) console.log(`proxied GET over GET /public/v1/me: ${report.ratios.proxied_get_over_me.toFixed(2)} (SPEC §16: ≥ 0.8)`);
console.log(`wasm: ${report.wasm_bytes.raw} bytes raw, ${report.wasm_bytes.gzip} bytes gzip`);
if (logQuery) {
  console.log(`filtered GET /public/v1/logs over ${logQuery.rows} rows, 20 requests: hot p50 ${logQuery.hot.p50_ms} ms (max ${logQuery.hot.max_ms}), `
    + `cold p50 ${logQuery.cold.p50_ms} ms (max ${logQuery.cold.max_ms}); roll-up of the older rows ${logQuery.roll_up_ms} ms`);
}
if (STATE) {
  writeFileSync(`${STATE}/bench.json`, JSON.stringify(report, null, 2));
  console.log(`results: ${STATE}/bench.json`);
}
originProcess?.kill();
process.exit(failed ? 1 : 0);
