// SPEC §9 end to end: one audit row per request (errors and replays included), redaction, the
// log's filters and pagination, per-key statistics, and retention to R2.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { gunzipSync } from 'node:zlib';
import {
  BASE, assertError, auditDbOf, call, createKey, createProject, d1, eventually, freshWindow, idemKey, listAll, sleep, workerLog, runCron } from './harness.mjs';

/** A project on the business plan, so the test can make many calls. */
async function auditProject() {
  const project = await createProject('audit', { plan: 'business' });
  const server = await createKey(project.owner.key, 'server');
  return { ...project, server };
}

/** The project's log rows, once it holds at least `count` (the consumer writes in batches). */
async function logRows(ownerKey, count, query = '') {
  let rows = [];
  await eventually(async () => {
    rows = await listAll(`/public/v1/logs${query}`, ownerKey);
    return rows.length >= count;
  }, 20_000);
  return rows;
}

test('every request gets exactly one row: 2xx, 401, 404, 422, 429 and a replay, with their fields', async () => {
  const { owner, server } = await auditProject();
  const slow = await createKey(owner.key, 'server', { rate_limit_per_minute: 1 });
  const revoked = await createKey(owner.key, 'server');
  assert.equal((await call('DELETE', `/public/v1/keys/${revoked.id}`, { key: owner.key })).status, 200);
  await sleep(50);
  const before = await logRows(owner.key, 5);

  const idem = idemKey();
  const made = [
    await call('POST', '/public/v1/contacts', { key: server.key, idem, body: { name: 'Logged' }, headers: { 'user-agent': 'audit-test/1.0' } }),
    await call('POST', '/public/v1/contacts', { key: server.key, idem, body: { name: 'Logged' } }), // replay
    await call('GET', '/public/v1/me', { key: revoked.key }), // 401, attributed to the revoked key
    await call('GET', '/public/v1/contacts/con_missing', { key: server.key }), // 404
    await call('POST', '/public/v1/contacts', { key: server.key, body: {} }), // 422
    await call('GET', '/public/v1/me', { key: slow.key }),
    await call('GET', '/public/v1/me', { key: slow.key }), // 429
  ];
  assert.deepEqual(made.map((r) => r.status), [201, 201, 401, 404, 422, 200, 429]);
  const ids = made.map((r) => r.headers.get('x-request-id'));

  const rows = await logRows(owner.key, before.length + made.length);
  const mine = rows.filter((r) => ids.includes(r.request_id));
  assert.equal(mine.length, made.length, 'exactly one row per request');
  assert.equal(new Set(rows.map((r) => r.request_id)).size, rows.length, 'no request twice');
  const byId = Object.fromEntries(mine.map((r) => [r.request_id, r]));

  const created = byId[ids[0]];
  assert.equal(created.method, 'POST');
  assert.equal(created.path, '/public/v1/contacts');
  assert.equal(created.route, '/public/v1/contacts');
  assert.equal(created.status, 201);
  assert.equal(created.key_id, server.id);
  assert.equal(created.key_prefix, server.prefix);
  assert.equal(created.idempotency_key, idem);
  assert.equal(created.replayed, false);
  assert.equal(created.user_agent, 'audit-test/1.0');
  assert.equal(created.response_bytes, Buffer.byteLength(made[0].text));
  assert.equal(created.rate_limit_remaining, Number(made[0].headers.get('x-ratelimit-remaining')));
  assert.ok(created.ip, 'the client address is kept');
  assert.ok(created.response_time_ms >= 0);

  const replay = byId[ids[1]];
  assert.deepEqual([replay.replayed, replay.original_request_id], [true, ids[0]]);
  assert.deepEqual([byId[ids[2]].status, byId[ids[2]].error_code, byId[ids[2]].key_id], [401, 'INVALID_API_KEY', revoked.id]);
  assert.deepEqual([byId[ids[3]].route, byId[ids[3]].error_code], ['/public/v1/contacts/{id}', 'NOT_FOUND']);
  assert.equal(byId[ids[4]].error_code, 'VALIDATION_ERROR');
  assert.deepEqual([byId[ids[6]].status, byId[ids[6]].error_code, byId[ids[6]].rate_limit_remaining], [429, 'RATE_LIMIT_EXCEEDED', 0]);
  assert.ok(!JSON.stringify(mine).includes('Logged'), 'no body in any row');

  const one = await call('GET', `/public/v1/logs/${ids[3]}`, { key: owner.key });
  assert.equal(one.status, 200);
  assert.equal(one.body.request_id, ids[3]);
  assertError(await call('GET', '/public/v1/logs/not-a-request', { key: owner.key }), 404, 'NOT_FOUND');
});

