// SPEC §22 end to end: signed, chained digests of the audit archive. A project whose rows of two
// past hours are archived gets a digest per closed hour from the minute cron; `gatehouse logs
// verify` finds the archive intact, then names each change made to the local R2 state by someone
// without the signing key: a flipped byte, a row removed and the object written again, a digest
// deleted, a digest changed, an object added.
import { test, before } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gunzipSync, gzipSync } from 'node:zlib';
import { ADMIN_TOKEN, auditDbOf, buildCli, call, createProject, d1, eventually, runCron } from './harness.mjs';

const HOUR = 3_600_000;
const BUCKET = 'gatehouse-archive';
const work = mkdtempSync(join(tmpdir(), 'gatehouse-digests-'));
let gatehouse;

before(() => {
  gatehouse = buildCli();
});

/** An object of the local R2 state: read, written, deleted (as someone with the bucket would). */
function r2(op, key, bytes) {
  const file = join(work, 'object');
  if (bytes) writeFileSync(file, bytes);
  const args = ['wrangler', 'r2', 'object', op, `${BUCKET}/${key}`, '--local', '--persist-to', process.env.GATEHOUSE_STATE];
  if (op !== 'delete') args.push('--file', file);
  const out = spawnSync('npx', args, { encoding: 'utf8' });
  assert.equal(out.status, 0, `r2 ${op} ${key}: ${out.stderr}${out.stdout}`);
  return op === 'get' ? readFileSync(file) : undefined;
}

const iso = (ms) => new Date(ms).toISOString();

test('digests chain the archived hours; logs verify finds them intact and names every change made without the key', { timeout: 300_000 }, async () => {
  const { projectId, owner } = await createProject('digests', { plan: 'business' });
  // Its chain starts with it (SPEC §23: nothing D1 says later is taken for its start).
  const started = await call('GET', '/public/v1/audit/head', { key: owner.key });
  assert.equal(started.status, 200, started.text);
  assert.deepEqual([started.body.started, started.body.sequence], [true, 0], started.text);
  const db = await auditDbOf(projectId);
  // The project began three hours ago: two hours are closed once the hot hour has passed.
  const h0 = Math.floor(Date.now() / HOUR) * HOUR - 3 * HOUR;
  await d1(`UPDATE projects SET created_at = ${h0} WHERE id = '${projectId}'`);
  const rows = [[h0 + 60_000, 1], [h0 + 120_000, 2], [h0 + 180_000, 3], [h0 + 240_000, 4], [h0 + HOUR + 1_000, 5], [h0 + HOUR + 2_000, 6], [h0 + HOUR + 3_000, 7]];
  const id = (ts, i) => `${ts.toString(16).padStart(12, '0').slice(0, 8)}-${ts.toString(16).padStart(12, '0').slice(8)}-7000-8000-${i.toString(16).padStart(12, '0')}`;
  const values = rows.map(([ts, i]) => `('${id(ts, i)}', ${ts}, '${projectId}', 'key_d', 'GET', '/public/v1/me', '/public/v1/me', 200, 10, 1, 0, 1)`);
  await d1(`INSERT INTO audit_log (request_id, ts, project_id, key_id, method, path, route, status, response_bytes, response_time_ms, replayed, counted) VALUES ${values.join(', ')}`, db);

  let digests = [];
  await eventually(async () => {
    await runCron();
    digests = await d1(`SELECT period_start, key, objects FROM audit_digests WHERE project_id = '${projectId}' ORDER BY period_start`, db);
    return digests.length >= 2;
  }, 120_000);
  assert.deepEqual(digests.map((d) => [d.period_start, d.objects]).slice(0, 2), [[h0, 1], [h0 + HOUR, 1]]);

  const key = await call('GET', '/public/v1/audit/public-key', { key: owner.key });
  assert.equal(key.status, 200, key.text);
  assert.equal(key.body.algorithm, 'ed25519');
  const verify = () => gatehouse(['logs', 'verify', '--from', iso(h0), '--to', iso(h0 + 2 * HOUR), '--public-key', key.body.public_key], { key: owner.key });
  const intact = verify();
  assert.equal(intact.status, 0, intact.stdout + intact.stderr);
  assert.match(intact.stdout, /^intact: 2 digests, 2 objects, 7 rows/);
  const wrongKey = gatehouse(['logs', 'verify', '--from', iso(h0), '--to', iso(h0 + 2 * HOUR), '--public-key', Buffer.alloc(32, 1).toString('base64')], { key: owner.key });
  assert.equal(wrongKey.status, 1);
  assert.match(wrongKey.stdout, /(the chain head|signature) does not verify/);

  const [first] = await d1(`SELECT key FROM audit_objects WHERE project_id = '${projectId}' ORDER BY first_ts LIMIT 1`, db);
  const original = r2('get', first.key);
  const broken = (pattern) => {
    const out = verify();
    assert.equal(out.status, 1, out.stdout + out.stderr);
    assert.match(out.stdout, pattern);
  };
  // One byte flipped.
  const flipped = Buffer.from(original);
  flipped[Math.floor(flipped.length / 2)] ^= 1;
  r2('put', first.key, flipped);
  broken(new RegExp(`object ${first.key} was changed`));
  // A row removed and the object written again (it stays valid gzip NDJSON).
  const lines = gunzipSync(original).toString().trim().split('\n');
  r2('put', first.key, gzipSync(lines.slice(1).join('\n') + '\n'));
  broken(new RegExp(`object ${first.key} was changed`));
  r2('put', first.key, original);
  assert.equal(verify().status, 0, 'intact again once restored');

  // A digest deleted; a digest changed (its link or counts, not re-signed).
  const digestFile = r2('get', digests[1].key);
  r2('delete', digests[1].key);
  broken(new RegExp(`digest ${digests[1].key.replace(/[.]/g, '\\.')} is missing`));
  r2('put', digests[1].key, Buffer.from(digestFile.toString().replace('"rows":3', '"rows":2')));
  broken(/signature does not verify|than the digest the head names/);
  r2('put', digests[1].key, digestFile);

  // An object added for an hour the digests cover.
  const added = first.key.replace(/\/(\d{13})-/, (_, ts) => `/${Number(ts) + 1}-`);
  r2('put', added, gzipSync(`${JSON.stringify({ request_id: 'forged', ts: h0 + 61_000 })}\n`));
  broken(new RegExp(`object ${added} is listed by no digest`));
  r2('delete', added);
  const again = verify();
  assert.equal(again.status, 0, again.stdout + again.stderr);
});

