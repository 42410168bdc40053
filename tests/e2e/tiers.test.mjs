// SPEC §18 end to end: the audit log's two tiers. 100,000 rows of a day two days ago (past the hot
// window, within retention) go into the audit database in one statement (the load run through the
// consumer's own path is scripts/bench); one minute-cron roll-up moves them to R2 hour objects
// with their summaries and deletes them from D1; the log API then finds every one of them by time
// range and by request id, across the tier boundary, each exactly once; a second roll-up changes
// nothing; the day's archive is assembled from its hour objects.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { gunzipSync } from 'node:zlib';
import { BASE, auditDbOf, call, createProject, d1, listAll, sleep, workerLog, runCron } from './harness.mjs';

const DAY = 86_400_000;
const HOUR = 3_600_000;
const ROWS = 100_000;

/** A statement on a local audit D1; SQLITE_BUSY (the gateway writing at that moment) is tried again. */
async function auditDb(sql, database) {
  for (let attempt = 1; ; attempt++) {
    try {
      return await d1(sql, database);
    } catch (e) {
      if (attempt >= 10 || !String(e.message).includes('SQLITE_BUSY')) throw e;
      await sleep(1000);
    }
  }
}

/** Runs the minute cron and waits up to `waitMs` for its roll-up line (logged only when it moved
 * something); answers the line and the wall time. */
async function rollUp(waitMs = 300_000) {
  const before = (await workerLog()).filter((l) => l.component === 'audit_roll_up').length;
  const t0 = performance.now();
  const res = await runCron();
  assert.equal(res.status, 200, res.text);
  let line;
  for (let waited = 0; !line && waited < waitMs; waited += 250) {
    line = (await workerLog()).filter((l) => l.component === 'audit_roll_up')[before];
    if (!line) await sleep(250);
  }
  return { line, wallMs: Math.round(performance.now() - t0) };
}

async function download(ownerKey, date) {
  const res = await fetch(`${BASE}/public/v1/logs/archives/${date}`, { headers: { authorization: `Bearer ${ownerKey}` } });
  assert.equal(res.status, 200);
  assert.equal(res.headers.get('content-type'), 'application/gzip');
  return Buffer.from(await res.arrayBuffer());
}

/** The UUIDv7 SQL makes for row `i` at `ts`: the 48-bit ms, version 7, variant 8, then `i`. */
const v7 = (ts, i) => {
  const h = ts.toString(16).padStart(12, '0');
  return `${h.slice(0, 8)}-${h.slice(8)}-7${(i % 4096).toString(16).padStart(3, '0')}-8${(Math.floor(i / 4096) % 4096).toString(16).padStart(3, '0')}-${i.toString(16).padStart(12, '0')}`;
};

