// SPEC §7 end to end: /v1/track with event_id de-duplication, identify, alias, replay chunks,
// and the events queue consumer storing each event once in D1.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { spawnSync } from 'node:child_process';
import { assertError, call, createKey, createProject, d1, eventually, runCron } from './harness.mjs';

async function ingestionProject() {
  const project = await createProject('ingestion', { plan: 'business' });
  const server = await createKey(project.owner.key, 'server');
  const browser = await createKey(project.owner.key, 'browser');
  return { ...project, server, browser };
}

const countEvents = async (projectId, where = '1=1') =>
  (await d1(`SELECT count(*) AS n FROM events WHERE project_id = '${projectId}' AND ${where}`))[0].n;

async function eventCount(projectId, expected, where) {
  return eventually(async () => ((await countEvents(projectId, where)) === expected ? expected : 0)) || countEvents(projectId, where);
}

const track = (key, batch) => call('POST', '/v1/track', { key, body: { batch } });

test('a batch of 10 is accepted and stored; the same batch again is 10 duplicates, still 10 rows', async () => {
  const { projectId, server } = await ingestionProject();
  const batch = Array.from({ length: 10 }, (_, i) => ({
    event_id: randomUUID(), event: 'Page Viewed', anonymous_id: `anon-${i}`, properties: { i },
  }));
  const first = await track(server.key, batch);
  assert.equal(first.status, 202, first.text);
  assert.deepEqual(first.body.accepted, batch.map((e, index) => ({ index, event_id: e.event_id })));
  assert.deepEqual([first.body.duplicates, first.body.rejected], [[], []]);
  assert.equal(await eventCount(projectId, 10), 10);

  const again = await track(server.key, batch);
  assert.equal(again.status, 202);
  assert.equal(again.body.accepted.length, 0);
  assert.deepEqual(again.body.duplicates, batch.map((e, index) => ({ index, event_id: e.event_id })));
  await new Promise((r) => setTimeout(r, 1500)); // give a wrongly enqueued copy time to land
  assert.equal(await countEvents(projectId), 10);
  const row = (await d1(`SELECT * FROM events WHERE project_id = '${projectId}' AND event_id = '${batch[3].event_id}'`))[0];
  assert.deepEqual([row.event, row.anonymous_id, JSON.parse(row.properties).i, row.key_type], ['Page Viewed', 'anon-3', 3, 'server']);
});

test('numbers in properties and traits are stored as written, never rounded through a double (SPEC §19)', async () => {
  const { projectId, server } = await ingestionProject();
  const exact = '{"big":18446744073709551617,"fine":0.1000000000000000000001}';
  const eventId = randomUUID();
  const sent = await call('POST', '/v1/track', {
    key: server.key, body: `{"batch":[{"event_id":"${eventId}","event":"Paid","user_id":"u-exact","properties":${exact}}]}`,
  });
  assert.equal(sent.status, 202, sent.text);
  const identified = await call('POST', '/v1/identify', {
    key: server.key, body: `{"anonymous_id":"a-exact","user_id":"u-exact","traits":${exact}}`,
  });
  assert.equal(identified.status, 202, identified.text);
  assert.equal(await eventCount(projectId, 2), 2);
  const rows = await d1(`SELECT properties FROM events WHERE project_id = '${projectId}'`);
  for (const row of rows) {
    assert.match(row.properties, /18446744073709551617/);
    assert.match(row.properties, /0\.1000000000000000000001/);
  }
});

test('30 parallel identical single-event batches: exactly one reports it accepted, one row', async () => {
  const { projectId, server } = await ingestionProject();
  const event = { event_id: randomUUID(), event: 'Signed Up', user_id: 'u-1' };
  const answers = await Promise.all(Array.from({ length: 30 }, () => track(server.key, [event])));
  assert.deepEqual(answers.map((a) => a.status), Array(30).fill(202), answers.map((a) => a.text).join('\n'));
  const accepted = answers.filter((a) => a.body.accepted.length === 1);
  assert.equal(accepted.length, 1, answers.map((a) => a.text).join('\n'));
  // Every other copy is a duplicate, or (while the first was still being queued) in flight: retryable.
  for (const a of answers.filter((x) => x !== accepted[0])) {
    const inFlight = a.body.rejected.map((r) => r.code);
    assert.equal(a.body.duplicates.length + inFlight.length, 1, a.text);
    assert.ok(inFlight.every((code) => code === 'EVENT_IN_FLIGHT'), a.text);
  }
  // A retry of an in-flight copy, once the first is confirmed, is a duplicate.
  const retry = await eventually(async () => {
    const r = await track(server.key, [event]);
    return r.body.duplicates?.length === 1 ? r : null;
  });
  assert.ok(retry, 'the accepted id is remembered as a duplicate');
  assert.equal(await eventCount(projectId, 1), 1);
});

