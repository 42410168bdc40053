// SPEC §17 end to end: key rolls with a grace period, expiring keys and refusal reasons (decided
// by each key's guard on its own clock), webhook secret rotation with both signatures checked by
// the client crate's verification (the `gatehouse` CLI), recovery after a receiver outage,
// re-enabling after 410, and a long step's due delivery that no queue message carries. SPEC §19:
// no sequence of expiries, rolls and revocations leaves a project without a lasting owner key,
// the operator issues owner keys, and admin creates honour Idempotency-Key.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { ADMIN_TOKEN, assertError, buildCli, call, createKey, createProject, d1, eventually, idemKey, listAll, receiver, sleep, runCron } from './harness.mjs';

let gatehouse;

/** The receiver: an answer per path, numbered, and every request it got. */
const answer = (status) => (req) => ({ status: status(req.n), headers: { 'content-type': 'text/plain' }, body: `answer ${req.n}` });
let hooks;

before(async () => {
  gatehouse = buildCli();
  hooks = await receiver(answer(() => 200));
});

after(() => hooks?.close());

const endpoint = (status = () => 200) => hooks.endpoint(answer(status), 'lifecycle');
const requestsTo = (path) => hooks.requestsTo(path);

const me = (key) => call('GET', '/public/v1/me', { key });
const reasonOf = (res) => res.body?.error?.details?.reason;
const keyIn = async (owner, id) => (await listAll('/public/v1/keys', owner)).find((k) => k.id === id);

/** Sleeps until the wall clock reaches `ms` (Unix ms). */
const until = (ms) => sleep(Math.max(0, ms - Date.now()));

test('a roll with a 3 s grace: both keys work, then the old one is refused as rolled within a second of the grace end', async () => {
  const { owner } = await createProject('lifecycle roll', { plan: 'business' });
  const server = await createKey(owner.key, 'server', { name: 'billing', rate_limit_per_minute: 1000 });
  assert.equal((await me(server.key)).status, 200);

  const cli = gatehouse(['keys', 'roll', server.id, '--grace', '3'], { key: owner.key });
  assert.equal(cli.status, 0, cli.stderr);
  const rolled = JSON.parse(cli.stdout);
  assert.match(rolled.key, /^gh_s_/);
  assert.notEqual(rolled.id, server.id);
  assert.deepEqual([rolled.type, rolled.name, rolled.rate_limit_per_minute, rolled.rolled_from, rolled.status],
    ['server', 'billing', 1000, server.id, 'active']);

  const old = await keyIn(owner.key, server.id);
  assert.deepEqual([old.status, old.rolled_to], ['expiring', rolled.id]);
  const graceEnd = Date.parse(old.expires_at);
  assert.ok(Math.abs(graceEnd - (Date.now() + 3000)) < 2000, `grace ends at ${old.expires_at}`);

  // Both work through the grace.
  assert.equal((await me(server.key)).status, 200);
  assert.equal((await me(rolled.key)).status, 200);
  await until(graceEnd - 700);
  assert.equal((await me(server.key)).status, 200, 'the old key still works just before the grace ends');

  // Refused from the grace's end: polled, the first refusal comes within a second of it.
  let refusedAt = null;
  let last;
  while (Date.now() < graceEnd + 3000) {
    const sent = Date.now();
    last = await me(server.key);
    if (last.status === 401) { refusedAt = sent; break; }
    await sleep(50);
  }
  assert.ok(refusedAt !== null, `the old key was never refused: ${last?.text}`);
  assert.ok(refusedAt - graceEnd < 1000, `refused ${refusedAt - graceEnd} ms after the grace end`);
  assert.equal(assertError(last, 401, 'INVALID_API_KEY').details.reason, 'rolled');
  assert.equal((await me(rolled.key)).status, 200, 'the new key works on');
  assert.equal((await keyIn(owner.key, server.id)).status, 'expired');

  // A rolled key cannot be rolled again; bad grace values are 4xx.
  assertError(await call('POST', `/public/v1/keys/${server.id}/roll`, { key: owner.key, body: {} }), 422, 'VALIDATION_ERROR');
  assertError(await call('POST', `/public/v1/keys/${rolled.id}/roll`, { key: owner.key, body: { grace_seconds: 86401 } }), 422, 'VALIDATION_ERROR');
  assertError(await call('POST', `/public/v1/keys/${rolled.id}/roll`, { key: owner.key, body: { grace_seconds: 'soon' } }), 400, 'VALIDATION_ERROR');
  assertError(await call('POST', '/public/v1/keys/key_nope/roll', { key: owner.key, body: {} }), 404, 'NOT_FOUND');
  assertError(await call('POST', `/public/v1/keys/${rolled.id}/roll`, { key: rolled.key, body: {} }), 403, 'FORBIDDEN');
});

