// SPEC §22 end to end: usage for billing with one-minute periods (USAGE_PERIOD_SECONDS=60 in
// gateway-vars.json). Two keys of a `metered` project (billable: 2xx only), one of them an
// identity's, make requests in one period; GET /public/v1/usage counts exactly the billable ones;
// once the period closes the minute cron writes its CloudEvents to R2 and delivers usage.hourly to
// the subscription that asked for it (not to a "*" one); reconcile answers difference 0. A row
// that arrives after the export makes an adjustment (object and usage.adjustment), and reconcile
// is 0 again.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ADMIN_TOKEN, BASE, assertError, auditDbOf, call, createKey, createProject, d1, eventually, receiver, run, sleep, runCron } from './harness.mjs';
import { deliveryViolations } from './schema.mjs';

const PERIOD = 60_000;
const iso = (ms) => new Date(ms).toISOString().replace('.000Z', 'Z');
const admin = { authorization: `Bearer ${ADMIN_TOKEN}` };

/** An object of the local R2 state, or null (read while this file's receiver keeps answering). */
async function r2(key) {
  const file = join(mkdtempSync(join(tmpdir(), 'gatehouse-usage-')), 'object');
  const out = await run('npx', ['wrangler', 'r2', 'object', 'get', `gatehouse-archive/${key}`, '--local', '--persist-to', process.env.GATEHOUSE_STATE, '--file', file]);
  return out.status === 0 ? readFileSync(file, 'utf8') : null;
}