test('the uppercase, braced, urn and 32-hex forms of an id are the same event', async () => {
  const { projectId, server } = await ingestionProject();
  const id = randomUUID();
  const res = await track(server.key, [{ event_id: id, event: 'x', user_id: 'u' }]);
  assert.equal(res.body.accepted.length, 1);
  const forms = [id.toUpperCase(), `{${id}}`, `urn:uuid:${id}`, id.replaceAll('-', '')];
  const dup = await track(server.key, forms.map((event_id) => ({ event_id, event: 'x', user_id: 'u' })));
  assert.deepEqual(dup.body.duplicates, forms.map((_, index) => ({ index, event_id: id })));
  assert.equal(await eventCount(projectId, 1), 1);
});

test('one bad id in a batch of 5: 4 accepted, 1 rejected with INVALID_EVENT_ID and its index', async () => {
  const { projectId, server } = await ingestionProject();
  const batch = Array.from({ length: 5 }, () => ({ event_id: randomUUID(), event: 'x', user_id: 'u' }));
  batch[2].event_id = 'not-a-uuid';
  const res = await track(server.key, batch);
  assert.equal(res.status, 202, res.text);
  assert.deepEqual(res.body.accepted.map((a) => a.index), [0, 1, 3, 4]);
  assert.equal(res.body.rejected.length, 1);
  assert.equal(res.body.rejected[0].index, 2);
  assert.equal(res.body.rejected[0].code, 'INVALID_EVENT_ID');
  assert.equal(await eventCount(projectId, 4), 4);
});

test('the same event_id through a browser key and a server key is two events', async () => {
  const { projectId, server, browser } = await ingestionProject();
  const id = randomUUID();
  assert.equal((await track(server.key, [{ event_id: id, event: 'x', user_id: 'u' }])).body.accepted.length, 1);
  assert.equal((await track(browser.key, [{ event_id: id, event: 'x', anonymous_id: 'a' }])).body.accepted.length, 1);
  assert.equal(await eventCount(projectId, 2, `event_id = '${id}'`), 2);
});

test('events without an id get a server id and are accepted every time (no de-duplication possible)', async () => {
  const { projectId, server } = await ingestionProject();
  const batch = [{ event: 'x', user_id: 'u' }, { event: 'y', user_id: 'u' }];
  const a = await track(server.key, batch);
  const b = await track(server.key, batch);
  assert.equal(a.body.accepted.length, 2);
  assert.equal(b.body.accepted.length, 2);
  assert.notDeepEqual(a.body.accepted, b.body.accepted);
  assert.equal(await eventCount(projectId, 4), 4);
});

test('track validates: items alone, the batch size as a whole, and the route limits', async () => {
  const { server, owner } = await ingestionProject();
  const res = await track(server.key, [{ event: 'ok', user_id: 'u' }, { event: 'no-id-no-user' }, 'not an object']);
  assert.deepEqual(res.body.rejected.map((r) => [r.index, r.code]), [[1, 'VALIDATION_ERROR'], [2, 'VALIDATION_ERROR']]);
  assertError(await track(server.key, []), 422, 'VALIDATION_ERROR');
  assertError(await track(server.key, Array(501).fill({ event: 'x', user_id: 'u' })), 422, 'VALIDATION_ERROR');
  const big = JSON.stringify({ batch: [{ event: 'x', user_id: 'u', properties: { pad: 'x'.repeat(600 * 1024) } }] });
  assertError(await call('POST', '/v1/track', { key: server.key, body: big }), 413, 'PAYLOAD_TOO_LARGE');
  assertError(await call('POST', '/v1/track', { key: server.key, body: '{"batch": [' }), 400, 'VALIDATION_ERROR');
  assertError(await track(owner.key, [{ event: 'x', user_id: 'u' }]), 403, 'FORBIDDEN');
});