test('expires_at 3 s ahead: the key works, then is refused as expired; revoked and unknown keys', async () => {
  const { owner } = await createProject('lifecycle expiry');
  const expiresAt = new Date(Date.now() + 3000).toISOString();
  const key = await createKey(owner.key, 'server', { expires_at: expiresAt });
  assert.deepEqual([key.status, key.expires_at], ['expiring', expiresAt]);
  const ok = await me(key.key);
  assert.equal(ok.status, 200);
  assert.equal(ok.body.expires_at, expiresAt);
  await until(Date.parse(expiresAt));
  const refused = await eventually(async () => {
    const res = await me(key.key);
    return res.status === 401 ? res : null;
  }, 1000);
  assert.ok(refused, 'refused within a second of expires_at');
  assert.equal(assertError(refused, 401, 'INVALID_API_KEY').details.reason, 'expired');
  assert.equal((await keyIn(owner.key, key.id)).status, 'expired');

  // PATCH sets and clears an expiry; the past and impossible dates are refused.
  const other = await createKey(owner.key, 'server');
  const later = new Date(Date.now() + 3_600_000).toISOString();
  const patched = await call('PATCH', `/public/v1/keys/${other.id}`, { key: owner.key, body: { expires_at: later } });
  assert.deepEqual([patched.status, patched.body.status, patched.body.expires_at], [200, 'expiring', later]);
  const cleared = await call('PATCH', `/public/v1/keys/${other.id}`, { key: owner.key, body: { expires_at: null } });
  assert.deepEqual([cleared.body.status, cleared.body.expires_at], ['active', null]);
  for (const bad of ['2020-01-01T00:00:00Z', '2027-02-31T00:00:00Z', 'tomorrow']) {
    const res = await call('POST', '/public/v1/keys', { key: owner.key, body: { type: 'server', expires_at: bad } });
    assert.equal(assertError(res, 422, 'VALIDATION_ERROR').details.field, 'expires_at', bad);
  }

  // The project's only owner key takes no expiry (it would lock the project out).
  const lastOwner = await call('PATCH', `/public/v1/keys/${owner.id}`, { key: owner.key, body: { expires_at: later } });
  assert.equal(assertError(lastOwner, 422, 'VALIDATION_ERROR').details.field, 'expires_at');

  assert.equal((await call('DELETE', `/public/v1/keys/${other.id}`, { key: owner.key })).status, 200);
  assert.equal(reasonOf(await me(other.key)), 'revoked');
  const unknown = await me(`gh_s_${'x'.repeat(40)}`);
  assert.equal(assertError(unknown, 401, 'INVALID_API_KEY').details.reason, undefined, 'unknown keys carry no reason');
});

/** The CLI's verdict (the client crate's Standard Webhooks check) on one delivery. */
function verifies(secret, { headers, body }, signature = headers['webhook-signature']) {
  const out = gatehouse(['webhooks', 'verify', '--secret', secret, '--id', headers['webhook-id'],
    '--timestamp', headers['webhook-timestamp'], '--signature', signature], { input: body });
  return out.status === 0;
}