test('usage counts the billable requests, exports each closed period once as CloudEvents and an event, and reconciles to 0 with late rows', { timeout: 300_000 }, async (t) => {
  const hooks = await receiver();
  t.after(() => hooks.close());
  // The events `path` received, each once: a delivery retried (its answer was late) repeats its webhook-id.
  const events = (path) => [...new Map(hooks.requestsTo(path).map((r) => [r.headers['webhook-id'], r])).values()];
  const { projectId, owner } = await createProject('usage', { plan: 'metered' });
  const identity = (await call('POST', '/public/v1/identities', { key: owner.key, body: { external_id: 'cust_usage' } })).body;
  const a = await createKey(owner.key, 'server');
  const b = await createKey(owner.key, 'server', { identity_id: identity.id });
  const usagePath = hooks.endpoint(() => 200, 'usage');
  const everythingPath = hooks.endpoint(() => 200, 'everything');
  for (const [path, events] of [[usagePath, ['usage.hourly', 'usage.adjustment']], [everythingPath, ['*']]]) {
    const res = await call('POST', '/public/v1/webhooks', { key: owner.key, body: { url: hooks.url + path, events } });
    assert.equal(res.status, 201, res.text);
  }

  // All in one period: start early in a minute.
  const left = PERIOD - (Date.now() % PERIOD);
  if (left < 35_000) await sleep(left + 250);
  const period = Math.floor(Date.now() / PERIOD) * PERIOD;
  const made = { [a.id]: 0, [b.id]: 0 };
  for (let i = 0; i < 4; i++) {
    assert.equal((await call('GET', '/public/v1/me', { key: a.key })).status, 200);
    made[a.id]++;
  }
  for (let i = 0; i < 3; i++) {
    assert.equal((await call('GET', '/public/v1/me', { key: b.key })).status, 200);
    made[b.id]++;
  }
  // An owner key's resource call bills like any key's (SPEC §23); its management calls (the usage
  // reads below) are exempt on this plan.
  const ownerMade = await call('POST', '/public/v1/contacts', { key: owner.key, body: { name: 'Owner' } });
  assert.equal(ownerMade.status, 201, ownerMade.text);
  // Not billable on this plan (2xx only): a 404, and an unknown key's 401.
  assertError(await call('GET', '/public/v1/contacts/ct_missing', { key: a.key }), 404, 'NOT_FOUND');
  assertError(await call('GET', '/public/v1/me', { key: 'gh_live_unknownunknownunknown' }), 401, 'INVALID_API_KEY');
  assert.equal(Math.floor(Date.now() / PERIOD) * PERIOD, period, 'the requests stayed in one period');

  // Usage by key equals the billable requests made, the owner key's create included.
  const query = `from=${iso(period)}&to=${iso(period + PERIOD)}`;
  let byKey;
  await eventually(async () => {
    byKey = (await call('GET', `/public/v1/usage?${query}&group_by=key`, { key: owner.key })).body;
    const n = (id) => byKey.data?.find((g) => g.key_id === id)?.requests;
    return n(a.id) === 4 && n(b.id) === 3 && n(owner.id) === 1;
  }, 30_000);
  const count = (id) => byKey.data.find((g) => g.key_id === id)?.requests;
  assert.equal(count(a.id), made[a.id], JSON.stringify(byKey));
  assert.equal(count(b.id), made[b.id], JSON.stringify(byKey));
  assert.equal(count(owner.id), 1, JSON.stringify(byKey));
  assert.equal(byKey.period_seconds, 60);
  const byIdentity = (await call('GET', `/public/v1/usage?${query}&group_by=identity`, { key: owner.key })).body;
  assert.equal(byIdentity.data.find((g) => g.identity_id === identity.id)?.requests, 3, JSON.stringify(byIdentity));
  const byRoute = (await call('GET', `/public/v1/usage?${query}&group_by=route`, { key: owner.key })).body;
  assert.equal(byRoute.data.find((g) => g.route === 'GET /public/v1/me')?.requests, 7, JSON.stringify(byRoute));
  assert.equal(byRoute.data.find((g) => g.route === 'POST /public/v1/contacts')?.requests, 1, JSON.stringify(byRoute));
  assert.ok(!byRoute.data.some((g) => g.route.includes('{id}')), 'a 404 does not bill on this plan');
  assert.ok(!byRoute.data.some((g) => g.route.includes('usage')), 'the owner\'s management calls are exempt on this plan');
  assertError(await call('GET', '/public/v1/usage?group_by=week', { key: owner.key }), 400, 'VALIDATION_ERROR');

  // The period closes (+5 s grace); the cron exports it.
  await sleep(Math.max(0, period + PERIOD + 6_000 - Date.now()));
  const objectKey = `usage/${projectId}/${iso(period)}.ndjson`;
  let object = null;
  await eventually(async () => { await runCron(); object = await r2(objectKey); return object; }, 90_000);
  assert.ok(object, `${objectKey} written`);
  const records = object.trim().split('\n').map((l) => JSON.parse(l));
  const billed = Object.fromEntries(records.map((r) => [r.data.key_id, r.data.value]));
  assert.deepEqual(billed, { [a.id]: 4, [b.id]: 3, [owner.id]: 1 });
  for (const r of records) {
    assert.equal(r.specversion, '1.0');
    assert.match(r.id, /^[0-9a-f]{32}$/);
    assert.equal(r.data.period_start, new Date(period).toISOString());
  }
  assert.equal(records.find((r) => r.data.key_id === b.id).subject, `identities/${identity.id}/keys/${b.id}`);

  // usage.hourly reached the subscription that asked for it, and not the "*" one.
  assert.ok(await eventually(async () => events(usagePath).length >= 1, 30_000), 'usage.hourly delivered');
  const hourly = JSON.parse(events(usagePath)[0].body);
  assert.equal(hourly.type, 'usage.hourly');
  assert.equal(hourly.data.value, 8);
  assert.equal(hourly.data.object, objectKey);
  assert.deepEqual(hourly.data.records.map((r) => r.id).sort(), records.map((r) => r.id).sort(), 'same identifiers as the object');
  assert.deepEqual(deliveryViolations(events(usagePath)[0]), [], 'as public/openapi.json describes it');
  // The object is readable through the API too (an event carries at most 100 records).
  const file = await fetch(`${BASE}/public/v1/usage/file?key=${encodeURIComponent(objectKey)}`, { headers: { authorization: `Bearer ${owner.key}` } });
  assert.equal(file.status, 200);
  assert.equal(await file.text(), object);
  assertError(await call('GET', `/public/v1/usage/file?key=${encodeURIComponent(`usage/prj_other/${iso(period)}.ndjson`)}`, { key: owner.key }), 400, 'VALIDATION_ERROR');
  // SPEC §26: the run is listed (the dashboard's usage view), with its object and what it adds.
  const runs = (await call('GET', `/public/v1/usage/runs?${query}`, { key: owner.key })).body;
  assert.deepEqual(runs.data.map((r) => [r.kind, r.seq, r.object, r.records, r.requests]), [['export', 0, objectKey, 3, 8]], JSON.stringify(runs));
  assert.equal(runs.data[0].period_start, new Date(period).toISOString());

  const reconcile = async () => (await call('GET', `/admin/v1/usage/reconcile?hour=${iso(period)}&project_id=${projectId}`, { headers: admin })).body;
  assert.deepEqual(await reconcile(), { hour: new Date(period).toISOString(), period_seconds: 60, project_id: projectId, exported: 8, audited: 8, difference: 0, pending: 0 });
  const everyProject = await call('GET', `/admin/v1/usage/reconcile?hour=${iso(period)}`, { headers: admin });
  assert.equal(everyProject.status, 200, everyProject.text);
  assert.equal(everyProject.body.difference, 0, everyProject.text);
  assertError(await call('GET', `/admin/v1/usage/reconcile?hour=${encodeURIComponent(new Date(period + 1000).toISOString())}`, { headers: admin }), 400, 'VALIDATION_ERROR');

  // A row of that period arrives late (as a redelivery after an outage would): it joins the counts
  // with the next batch the audit consumer inserts, and the next run exports an adjustment.
  const db = await auditDbOf(projectId);
  const ts = period + 30_000;
  const hex = ts.toString(16).padStart(12, '0');
  const lateId = `${hex.slice(0, 8)}-${hex.slice(8)}-7000-8000-00000000late`;
  await d1(`INSERT INTO audit_log (request_id, ts, project_id, key_id, method, path, route, status, response_bytes, response_time_ms, replayed, counted, billable, identity_id)
    VALUES ('${lateId}', ${ts}, '${projectId}', '${b.id}', 'GET', '/public/v1/me', '/public/v1/me', 200, 10, 1, 0, 0, 1, '${identity.id}')`, db);
  assert.equal((await call('GET', '/public/v1/me', { key: a.key })).status, 200);
  const adjustmentKey = `usage/${projectId}/${iso(period)}.adjustment-1.ndjson`;
  let adjustment = null;
  await eventually(async () => { await runCron(); adjustment = await r2(adjustmentKey); return adjustment; }, 90_000);
  assert.ok(adjustment, `${adjustmentKey} written`);
  const [fix] = adjustment.trim().split('\n').map((l) => JSON.parse(l));
  assert.deepEqual([fix.type, fix.data.key_id, fix.data.value, fix.data.total], ['dev.gatehouse.usage.adjustment', b.id, 1, 4]);
  assert.equal(fix.data.replaces, records.find((r) => r.data.key_id === b.id).id, 'it replaces the first record of its subject');
  assert.ok(await eventually(async () => events(usagePath).length >= 2, 30_000), 'usage.adjustment delivered');
  assert.equal(JSON.parse(events(usagePath)[1].body).type, 'usage.adjustment');
  assert.deepEqual(deliveryViolations(events(usagePath)[1]), []);
  assert.deepEqual(await reconcile(), { hour: new Date(period).toISOString(), period_seconds: 60, project_id: projectId, exported: 9, audited: 9, difference: 0, pending: 0 });

  // Running the export again changes nothing: no second object, no second event.
  await runCron();
  await sleep(2_000);
  assert.equal(await r2(`usage/${projectId}/${iso(period)}.adjustment-2.ndjson`), null);
  assert.equal(events(usagePath).length, 2, 'no second event');
  assert.equal(hooks.requestsTo(everythingPath).filter((r) => JSON.parse(r.body).type.startsWith('usage.')).length, 0, '"*" takes no usage events');
});

test('an origin may not send the gateway\'s usage events', async () => {
  const { projectId } = await createProject('usage origin');
  const res = await call('POST', `/admin/v1/projects/${projectId}/events`, {
    headers: { authorization: `Bearer ${process.env.GATEHOUSE_EVENTS_SECRET}` },
    body: { type: 'usage.hourly', data: { value: 1000000 } },
  });
  assert.equal(assertError(res, 422, 'VALIDATION_ERROR').details.field, 'type');
});