test('secret query values are stored REDACTED; the rest of the query is kept', async () => {
  const { owner, server } = await auditProject();
  const res = await call('GET', '/public/v1/contacts?api_key=abc&token=x&page=2', { key: server.key });
  const id = res.headers.get('x-request-id');
  const rows = await eventually(async () => {
    const r = await call('GET', `/public/v1/logs?request_id=${id}`, { key: owner.key });
    return r.body.data.length ? r.body.data : null;
  });
  assert.equal(rows[0].path, '/public/v1/contacts?api_key=REDACTED&token=REDACTED&page=2');
});

test('filters: method, status class, exact status, path glob, request_id, idempotency key, key_id, time', async () => {
  const { owner, server } = await auditProject();
  const idem = idemKey();
  const contact = await call('POST', '/public/v1/contacts', { key: server.key, idem, body: { name: 'F' } });
  await call('GET', `/public/v1/contacts/${contact.body.id}`, { key: server.key });
  await call('GET', '/public/v1/contacts/con_nope', { key: server.key });
  await call('POST', '/public/v1/messages', { key: server.key, body: { contact_id: 'con_nope', text: 'x' } });
  const all = await logRows(owner.key, 6);
  const q = async (query) => listAll(`/public/v1/logs?${query}`, owner.key);
  // A filter answers only matching rows, and exactly the rows of `all` that match (so an empty
  // answer never passes); rows of the log queries made since `all` may match too.
  const ids = (rows) => rows.map((r) => r.request_id).sort();
  const before = new Set(ids(all));
  const expect = async (query, keep, atLeast) => {
    const want = ids(all.filter(keep));
    assert.ok(want.length >= atLeast, `${query}: the test needs at least ${atLeast} matching rows`);
    const got = await q(query);
    assert.ok(got.every(keep), `${query} answered a row that does not match`);
    assert.deepEqual(ids(got.filter((r) => before.has(r.request_id))), want, query);
  };

  await expect('method=POST', (r) => r.method === 'POST', 2);
  const c4 = await q('status=4xx');
  assert.deepEqual(c4.map((r) => r.status).sort(), [404, 422]);
  await expect('status=2xx', (r) => r.status >= 200 && r.status < 300, 2);
  assert.deepEqual((await q('status=404')).map((r) => r.path), ['/public/v1/contacts/con_nope']);
  assert.equal((await q('status=5xx')).length, 0);
  const glob = await q(`path=${encodeURIComponent('/public/v1/contacts/*')}`);
  assert.deepEqual(glob.map((r) => r.path).sort(), [`/public/v1/contacts/${contact.body.id}`, '/public/v1/contacts/con_nope'].sort());
  const byRequest = await q(`request_id=${contact.headers.get('x-request-id')}`);
  assert.deepEqual(byRequest.map((r) => r.status), [201]);
  assert.deepEqual((await q(`idempotency_key=${idem}`)).map((r) => r.request_id), [contact.headers.get('x-request-id')]);
  await expect(`key_id=${server.id}`, (r) => r.key_id === server.id, 4);
  const newest = Date.parse(all[0].ts);
  assert.ok((await q(`from=${new Date(newest + 1).toISOString()}`)).length === 0);
  assert.equal((await q(`to=${newest}`)).length, all.length);
  assertError(await call('GET', '/public/v1/logs?status=6xx', { key: owner.key }), 400, 'VALIDATION_ERROR');
  assertError(await call('GET', '/public/v1/logs?limit=201', { key: owner.key }), 400, 'VALIDATION_ERROR');
  assertError(await call('GET', '/public/v1/logs', { key: server.key }), 403, 'FORBIDDEN');
});

test('paging through a few hundred rows returns each exactly once, newest first', async () => {
  const { owner, server } = await auditProject();
  const ids = new Set();
  for (let round = 0; round < 10; round++) {
    const batch = await Promise.all(Array.from({ length: 25 }, () => call('GET', '/public/v1/me', { key: server.key })));
    batch.forEach((r) => ids.add(r.headers.get('x-request-id')));
  }
  await logRows(owner.key, 250, `?key_id=${server.id}`);
  const seen = [];
  let cursor = null;
  do {
    const page = await call('GET', `/public/v1/logs?key_id=${server.id}&limit=37${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`, { key: owner.key });
    assert.equal(page.status, 200, page.text);
    seen.push(...page.body.data);
    cursor = page.body.next_cursor;
  } while (cursor);
  assert.equal(seen.length, 250);
  assert.deepEqual(new Set(seen.map((r) => r.request_id)), ids);
  const times = seen.map((r) => Date.parse(r.ts));
  assert.deepEqual(times, [...times].sort((a, b) => b - a));
});