test('rotate-secret: during the grace both signatures, new first, each verifying under its own secret; after it only the new one', async () => {
  const { owner } = await createProject('lifecycle rotation', { plan: 'business' });
  const path = endpoint();
  const hook = (await call('POST', '/public/v1/webhooks', { key: owner.key, body: { url: hooks.url + path, events: ['contact.created'] } })).body;
  const oldSecret = hook.secret;

  const cli = gatehouse(['webhooks', 'rotate-secret', hook.id, '--grace', '4'], { key: owner.key });
  assert.equal(cli.status, 0, cli.stderr);
  const rotated = JSON.parse(cli.stdout);
  const newSecret = rotated.secret;
  assert.match(newSecret, /^whsec_/);
  assert.notEqual(newSecret, oldSecret);
  const graceEnd = Date.parse(rotated.previous_secret_expires_at);
  assert.ok(graceEnd > Date.now());
  const listed = (await call('GET', '/public/v1/webhooks', { key: owner.key })).body.data[0];
  assert.equal(listed.secret, undefined, 'the secret is shown only when made');

  await call('POST', '/public/v1/contacts', { key: owner.key, body: { name: 'During' } });
  assert.ok(await hooks.waitFor(path, 1), 'delivered during the grace');
  const during = requestsTo(path)[0];
  const entries = during.headers['webhook-signature'].split(' ');
  assert.equal(entries.length, 2, during.headers['webhook-signature']);
  assert.ok(entries.every((e) => e.startsWith('v1,')));
  assert.ok(verifies(newSecret, during) && verifies(oldSecret, during), 'the header verifies under either secret');
  assert.ok(verifies(newSecret, during, entries[0]) && !verifies(oldSecret, during, entries[0]), 'the first entry is the new secret\'s');
  assert.ok(verifies(oldSecret, during, entries[1]) && !verifies(newSecret, during, entries[1]), 'the second entry is the old secret\'s');

  await until(graceEnd + 200);
  await call('POST', '/public/v1/contacts', { key: owner.key, body: { name: 'After' } });
  assert.ok(await hooks.waitFor(path, 2), 'delivered after the grace');
  const afterGrace = requestsTo(path)[1];
  assert.equal(afterGrace.headers['webhook-signature'].split(' ').length, 1);
  assert.ok(verifies(newSecret, afterGrace), 'the new secret verifies');
  assert.ok(!verifies(oldSecret, afterGrace), 'the old secret no longer does');

  assertError(await call('POST', `/public/v1/webhooks/${hook.id}/rotate-secret`, { key: owner.key, body: { grace_seconds: 604801 } }), 422, 'VALIDATION_ERROR');
  assertError(await call('POST', '/public/v1/webhooks/wh_nope/rotate-secret', { key: owner.key, body: {} }), 404, 'NOT_FOUND');
});

async function settled(ownerKey, webhookId, status, ms = 40_000) {
  let found = [];
  await eventually(async () => {
    found = await listAll(`/public/v1/webhooks/${webhookId}/deliveries?status=${status}`, ownerKey);
    return found.length > 0;
  }, ms);
  return found;
}