/** A project whose rows of two past hours are archived and digested: its id, key, database, hour. */
async function digestedProject(name) {
  const { projectId, owner } = await createProject(name, { plan: 'business' });
  const db = await auditDbOf(projectId);
  const h0 = Math.floor(Date.now() / HOUR) * HOUR - 3 * HOUR;
  await d1(`UPDATE projects SET created_at = ${h0} WHERE id = '${projectId}'`);
  const id = (ts, i) => `${ts.toString(16).padStart(12, '0').slice(0, 8)}-${ts.toString(16).padStart(12, '0').slice(8)}-7000-8000-${i.toString(16).padStart(12, '0')}`;
  const values = [[h0 + 60_000, 1], [h0 + 120_000, 2], [h0 + HOUR + 1_000, 3]].map(([ts, i]) =>
    `('${id(ts, i)}', ${ts}, '${projectId}', 'key_d', 'GET', '/public/v1/me', '/public/v1/me', 200, 10, 1, 0, 1)`);
  await d1(`INSERT INTO audit_log (request_id, ts, project_id, key_id, method, path, route, status, response_bytes, response_time_ms, replayed, counted) VALUES ${values.join(', ')}`, db);
  const digests = await eventually(async () => {
    await runCron();
    const found = await d1(`SELECT period_start, key, sha256 FROM audit_digests WHERE project_id = '${projectId}' ORDER BY period_start`, db);
    return found.length >= 2 && found;
  }, 120_000);
  assert.ok(digests, 'two digests within two minutes');
  return { projectId, owner, db, h0, digests };
}