test('key statistics count the rows, split 4xx/5xx by day and group endpoints by route template', async () => {
  const { owner, server } = await auditProject();
  const contacts = [];
  for (let i = 0; i < 3; i++) contacts.push((await call('POST', '/public/v1/contacts', { key: server.key, body: { name: `S${i}` } })).body);
  for (const c of contacts) await call('GET', `/public/v1/contacts/${c.id}`, { key: server.key });
  await call('GET', '/public/v1/contacts/con_none', { key: server.key });
  await logRows(owner.key, 7, `?key_id=${server.id}`);

  const stats = await call('GET', `/public/v1/keys/${server.id}/stats?days=7`, { key: owner.key });
  assert.equal(stats.status, 200, stats.text);
  assert.equal(stats.body.daily.length, 7);
  const today = stats.body.daily[6];
  assert.equal(today.date, new Date().toISOString().slice(0, 10));
  assert.deepEqual([today.total, today['4xx'], today['5xx']], [7, 1, 0]);
  assert.equal(stats.body.total, 7);
  assert.equal(stats.body.error_share, 1 / 7);
  const top = stats.body.top_endpoints;
  const counts = ({ method, route, total, errors }) => ({ method, route, total, errors });
  assert.deepEqual(counts(top[0]), { method: 'GET', route: '/public/v1/contacts/{id}', total: 4, errors: 1 });
  assert.deepEqual(counts(top[1]), { method: 'POST', route: '/public/v1/contacts', total: 3, errors: 0 });
  // Response times from the aggregates' buckets: a bucket's upper bound, in order.
  assert.ok(top[0].p50_ms >= 10 && top[0].p50_ms <= top[0].p95_ms && top[0].p95_ms <= top[0].p99_ms, JSON.stringify(top[0]));
  assert.ok(today.p99_ms >= today.p50_ms && stats.body.latency.p95_ms >= 10, JSON.stringify(stats.body));
  assertError(await call('GET', '/public/v1/keys/key_other/stats', { key: owner.key }), 404, 'NOT_FOUND');
  assertError(await call('GET', `/public/v1/keys/${server.id}/stats?days=0`, { key: owner.key }), 400, 'VALIDATION_ERROR');
});

test('rows past retention leave the log: the minute roll-up moves them to an R2 hour object, downloadable by day', async () => {
  const { projectId, owner } = await auditProject();
  const old = Date.UTC(2026, 0, 15, 10, 0, 0); // far past 90 days
  const rows = [0, 1, 2].map((i) => ({ request_id: `old-${projectId}-${i}`, ts: old + i * 1000 }));
  const values = rows.map((r) => `('${r.request_id}', ${r.ts}, '${projectId}', 'GET', '/public/v1/me', 200, 10, 1, 0, 1)`).join(', ');
  const db = await auditDbOf(projectId);
  const inD1 = async () => (await d1(`SELECT count(*) AS n FROM audit_log WHERE project_id = '${projectId}' AND ts < ${old + 86_400_000}`, db))[0].n;
  await d1(`INSERT INTO audit_log (request_id, ts, project_id, method, path, status, response_bytes, response_time_ms, replayed, counted) VALUES ${values}`, db);
  assert.equal(await inD1(), 3);
  // Past AUDIT_RETENTION_DAYS a row is not searched, whichever tier holds it.
  assert.equal((await listAll(`/public/v1/logs?to=${old + 86_400_000}`, owner.key)).length, 0);

  const cron = await runCron();
  assert.equal(cron.status, 200);
  assert.equal(await eventually(async () => (await inD1()) === 0), true, 'rolled-up rows leave D1');

  const archives = await call('GET', '/public/v1/logs/archives', { key: owner.key });
  assert.equal(archives.status, 200, archives.text);
  assert.deepEqual(archives.body.data.map((a) => a.date), ['2026-01-15']);
  const download = await fetch(`${BASE}/public/v1/logs/archives/2026-01-15`, { headers: { authorization: `Bearer ${owner.key}` } });
  assert.equal(download.status, 200);
  assert.equal(download.headers.get('content-type'), 'application/gzip');
  const lines = gunzipSync(Buffer.from(await download.arrayBuffer())).toString('utf8').trim().split('\n').map((l) => JSON.parse(l));
  assert.deepEqual(lines.map((l) => [l.request_id, l.ts]), rows.map((r) => [r.request_id, r.ts]));
  assertError(await call('GET', '/public/v1/logs/archives/2026-01-16', { key: owner.key }), 404, 'NOT_FOUND');
  // Recent rows stay.
  assert.ok((await listAll('/public/v1/logs', owner.key)).length > 0);
});