test('a receiver down for 6 attempts: failed; recover from a time re-queues it and it is delivered once', async () => {
  const { owner } = await createProject('lifecycle recover', { plan: 'business' });
  let healthy = false;
  const path = endpoint(() => (healthy ? 200 : 503));
  const hook = (await call('POST', '/public/v1/webhooks', { key: owner.key, body: { url: hooks.url + path, events: ['contact.created'] } })).body;
  const since = new Date(Date.now() - 1000).toISOString();
  await call('POST', '/public/v1/contacts', { key: owner.key, body: { name: 'Outage' } });
  const [failed] = await settled(owner.key, hook.id, 'failed');
  assert.equal(failed.attempts.length, 6);
  await sleep(1500);
  assert.equal(requestsTo(path).length, 6);

  healthy = true;
  const cli = gatehouse(['webhooks', 'recover', hook.id, '--since', since], { key: owner.key });
  assert.equal(cli.status, 0, cli.stderr);
  assert.deepEqual(JSON.parse(cli.stdout), { requeued: 1 });
  const [delivered] = await settled(owner.key, hook.id, 'delivered');
  assert.equal(delivered.id, failed.id);
  assert.equal(delivered.attempts.length, 7);
  await sleep(1500);
  assert.equal(requestsTo(path).length, 7, 'delivered once');

  // Nothing failed is left: a second recovery queues nothing; a later `since` finds nothing either.
  const again = await call('POST', `/public/v1/webhooks/${hook.id}/recover`, { key: owner.key, body: { since } });
  assert.deepEqual([again.status, again.body], [202, { requeued: 0 }]);
  assertError(await call('POST', `/public/v1/webhooks/${hook.id}/recover`, { key: owner.key, body: { since: '2026-02-31T00:00:00Z' } }), 422, 'VALIDATION_ERROR');
  assertError(await call('POST', `/public/v1/webhooks/${hook.id}/recover`, { key: owner.key, body: {} }), 400, 'VALIDATION_ERROR');
  assertError(await call('POST', '/public/v1/webhooks/wh_nope/recover', { key: owner.key, body: { since } }), 404, 'NOT_FOUND');
});

test('410 disables a subscription; re-enabled, a recovery delivers what failed', async () => {
  const { owner } = await createProject('lifecycle re-enable', { plan: 'business' });
  let gone = true;
  const path = endpoint(() => (gone ? 410 : 200));
  const hook = (await call('POST', '/public/v1/webhooks', { key: owner.key, body: { url: hooks.url + path, events: ['contact.created'] } })).body;
  const since = new Date(Date.now() - 1000).toISOString();
  await call('POST', '/public/v1/contacts', { key: owner.key, body: { name: 'Gone' } });
  const [failed] = await settled(owner.key, hook.id, 'failed');
  const listed = async () => (await call('GET', '/public/v1/webhooks', { key: owner.key })).body.data[0];
  assert.equal((await listed()).status, 'disabled');
  // Disabled: recovery is refused until it is re-enabled.
  assertError(await call('POST', `/public/v1/webhooks/${hook.id}/recover`, { key: owner.key, body: { since } }), 422, 'VALIDATION_ERROR');
  assertError(await call('PATCH', `/public/v1/webhooks/${hook.id}`, { key: owner.key, body: { status: 'disabled' } }), 422, 'VALIDATION_ERROR');

  gone = false;
  const enabled = await call('PATCH', `/public/v1/webhooks/${hook.id}`, { key: owner.key, body: { status: 'active' } });
  assert.deepEqual([enabled.status, enabled.body.status, enabled.body.disabled_reason], [200, 'active', null]);
  const recovered = await call('POST', `/public/v1/webhooks/${hook.id}/recover`, { key: owner.key, body: { since } });
  assert.deepEqual(recovered.body, { requeued: 1 });
  const [delivered] = await settled(owner.key, hook.id, 'delivered');
  assert.equal(delivered.id, failed.id);
  assert.deepEqual(delivered.attempts.map((a) => a.response_code), [410, 200]);
  // New events reach it again.
  await call('POST', '/public/v1/contacts', { key: owner.key, body: { name: 'Back' } });
  assert.ok(await hooks.waitFor(path, 3));
});

