// SPEC §12.1 "Retention" end to end: one daily run moves a day of 100,000 audit rows to R2 in
// chunk objects written whole, every row exactly once; newer rows stay; a second run changes
// nothing. The rows go straight into the local D1 (one statement), as scripts/bench.mjs does.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { gunzipSync } from 'node:zlib';
import { BASE, call, createProject, d1, sleep, workerLog } from './harness.mjs';

const DAY = 86_400_000;
const ROWS = 100_000;

/** A statement on the local D1; SQLITE_BUSY (the gateway writing at that moment) is tried again. */
async function d1Retry(sql) {
  for (let attempt = 1; ; attempt++) {
    try {
      return await d1(sql);
    } catch (e) {
      if (attempt >= 10 || !String(e.message).includes('SQLITE_BUSY')) throw e;
      await sleep(1000);
    }
  }
}

/** Runs the daily cron and waits for its log line; answers the line and the wall time. */
async function retentionRun() {
  const before = (await workerLog()).filter((l) => l.component === 'retention').length;
  const t0 = performance.now();
  const res = await fetch(`${BASE}/__scheduled?cron=${encodeURIComponent('17 3 * * *')}`);
  assert.equal(res.status, 200, await res.text());
  let line;
  for (let waited = 0; !line; waited += 250) {
    assert.ok(waited < 300_000, 'no retention log line within 5 minutes');
    line = (await workerLog()).filter((l) => l.component === 'retention')[before];
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

test('retention moves 100,000 rows of one day to R2 exactly once, in one run; a second run changes nothing', { timeout: 600_000 }, async (t) => {
  const { projectId, owner } = await createProject('retention at scale');
  const dayStart = Math.floor(Date.now() / DAY) * DAY - 200 * DAY;
  const date = new Date(dayStart).toISOString().slice(0, 10);
  // Two rows per millisecond value, so chunk boundaries fall between rows with the same ts.
  const seed = `WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < ${ROWS - 1})
    INSERT INTO audit_log (request_id, ts, project_id, key_id, method, path, route, status, response_bytes,
      response_time_ms, replayed)
    SELECT 'ret-' || i, ${dayStart} + (i / 2) * 1700, '${projectId}', 'key_seed', 'GET',
      '/public/v1/contacts/con_' || i, '/public/v1/contacts/{id}', 200, 100, 5, 0 FROM n`;
  // Newer rows of the same project: within retention (89 days old, and today), never touched.
  const keptDay = Math.floor(Date.now() / DAY) * DAY - 89 * DAY;
  const kept = [keptDay, keptDay + 1, Date.now() - 1000].map((ts, i) => ({ id: `kept-${projectId}-${i}`, ts }));
  const keep = `INSERT INTO audit_log (request_id, ts, project_id, method, path, status, response_bytes, response_time_ms, replayed) VALUES `
    + kept.map((r) => `('${r.id}', ${r.ts}, '${projectId}', 'GET', '/public/v1/me', 200, 10, 1, 0)`).join(', ');
  const seeded = performance.now();
  await d1Retry(seed.replace(/\s+/g, ' '));
  await d1Retry(keep);
  t.diagnostic(`seeded ${ROWS} rows in ${Math.round(performance.now() - seeded)} ms`);
  const count = async () => (await d1Retry(`SELECT count(*) AS n FROM audit_log WHERE project_id = '${projectId}' AND ts < ${dayStart + DAY}`))[0].n;
  assert.equal(await count(), ROWS);

  const first = await retentionRun();
  t.diagnostic(`retention run: ${JSON.stringify(first.line)}, wall ${first.wallMs} ms`);
  assert.equal(first.line.done, true, 'one run moves the whole backlog');
  assert.ok(first.line.archived_rows >= ROWS, JSON.stringify(first.line));
  assert.equal(await count(), 0, 'no row of the day is left in D1');
  // (The project also logs this test's own API calls; those are new rows too.)
  const keptRows = async () => (await d1Retry(`SELECT request_id, ts FROM audit_log WHERE request_id LIKE 'kept-%' AND project_id = '${projectId}' ORDER BY ts`))
    .map((r) => [r.request_id, r.ts]);
  assert.deepEqual(await keptRows(), kept.map((r) => [r.id, r.ts]), 'newer rows are untouched');

  const listed = await call('GET', '/public/v1/logs/archives', { key: owner.key });
  assert.equal(listed.status, 200, listed.text);
  assert.deepEqual(listed.body.data.map((a) => [a.date, a.objects]), [[date, ROWS / 5000]]);
  const gz = await download(owner.key, date);
  t.diagnostic(`download: ${gz.length} bytes of gzip`);
  const lines = gunzipSync(gz).toString('utf8').trimEnd().split('\n').map((l) => JSON.parse(l));
  assert.equal(lines.length, ROWS);
  assert.equal(new Set(lines.map((l) => l.request_id)).size, ROWS, 'every row exactly once');
  assert.ok(lines.every((l) => l.project_id === projectId && l.ts >= dayStart && l.ts < dayStart + DAY));
  assert.ok(lines.every((l, i) => i === 0 || lines[i - 1].ts < l.ts || (lines[i - 1].ts === l.ts && lines[i - 1].request_id < l.request_id)),
    'the download is in (ts, request_id) order');
  assert.deepEqual(lines.find((l) => l.request_id === 'ret-4999'),
    { ...lines.find((l) => l.request_id === 'ret-4999'), key_id: 'key_seed', status: 200, route: '/public/v1/contacts/{id}', path: '/public/v1/contacts/con_4999' });

  const second = await retentionRun();
  t.diagnostic(`second run: ${JSON.stringify(second.line)}, wall ${second.wallMs} ms`);
  assert.equal(second.line.done, true);
  assert.deepEqual([second.line.archived_rows, second.line.objects], [0, 0]);
  const again = await call('GET', '/public/v1/logs/archives', { key: owner.key });
  assert.deepEqual(again.body.data, listed.body.data, 'no object written again');
  const sha = (b) => createHash('sha256').update(b).digest('hex');
  assert.equal(sha(await download(owner.key, date)), sha(gz), 'the same archive, byte for byte');
  assert.equal(await count(), 0);
  assert.deepEqual(await keptRows(), kept.map((r) => [r.id, r.ts]), 'newer rows are still untouched');
});