test('identify twice: one link, two identify events; alias links only and refuses browser keys', async () => {
  const { projectId, server, browser } = await ingestionProject();
  const body = { anonymous_id: 'anon-1', user_id: 'user-1', traits: { plan: 'pro' } };
  const a = await call('POST', '/v1/identify', { key: browser.key, body });
  const b = await call('POST', '/v1/identify', { key: browser.key, body });
  assert.deepEqual([a.status, b.status], [202, 202]);
  assert.notEqual(a.body.event_id, b.body.event_id);
  assert.equal(await eventCount(projectId, 2, "event = 'identify'"), 2);
  const links = async () => (await d1(`SELECT count(*) AS n FROM identity_links WHERE project_id = '${projectId}'`))[0].n;
  assert.equal(await eventually(async () => (await links()) === 1), true);

  assertError(await call('POST', '/v1/alias', { key: browser.key, body: { anonymous_id: 'anon-2', user_id: 'user-1' } }), 403, 'FORBIDDEN');
  const alias = await call('POST', '/v1/alias', { key: server.key, body: { anonymous_id: 'anon-2', user_id: 'user-1' } });
  assert.equal(alias.status, 202, alias.text);
  assert.equal(await eventually(async () => (await links()) === 2), true);
  assert.equal(await countEvents(projectId, "event = 'identify'"), 2, 'alias records no event');
});

test('a replay chunk sent twice is stored once; the second answer says duplicate', async () => {
  const { projectId, browser, server } = await ingestionProject();
  const body = { session_id: 'sess-1', chunk: 0, data: { frames: [1, 2, 3] } };
  const first = await call('POST', '/v1/replay', { key: browser.key, body });
  assert.equal(first.status, 202, first.text);
  assert.deepEqual(first.body, { duplicate: false });
  const second = await call('POST', '/v1/replay', { key: server.key, body });
  assert.deepEqual(second.body, { duplicate: true });
  assert.deepEqual((await call('POST', '/v1/replay', { key: browser.key, body: { ...body, chunk: 1 } })).body, { duplicate: false });
  // D1 keeps an index row without the data; the chunk itself is an R2 object.
  const rows = await d1(`SELECT chunk, bytes FROM replay_chunk_index WHERE project_id = '${projectId}' ORDER BY chunk`);
  const stored = JSON.stringify(body.data);
  assert.deepEqual(rows.map((r) => [r.chunk, r.bytes]), [[0, stored.length], [1, stored.length]]);
  assert.deepEqual(await d1(`SELECT count(*) AS n FROM replay_chunks WHERE project_id = '${projectId}'`), [{ n: 0 }]);
  for (const chunk of [0, 1]) {
    assert.deepEqual(JSON.parse(r2Object(`replay/${projectId}/sess-1/${chunk}`)), body.data);
  }
  // A session id is one path segment of the object key: "/" and "%" are percent-encoded.
  const odd = { session_id: 'a/b%c d', chunk: 7, data: 'x' };
  assert.deepEqual((await call('POST', '/v1/replay', { key: browser.key, body: odd })).body, { duplicate: false });
  assert.equal(r2Object(`replay/${projectId}/a%2Fb%25c%20d/7`), '"x"');
});

/** The bytes of an object in the local R2 bucket, as text. */
function r2Object(key) {
  const out = spawnSync('npx', ['wrangler', 'r2', 'object', 'get', `gatehouse-archive/${key}`, '--local',
    '--persist-to', process.env.GATEHOUSE_STATE, '--pipe'], { encoding: 'utf8' });
  assert.equal(out.status, 0, `r2 object get ${key}: ${out.stderr}`);
  return out.stdout;
}