test('100,000 rows roll up into hour objects; the log finds each once by time range and by request id; a second roll-up changes nothing', { timeout: 900_000 }, async (t) => {
  const { projectId, owner } = await createProject('tiers at scale', { plan: 'business' });
  const db = await auditDbOf(projectId);
  const dayStart = Math.floor(Date.now() / DAY) * DAY - 2 * DAY;
  const date = new Date(dayStart).toISOString().slice(0, 10);
  const ts = (i) => dayStart + Math.floor(i / 2) * 1700; // two rows per ms value: chunk bounds fall on ties
  // Seeded as counted (the aggregates are the consumer's business), with UUIDv7 ids made in SQL.
  const hex = (expr, width) => `printf('%0${width}x', ${expr})`;
  const seed = `WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < ${ROWS - 1}),
    r(i, ts) AS (SELECT i, ${dayStart} + (i / 2) * 1700 FROM n)
    INSERT INTO audit_log (request_id, ts, project_id, key_id, method, path, route, status, response_bytes,
      response_time_ms, replayed, counted)
    SELECT substr(${hex('ts', 12)}, 1, 8) || '-' || substr(${hex('ts', 12)}, 9, 4) || '-7' || ${hex('i % 4096', 3)}
        || '-8' || ${hex('(i / 4096) % 4096', 3)} || '-' || ${hex('i', 12)},
      ts, '${projectId}', 'key_seed', CASE WHEN i % 10 = 0 THEN 'POST' ELSE 'GET' END,
      '/public/v1/contacts/con_' || i, '/public/v1/contacts/{id}', CASE WHEN i % 1000 = 7 THEN 503 ELSE 200 END,
      100, 5, 0, 1 FROM r`;
  const seeded = performance.now();
  await auditDb(seed.replace(/\s+/g, ' '), db);
  t.diagnostic(`seeded ${ROWS} rows in ${Math.round(performance.now() - seeded)} ms`);
  const inD1 = async () => (await auditDb(`SELECT count(*) AS n FROM audit_log WHERE project_id = '${projectId}' AND ts < ${dayStart + DAY}`, db))[0].n;
  assert.equal(await inD1(), ROWS);
  const sample = [0, 1, 4999, 5000, 5001, 77_777, ROWS - 1];
  assert.equal((await call('GET', `/public/v1/logs/${v7(ts(4999), 4999)}`, { key: owner.key })).status, 200, 'hot before');

  const first = await rollUp();
  t.diagnostic(`roll-up: ${JSON.stringify(first.line)}, wall ${first.wallMs} ms`);
  assert.ok(first.line, 'the roll-up logged its run');
  assert.equal(first.line.done, true, 'one run moves the whole backlog');
  assert.ok(first.line.rolled_rows >= ROWS, JSON.stringify(first.line));
  assert.equal(await inD1(), 0, 'no row of the day is left in D1');
  const objects = await auditDb(`SELECT key, rows, first_ts, last_ts FROM audit_objects WHERE project_id = '${projectId}' ORDER BY first_ts`, db);
  assert.equal(objects.reduce((n, o) => n + o.rows, 0), ROWS, 'the summaries account for every row');
  assert.ok(objects.every((o) => Math.floor(o.first_ts / HOUR) === Math.floor(o.last_ts / HOUR)), 'an object holds one hour');
  t.diagnostic(`${objects.length} objects for ${ROWS} rows over ${Math.ceil((ts(ROWS - 1) - dayStart) / HOUR)} hours`);

  // By request id: one lookup each, from the cold tier.
  for (const i of sample) {
    const res = await call('GET', `/public/v1/logs/${v7(ts(i), i)}`, { key: owner.key });
    assert.equal(res.status, 200, res.text);
    assert.deepEqual([res.body.path, res.body.status], [`/public/v1/contacts/con_${i}`, i % 1000 === 7 ? 503 : 200]);
  }
  // By time range across two hours and a filter that skips objects by their summary.
  const from = dayStart + 5 * HOUR + 123_456;
  const to = from + 2 * HOUR;
  const t0 = performance.now();
  const range = await listAll(`/public/v1/logs?from=${from}&to=${to}`, owner.key);
  const pagedMs = Math.round(performance.now() - t0);
  const expected = Array.from({ length: ROWS }, (_, i) => i).filter((i) => ts(i) >= from && ts(i) <= to);
  t.diagnostic(`time range: ${range.length} rows in ${Math.ceil(range.length / 200)} pages, ${pagedMs} ms`);
  assert.equal(range.length, expected.length);
  assert.equal(new Set(range.map((r) => r.request_id)).size, range.length, 'each row once');
  assert.ok(range.every((r, i) => i === 0 || Date.parse(range[i - 1].ts) > Date.parse(r.ts)
    || (range[i - 1].ts === r.ts && range[i - 1].request_id > r.request_id)), 'newest first');
  const errors = await listAll(`/public/v1/logs?status=5xx&from=${dayStart}&to=${dayStart + DAY}`, owner.key);
  assert.equal(errors.length, ROWS / 1000);
  // A page that spans both tiers: today's rows (hot) and the day's (cold), newest first.
  assert.equal((await call('GET', '/public/v1/logs?limit=1', { key: owner.key })).status, 200);
  let both = [];
  for (let waited = 0; !both.some((r) => r.path === '/public/v1/logs?limit=1') && waited < 20_000; waited += 500) {
    await sleep(500);
    both = await listAll(`/public/v1/logs?from=${dayStart + DAY - HOUR}`, owner.key);
  }
  assert.ok(both.some((r) => r.path === '/public/v1/logs?limit=1'), 'a hot row of today');
  assert.ok(both.some((r) => r.path.startsWith('/public/v1/contacts/con_')), 'cold rows of the day');
  assert.equal(new Set(both.map((r) => r.request_id)).size, both.length, 'each row once across the tiers');

  const listed = await call('GET', '/public/v1/logs/archives', { key: owner.key });
  assert.equal(listed.status, 200, listed.text);
  assert.deepEqual(listed.body.data.map((a) => [a.date, a.objects]), [[date, objects.length]]);
  const gz = await download(owner.key, date);
  const lines = gunzipSync(gz).toString('utf8').trimEnd().split('\n').map((l) => JSON.parse(l));
  assert.equal(lines.length, ROWS);
  assert.equal(new Set(lines.map((l) => l.request_id)).size, ROWS, 'every row exactly once');
  assert.ok(lines.every((l, i) => i === 0 || lines[i - 1].ts < l.ts || (lines[i - 1].ts === l.ts && lines[i - 1].request_id < l.request_id)),
    'the download is in (ts, request_id) order');

  const second = await rollUp(5_000);
  t.diagnostic(`second run: ${JSON.stringify(second.line ?? 'nothing to roll up')}`);
  assert.equal(second.line, undefined, 'nothing to move: the run logs no line');
  const sha = (b) => createHash('sha256').update(b).digest('hex');
  assert.equal(sha(await download(owner.key, date)), sha(gz), 'the same archive, byte for byte');
});