// SPEC §23, the signer as an oracle: someone who writes D1 and R2 but does not hold
// AUDIT_SIGNING_KEY deletes the newest digest (R2 and D1), sets digest_next back a period and lists
// an invented object, then lets the cron run. Main signed a fresh digest of that period from what
// D1 listed ("intact" over a shortened or forged history). Now the gateway signs nothing twice and
// nothing D1 made up: the deleted digest comes back from the chain head, as signed, and the
// health route names the project; deleted again and left so, `logs verify` calls the history cut
// off (main: normal lag).
test('a writer of D1 and R2 without the signing key cannot make the gateway sign a changed history', { timeout: 300_000 }, async () => {
  const { projectId, owner, db, h0, digests } = await digestedProject('oracle');
  const newest = digests.at(-1);
  const signed = r2('get', newest.key);
  const key = (await call('GET', '/public/v1/audit/public-key', { key: owner.key })).body.public_key;
  const verify = () => gatehouse(['logs', 'verify', '--from', iso(h0), '--to', iso(h0 + 2 * HOUR), '--public-key', key], { key: owner.key });

  r2('delete', newest.key);
  await d1(`DELETE FROM audit_digests WHERE project_id = '${projectId}' AND key = '${newest.key}'`, db);
  await d1(`UPDATE projects SET digest_next = ${newest.period_start} WHERE id = '${projectId}'`);
  const forged = `audit/${projectId}/${new Date(h0).toISOString().slice(0, 10)}/forged.ndjson.gz`;
  await d1(`INSERT INTO audit_objects (key, project_id, first_ts, first_id, last_ts, last_id, rows, summary)
    VALUES ('${forged}', '${projectId}', ${h0 + HOUR + 5}, 'forged', ${h0 + HOUR + 5}, 'forged', 1, '{}')`, db);
  await d1(`INSERT OR REPLACE INTO digest_due (project_id, since) VALUES ('${projectId}', ${h0 + HOUR + 5})`, db);
  // Minute-runs until the job has looked at the project (other tests' projects may be due first).
  const looked = await eventually(async () => {
    assert.equal((await runCron()).status, 200);
    return (await d1(`SELECT count(*) AS n FROM digest_due WHERE project_id = '${projectId}'`, db))[0].n === 0;
  }, 180_000);
  assert.ok(looked, 'the job looked at the project within three minutes');

  const after = await d1(`SELECT key, sha256 FROM audit_digests WHERE project_id = '${projectId}' ORDER BY period_start`, db);
  assert.deepEqual(after.map((d) => d.key), digests.map((d) => d.key), 'no digest signed again, none added');
  assert.equal(after.at(-1).sha256, newest.sha256, 'its record is the one signed');
  assert.deepEqual(r2('get', newest.key), signed, 'the deleted digest is back, byte for byte');
  const listed = await d1(`SELECT count(*) AS n FROM audit_objects WHERE key = '${forged}' AND digest_period IS NOT NULL`, db);
  assert.equal(listed[0].n, 0, 'the invented object is listed by no digest');
  const reported = await call('GET', '/admin/v1/audit/health', { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
  assert.equal(reported.status, 200, reported.text);
  const alert = reported.body.alerts.find((a) => a.project_id === projectId);
  assert.match(alert?.alert ?? '', /missing from R2/, JSON.stringify(reported.body));
  const intact = verify();
  assert.equal(intact.status, 0, intact.stdout + intact.stderr);

  // Deleted again, and nothing runs: the signed head names a digest the listing lacks.
  r2('delete', newest.key);
  await d1(`DELETE FROM audit_digests WHERE project_id = '${projectId}' AND key = '${newest.key}'`, db);
  const cut = verify();
  assert.equal(cut.status, 1, cut.stdout + cut.stderr);
  assert.match(cut.stdout, /the history is cut off/);

  // The newest digest replaced with other bytes: that project's digests stop, reported.
  r2('put', newest.key, Buffer.from('{}\n'));
  await d1(`INSERT OR REPLACE INTO digest_due (project_id, since) VALUES ('${projectId}', ${h0 + HOUR + 5})`, db);
  const health = async () => (await call('GET', '/admin/v1/audit/health', { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } })).body;
  const stopped = await eventually(async () => {
    assert.equal((await runCron()).status, 200);
    const h = await health();
    return /is not the one signed/.test(h.alerts.find((a) => a.project_id === projectId)?.alert ?? '') && h;
  }, 180_000);
  assert.ok(stopped, 'the changed digest is reported within three minutes');
  const changed = stopped.alerts.find((a) => a.project_id === projectId);
  assert.match(changed.alert, /is not the one signed/);
  assert.equal(stopped.healthy, false);
  assert.equal((await d1(`SELECT count(*) AS n FROM digest_due WHERE project_id = '${projectId}'`, db))[0].n, 1, 'its digests wait');
  r2('put', newest.key, signed);
});

// SPEC §23: the digests' throughput does not depend on the number of tenants — 150 projects with
// archived rows in each of six past hours are digested, each hour its own digest, within 4
// minute-runs (main: 60 digests a run, one per project-hour, empty hours included).
test('150 projects six hours old are digested within four minute-runs', { timeout: 600_000 }, async () => {
  const tag = `d${Date.now().toString(36)}`;
  const first = Math.floor(Date.now() / HOUR) * HOUR - 7 * HOUR;
  await d1(`WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < 899)
    INSERT INTO audit_log (request_id, ts, project_id, method, path, status, response_bytes, response_time_ms, replayed, counted)
    SELECT '${tag}-' || printf('%04d', i), ${first} + (i % 6) * ${HOUR} + i, '${tag}_' || printf('%03d', i / 6), 'GET', '/public/v1/me', 200, 10, 1, 0, 1 FROM n`, 'AUDIT_DB');
  const digested = async () => (await d1(`SELECT count(*) AS n FROM audit_digests WHERE project_id LIKE '${tag}_%'`, 'AUDIT_DB'))[0].n;
  const due = async () => (await d1(`SELECT count(*) AS n FROM digest_due WHERE project_id LIKE '${tag}_%'`, 'AUDIT_DB'))[0].n;
  let runs = 0;
  while ((await digested()) < 900 || (await due()) > 0) {
    assert.ok(runs < 4, `${await digested()} of 900 digests, ${await due()} projects due after ${runs} runs`);
    assert.equal((await runCron()).status, 200);
    runs += 1;
  }
  const spans = await d1(`SELECT count(*) AS n FROM audit_digests WHERE project_id LIKE '${tag}_%' AND period_end - period_start = ${HOUR} AND objects = 1`, 'AUDIT_DB');
  assert.equal(spans[0].n, 900, 'one digest per project-hour, each listing its hour\'s object');
});