// SPEC §20 "Big projects": the audit log spreads over several D1 databases (wrangler.toml, and so
// the test gateway, uses AUDIT_DB and AUDIT_DB_1). A project is put on one by its id when it is
// made; its rows, its log, its key statistics and its roll-up all use that one, never the other.
test('projects spread over the audit databases: each project\'s rows, log, stats and roll-up use its own', async () => {
  const on = {};
  for (let i = 0; i < 40 && !(on.AUDIT_DB && on.AUDIT_DB_1); i++) {
    const project = await auditProject();
    on[await auditDbOf(project.projectId)] ??= project;
  }
  assert.ok(on.AUDIT_DB && on.AUDIT_DB_1, `new projects land on both databases: ${Object.keys(on)}`);
  const old = Date.UTC(2026, 0, 20, 10, 0, 0);
  const count = async (db, where) => (await d1(`SELECT count(*) AS n FROM audit_log WHERE ${where}`, db))[0].n;
  for (const [db, { projectId, owner, server }] of Object.entries(on)) {
    const other = db === 'AUDIT_DB' ? 'AUDIT_DB_1' : 'AUDIT_DB';
    const made = await call('POST', '/public/v1/contacts', { key: server.key, body: { name: db } });
    assert.equal(made.status, 201, made.text);
    const id = made.headers.get('x-request-id');
    const logged = await eventually(async () => (await call('GET', `/public/v1/logs/${id}`, { key: owner.key })).status === 200);
    assert.equal(logged, true, `the row of ${projectId} is in its log`);
    assert.deepEqual([await count(db, `request_id = '${id}'`), await count(other, `request_id = '${id}'`)], [1, 0], `${projectId} on ${db}`);
    const stats = await call('GET', `/public/v1/keys/${server.id}/stats`, { key: owner.key });
    assert.equal(stats.status, 200, stats.text);
    assert.deepEqual(stats.body.top_endpoints.map((e) => [e.method, e.route, e.total]), [['POST', '/public/v1/contacts', 1]]);
    await d1(`INSERT INTO audit_log (request_id, ts, project_id, method, path, status, response_bytes, response_time_ms, replayed, counted)
      VALUES ('old-${projectId}', ${old}, '${projectId}', 'GET', '/public/v1/me', 200, 10, 1, 0, 1)`, db);
  }
  // One minute-cron rolls up both databases.
  const cron = await runCron();
  assert.equal(cron.status, 200);
  for (const [db, { projectId, owner }] of Object.entries(on)) {
    assert.equal(await eventually(async () => (await count(db, `request_id = 'old-${projectId}'`)) === 0), true, `rolled up from ${db}`);
    const archives = await call('GET', '/public/v1/logs/archives', { key: owner.key });
    assert.deepEqual(archives.body.data.map((a) => a.date), ['2026-01-20'], archives.text);
  }
});

