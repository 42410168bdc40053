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
import { BASE, SCHEDULED, auditDbOf, buildCli, call, createProject, d1, eventually } from './harness.mjs';

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
    await fetch(`${BASE}${SCHEDULED}?cron=${encodeURIComponent('* * * * *')}`);
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
  assert.match(wrongKey.stdout, /signature does not verify/);

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
  broken(/signature does not verify/);
  r2('put', digests[1].key, digestFile);

  // An object added for an hour the digests cover.
  const added = first.key.replace(/\/(\d{13})-/, (_, ts) => `/${Number(ts) + 1}-`);
  r2('put', added, gzipSync(`${JSON.stringify({ request_id: 'forged', ts: h0 + 61_000 })}\n`));
  broken(new RegExp(`object ${added} is listed by no digest`));
  r2('delete', added);
  const again = verify();
  assert.equal(again.status, 0, again.stdout + again.stderr);
});