test('a step longer than a queue delay: its delivery, due now and carried by no queue message, is found by the sweep', async () => {
  const { projectId, owner } = await createProject('lifecycle long step', { plan: 'business' });
  const path = endpoint();
  const hook = (await call('POST', '/public/v1/webhooks', { key: owner.key, body: { url: hooks.url + path, events: ['*'] } })).body;
  // Attempt 6 of the Standard Webhooks schedule failed 14 h ago and set the next one 14 h later
  // (past the 12 h a queue message can wait): the message that carried the wait arrived early,
  // found the delivery not due, and no message carries it now.
  const now = Date.now();
  const lastAttempt = now - 14 * 3_600_000 - 60_000;
  const due = now - 60_000;
  const id = `dlv_long_${projectId}`;
  const payload = JSON.stringify({ id: 'evt_long', type: 'contact.created', created_at: new Date(lastAttempt).toISOString(), data: {} });
  await d1(`INSERT INTO webhook_deliveries (id, project_id, webhook_id, event_id, event, payload, request_id, status,
    attempts, scheduled_at, created_at, updated_at) VALUES ('${id}', '${projectId}', '${hook.id}',
    'evt_long', 'contact.created', '${payload}', 'req-long', 'pending', 6, ${due}, ${lastAttempt}, ${lastAttempt})`);
  await d1(`INSERT INTO webhook_attempts (delivery_id, attempt, started_at, duration_ms, response_code, next_retry_at)
    VALUES ('${id}', 6, ${lastAttempt}, 20, 503, ${due})`);
  await sleep(1000);
  assert.equal(requestsTo(path).length, 0, 'no message carries it');
  const cron = await runCron();
  assert.equal(cron.status, 200);
  assert.ok(await hooks.waitFor(path, 1), 'the sweep queued it');
  assert.equal(requestsTo(path)[0].headers['webhook-id'], id);
  const [delivered] = await settled(owner.key, hook.id, 'delivered');
  assert.deepEqual(delivered.attempts.map((a) => [a.attempt, a.response_code]), [[6, 503], [7, 200]]);
});

const asOperator = { authorization: `Bearer ${ADMIN_TOKEN}` };
const inAnHour = () => new Date(Date.now() + 3_600_000).toISOString();

test('expiring every owner key one after the other is refused; so is revoking the replacement of the only owner key', async () => {
  const { owner } = await createProject('lifecycle last owner');
  const second = await createKey(owner.key, 'owner');
  const soon = { expires_at: inAnHour() };
  assert.equal((await call('PATCH', `/public/v1/keys/${owner.id}`, { key: second.key, body: soon })).status, 200);
  const refused = assertError(await call('PATCH', `/public/v1/keys/${second.id}`, { key: second.key, body: soon }), 422, 'VALIDATION_ERROR');
  assert.equal(refused.details.id, second.id);
  assertError(await call('DELETE', `/public/v1/keys/${second.id}`, { key: second.key }), 422, 'VALIDATION_ERROR');
  assert.equal((await keyIn(second.key, second.id)).status, 'active');

  const lone = (await createProject('lifecycle lone owner')).owner;
  const rolled = await call('POST', `/public/v1/keys/${lone.id}/roll`, { key: lone.key, body: { grace_seconds: 60 } });
  assert.equal(rolled.status, 201, rolled.text);
  assertError(await call('DELETE', `/public/v1/keys/${rolled.body.id}`, { key: lone.key }), 422, 'VALIDATION_ERROR');
  assertError(await call('PATCH', `/public/v1/keys/${rolled.body.id}`, { key: lone.key, body: soon }), 422, 'VALIDATION_ERROR');
  assert.equal((await call('DELETE', `/public/v1/keys/${lone.id}`, { key: rolled.body.key })).status, 200, 'the rolled key itself may go');
  assert.equal((await me(rolled.body.key)).status, 200);
});