// SPEC §19 "Background work under many tenants": 3,000 projects with one old row each. A run
// while another run holds the roll-up's lease skips it (wrangler dev runs two scheduled events one
// after the other, so the overlap is made by a lease row as a running roll-up writes it); then runs
// a time: every row reaches exactly one R2 object (its summary counts it once) and D1 is empty of
// them within a few runs. On the main of before the leases and the time box, a run took 40
// (project, day) chunks: 75 runs for these rows.
test('3,000 small tenants roll up in a few runs, and two overlapping runs never both roll', { timeout: 600_000 }, async (t) => {
  const tag = `t${Date.now().toString(36)}`;
  const old = Date.now() - 3 * 3_600_000;
  await d1(`WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < 2999)
    INSERT INTO audit_log (request_id, ts, project_id, method, path, status, response_bytes, response_time_ms, replayed, counted)
    SELECT '${tag}-' || printf('%04d', i), ${old} + i, '${tag}_' || printf('%04d', i), 'GET', '/public/v1/me', 200, 10, 1, 0, 1 FROM n`, 'AUDIT_DB');
  const left = async () => (await d1(`SELECT count(*) AS n FROM audit_log WHERE request_id LIKE '${tag}-%'`, 'AUDIT_DB'))[0].n;
  assert.equal(await left(), 3000);
  // A fresh connection each (the harness's call): `d1` blocks the event loop past the 5 s after which
  // workerd closes an idle kept-alive connection, and fetch's pool would send on a closed one.
  // A run is time-boxed to a few seconds, yet once, on a CI machine, one trigger got no answer for
  // 300 s (cause unknown; never seen on the development machine). A trigger is waited for 60 s,
  // then reported with the worker's last lines, and the loop goes on: what is checked is what the
  // runs did, which does not depend on a trigger's answer arriving.
  let unanswered = 0;
  const cron = async () => {
    try {
      return (await runCron({ timeoutMs: 60_000 })).status;
    } catch (e) {
      if (e.name !== 'TimeoutError') throw e;
      unanswered += 1;
      const lines = (await workerLog()).slice(-8).map((l) => JSON.stringify(l)).join('\n');
      t.diagnostic(`a scheduled trigger got no answer within 60 s; the worker's last lines:\n${lines}`);
      return 200;
    }
  };
  const skips = async () => (await workerLog()).filter((l) => l.component === 'audit_roll_up' && l.skipped).length;
  const skippedBefore = await skips();
  await d1(`INSERT OR REPLACE INTO job_leases (job, holder, until_ms) VALUES ('audit_roll_up', 'a-running-roll-up', ${Date.now() + 55_000})`);
  assert.equal(await cron(), 200);
  assert.equal(await eventually(async () => (await skips()) - skippedBefore === 1), true, 'the run found the lease held');
  assert.equal(await left(), 3000, 'and rolled nothing');
  await d1("UPDATE job_leases SET until_ms = 0 WHERE job = 'audit_roll_up'");
  assert.deepEqual(await Promise.all([cron(), cron()]), [200, 200]);
  try {
    let runs = 2;
    while ((await left()) > 0) {
      // SPEC §23: within 4 minute-runs (main took 17; before the time box, 75).
      assert.ok(runs < 4, `${await left()} rows left after ${runs} runs`);
      assert.equal(await cron(), 200);
      runs += 1;
    }
    assert.ok(unanswered <= 2, `${unanswered} triggers got no answer`);
    const [archived] = await d1(`SELECT count(*) AS objects, sum(rows) AS rows FROM audit_objects WHERE project_id LIKE '${tag}_%'`, 'AUDIT_DB');
    assert.deepEqual(archived, { objects: 3000, rows: 3000 }, 'every row in exactly one object');
  } finally {
    // Whatever happened, these rows must not fill the roll-ups of the files after this one.
    await d1(`DELETE FROM audit_log WHERE request_id LIKE '${tag}-%'`, 'AUDIT_DB');
  }
});

// SPEC §19: a 404 or 405 sent with a valid key is the key's request: its audit row names the key,
// so the owner's log shows it (main stored key_id = null: the owner's log missed 52 of 55 rows in
// one run). Nothing of the window is taken for it.
test('a 404 or 405 sent with a valid key is in its owner\'s log, and takes nothing of the window', async () => {
  const { owner } = await auditProject();
  await freshWindow();
  const before = await call('GET', '/public/v1/me', { key: owner.key });
  const missing = await call('GET', '/public/v1/no-such-route', { key: owner.key });
  assertError(missing, 404, 'NOT_FOUND');
  const wrongMethod = await call('PUT', '/public/v1/contacts', { key: owner.key, body: {} });
  assertError(wrongMethod, 405, 'METHOD_NOT_ALLOWED');
  const after = await call('GET', '/public/v1/me', { key: owner.key });
  const remaining = (res) => Number(res.headers.get('x-ratelimit-remaining'));
  assert.equal(remaining(after), remaining(before) - 1, 'only the second /me took a unit');
  for (const res of [missing, wrongMethod]) {
    const id = res.headers.get('x-request-id');
    const found = await eventually(async () => {
      const logs = await call('GET', `/public/v1/logs?request_id=${id}`, { key: owner.key });
      return logs.body.data?.[0];
    }, 20_000);
    assert.ok(found, `the owner's log has ${res.status} ${id}`);
    assert.equal(found.key_id, owner.id);
    assert.equal(found.status, res.status);
  }
});