test('web pages may ingest with a browser key: CORS preflight and headers on ingestion routes only', async () => {
  const { browser, owner } = await ingestionProject();
  const preflight = await call('OPTIONS', '/v1/track', {
    headers: { origin: 'https://shop.example', 'access-control-request-method': 'POST', 'access-control-request-headers': 'authorization, content-type' },
  });
  assert.equal(preflight.status, 204);
  assert.equal(preflight.headers.get('access-control-allow-origin'), '*');
  assert.equal(preflight.headers.get('access-control-allow-methods'), 'POST');
  assert.match(preflight.headers.get('access-control-allow-headers'), /authorization/);
  const res = await call('POST', '/v1/track', { key: browser.key, body: { batch: [{ event: 'x', anonymous_id: 'a' }] }, headers: { origin: 'https://shop.example' } });
  assert.equal(res.status, 202);
  assert.equal(res.headers.get('access-control-allow-origin'), '*');
  assert.match(res.headers.get('access-control-expose-headers'), /x-request-id/);
  const denied = await call('POST', '/v1/track', { body: { batch: [] }, headers: { origin: 'https://shop.example' } });
  assert.equal(denied.headers.get('access-control-allow-origin'), '*', 'errors are readable by the page too');
  const keys = await call('GET', '/public/v1/keys', { key: owner.key, headers: { origin: 'https://shop.example' } });
  assert.equal(keys.headers.get('access-control-allow-origin'), null, 'the owner API is not open to other origins');
  assertError(await call('OPTIONS', '/public/v1/keys'), 405, 'METHOD_NOT_ALLOWED');
});

// SPEC §24: the events an integrator sent, visible, over the window the events table keeps.
test('GET /public/v1/events lists the stored events newest first, filtered and across pages; events past EVENT_RETENTION_DAYS are purged by the cron', async () => {
  const { projectId, owner, server, browser } = await ingestionProject();
  const user = `user-${randomUUID()}`;
  const ids = Array.from({ length: 5 }, () => randomUUID());
  for (const [i, event_id] of ids.entries()) {
    const key = i % 2 ? browser.key : server.key;
    const sent = await call('POST', '/v1/track', { key, body: { batch: [{ event_id, event: i < 3 ? 'signup' : 'upgrade', user_id: user, properties: { i } }] } });
    assert.equal(sent.status, 202, sent.text);
  }
  const all = await eventually(async () => {
    const r = await call('GET', `/public/v1/events?user_id=${user}`, { key: owner.key });
    return r.status === 200 && r.body.data.length === 5 ? r.body.data : null;
  }, 30_000);
  assert.ok(all, 'the five events are stored and listed');
  assert.deepEqual(all.map((e) => e.event_id).sort(), [...ids].sort());
  const times = all.map((e) => Date.parse(e.received_at));
  assert.deepEqual(times, [...times].sort((a, b) => b - a), 'newest first');
  const first = all.find((e) => e.event_id === ids[0]);
  assert.deepEqual([first.event, first.key_type, first.user_id, first.properties, first.generated_id], ['signup', 'server', user, { i: 0 }, false]);
  assert.equal(all.find((e) => e.event_id === ids[1]).key_type, 'browser');
  // Filters and pages: two pages of two and one of one, never a row twice.
  const signups = await call('GET', `/public/v1/events?user_id=${user}&event=signup`, { key: owner.key });
  assert.equal(signups.body.data.length, 3, signups.text);
  const seen = [];
  let cursor = null;
  do {
    const page = await call('GET', `/public/v1/events?user_id=${user}&limit=2${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`, { key: owner.key });
    assert.equal(page.status, 200, page.text);
    seen.push(...page.body.data.map((e) => e.event_id));
    cursor = page.body.next_cursor;
  } while (cursor);
  assert.deepEqual(seen, all.map((e) => e.event_id));
  // Only the owner reads them; bad input is a clear 400/422.
  assertError(await call('GET', '/public/v1/events', { key: server.key }), 403, 'FORBIDDEN');
  assertError(await call('GET', '/public/v1/events?from=yesterday', { key: owner.key }), 400, 'VALIDATION_ERROR');
  assertError(await call('GET', '/public/v1/events?from=2026-12-02&to=2026-12-01', { key: owner.key }), 422, 'VALIDATION_ERROR');
  assertError(await call('GET', '/public/v1/events?color=red', { key: owner.key }), 400, 'VALIDATION_ERROR');
  // Aged past the retention (30 days by default), an event leaves with the next cron run.
  await d1(`UPDATE events SET received_at = received_at - ${31 * 86_400_000} WHERE project_id = '${projectId}' AND event_id = '${ids[0]}'`);
  const purged = await eventually(async () => {
    await runCron();
    const r = await call('GET', `/public/v1/events?user_id=${user}`, { key: owner.key });
    return r.body.data.length === 4 ? r.body.data : null;
  }, 30_000);
  assert.ok(purged && !purged.some((e) => e.event_id === ids[0]), 'the aged event was purged');
});