test('the operator issues an owner key for a project: shown once, it manages the project at once', async () => {
  const { projectId, owner } = await createProject('lifecycle recovery');
  const path = `/admin/v1/projects/${projectId}/owner-keys`;
  const res = await call('POST', path, { headers: asOperator, body: { name: 'recovery' } });
  assert.equal(res.status, 201, res.text);
  assert.match(res.body.key, /^gh_o_/);
  assert.deepEqual([res.body.type, res.body.name, res.body.status, res.body.prefix], ['owner', 'recovery', 'active', res.body.key.slice(0, 12)]);
  const who = await me(res.body.key);
  assert.deepEqual([who.status, who.body.type, who.body.project_id], [200, 'owner', projectId]);
  // With a lasting owner key besides it, the first one may now go.
  assert.equal((await call('DELETE', `/public/v1/keys/${owner.id}`, { key: res.body.key })).status, 200);
  const listed = await keyIn(res.body.key, res.body.id);
  assert.equal(listed.key, undefined, 'the secret is shown only when made');

  assertError(await call('POST', '/admin/v1/projects/prj_nope/owner-keys', { headers: asOperator, body: {} }), 404, 'NOT_FOUND');
  assertError(await call('POST', path, { headers: asOperator, body: { type: 'server' } }), 400, 'VALIDATION_ERROR');
  assertError(await call('POST', path, { key: res.body.key, body: {} }), 401, 'INVALID_API_KEY');
});

test('admin creates honour Idempotency-Key: one project per key, replayed; another body is 409', async () => {
  const idem = idemKey();
  const body = { name: 'lifecycle idempotent project' };
  const first = await call('POST', '/admin/v1/projects', { headers: asOperator, idem, body });
  assert.equal(first.status, 201, first.text);
  const again = await call('POST', '/admin/v1/projects', { headers: asOperator, idem, body });
  assert.equal(again.status, 201, again.text);
  assert.deepEqual(again.body, first.body, 'the same project and owner key');
  assert.equal(again.headers.get('idempotent-replayed'), '1');
  assert.equal(again.headers.get('x-original-request-id'), first.headers.get('x-request-id'));
  assert.equal((await me(again.body.owner_key.key)).status, 200);
  assertError(await call('POST', '/admin/v1/projects', { headers: asOperator, idem, body: { name: 'another' } }), 409, 'IDEMPOTENCY_KEY_REUSED');
  assertError(await call('POST', '/admin/v1/projects', { headers: asOperator, idem: 'a,b', body }), 422, 'VALIDATION_ERROR');

  const path = `/admin/v1/projects/${first.body.project_id}/owner-keys`;
  const ownerIdem = idemKey();
  const issued = await call('POST', path, { headers: asOperator, idem: ownerIdem, body: {} });
  assert.equal(issued.status, 201, issued.text);
  const reissued = await call('POST', path, { headers: asOperator, idem: ownerIdem, body: {} });
  assert.deepEqual([reissued.status, reissued.body.id, reissued.body.key], [201, issued.body.id, issued.body.key]);
  const owners = (await listAll('/public/v1/keys', issued.body.key)).filter((k) => k.type === 'owner');
  assert.equal(owners.length, 2, 'the bootstrap owner key and one issued key');
});

test('roll and rotate-secret with an Idempotency-Key: a retry answers the same replacement and the same secret', async () => {
  const { owner } = await createProject('lifecycle idempotent roll');
  const server = await createKey(owner.key, 'server');
  const idem = idemKey();
  const roll = () => call('POST', `/public/v1/keys/${server.id}/roll`, { key: owner.key, idem, body: { grace_seconds: 0 } });
  const rolled = await roll();
  assert.equal(rolled.status, 201, rolled.text);
  const again = await roll();
  assert.deepEqual([again.status, again.body.id, again.body.key], [201, rolled.body.id, rolled.body.key]);
  assert.equal((await me(rolled.body.key)).status, 200);
  assert.equal(reasonOf(await me(server.key)), 'rolled');

  const hook = (await call('POST', '/public/v1/webhooks', { key: owner.key, body: { url: hooks.url + endpoint(), events: ['contact.created'] } })).body;
  const rotateIdem = idemKey();
  const rotate = () => call('POST', `/public/v1/webhooks/${hook.id}/rotate-secret`, { key: owner.key, idem: rotateIdem, body: {} });
  const rotated = await rotate();
  assert.equal(rotated.status, 200, rotated.text);
  const rotatedAgain = await rotate();
  assert.equal(rotatedAgain.body.secret, rotated.body.secret);
  assert.notEqual(rotated.body.secret, hook.secret);
});
