// SPEC §21 end to end: `cli` subscriptions and `gatehouse listen`. A listener pulls its
// subscription's deliveries over a long poll (no public URL), forwards them unchanged to a local
// receiver and reports each answer as the attempt; while no listener is connected the deliveries
// fail on the normal schedule; a listener killed and started again resumes from its cursor with
// nothing skipped. `gatehouse trigger` sends a sample event.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createHmac } from 'node:crypto';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BASE, assertError, buildCli, call, createProject, eventually, listAll, receiver } from './harness.mjs';

const NO_LISTENER = 'no listener connected (gatehouse listen)';
let hooks;
let gatehouse;
const work = mkdtempSync(join(tmpdir(), 'gatehouse-listen-'));

before(async () => {
  hooks = await receiver(() => ({ status: 200, body: 'ok' }));
  gatehouse = buildCli();
});

after(() => hooks.close());

/** Whether a request the receiver got carries a valid Standard Webhooks signature under `secret`. */
function verified({ headers, body }, secret) {
  const key = Buffer.from(secret.slice('whsec_'.length), 'base64');
  const signed = `${headers['webhook-id']}.${headers['webhook-timestamp']}.${body}`;
  return headers['webhook-signature'] === 'v1,' + createHmac('sha256', key).update(signed).digest('base64');
}

const deliveriesOf = (ownerKey, webhookId) => listAll(`/public/v1/webhooks/${webhookId}/deliveries`, ownerKey);

test('a cli subscription has no url; a pull takes its due delivery as an attempt, signed, and a report records the answer', async () => {
  const { owner } = await createProject('listen api', { plan: 'business' });
  const created = await call('POST', '/public/v1/webhooks', { key: owner.key, body: { kind: 'cli', events: ['contact.created'] } });
  assert.equal(created.status, 201, created.text);
  const hook = created.body;
  assert.deepEqual([hook.kind, hook.url], ['cli', null]);
  assert.match(hook.secret, /^whsec_/);
  const bad = (body) => call('POST', '/public/v1/webhooks', { key: owner.key, body });
  assertError(await bad({ kind: 'cli', url: 'https://example.com/x', events: ['*'] }), 422, 'VALIDATION_ERROR');
  assertError(await bad({ events: ['*'] }), 422, 'VALIDATION_ERROR');
  assertError(await bad({ kind: 'pigeon', events: ['*'] }), 422, 'VALIDATION_ERROR');
  const posted = await bad({ url: `${hooks.url}/elsewhere`, events: ['message.created'] });
  assert.equal(posted.body.kind, 'url');
  assertError(await call('GET', `/public/v1/webhooks/${posted.body.id}/pull?wait=0`, { key: owner.key }), 422, 'VALIDATION_ERROR');
  assertError(await call('GET', '/public/v1/webhooks/wh_nope/pull?wait=0', { key: owner.key }), 404, 'NOT_FOUND');
  assertError(await call('GET', `/public/v1/webhooks/${hook.id}/pull?wait=26`, { key: owner.key }), 400, 'VALIDATION_ERROR');

  // Connected from the first pull on: the contact's delivery waits for this listener.
  const empty = await call('GET', `/public/v1/webhooks/${hook.id}/pull?wait=0`, { key: owner.key });
  assert.deepEqual(empty.body.data, []);
  const contact = await call('POST', '/public/v1/contacts', { key: owner.key, body: { name: 'Pulled' } });
  assert.equal(contact.status, 201);
  const started = Date.now();
  const pulled = await call('GET', `/public/v1/webhooks/${hook.id}/pull?wait=10`, { key: owner.key, timeoutMs: 20_000 });
  assert.equal(pulled.status, 200, pulled.text);
  assert.ok(Date.now() - started < 9_000, 'answered once the delivery was due, not after the whole wait');
  const [delivery] = pulled.body.data;
  assert.equal(pulled.body.data.length, 1);
  assert.deepEqual([delivery.event, delivery.attempt], ['contact.created', 1]);
  assert.deepEqual(JSON.parse(delivery.body).data, contact.body);
  assert.ok(verified({ headers: delivery.headers, body: delivery.body }, hook.secret), 'signed as a POST would be');
  assert.equal(delivery.headers['webhook-id'], delivery.delivery_id);

  // Held for this listener: another pull does not hand it out again.
  assert.deepEqual((await call('GET', `/public/v1/webhooks/${hook.id}/pull?wait=0`, { key: owner.key })).body.data, []);
  const report = { attempt: 1, status_code: 503, response_excerpt: 'busy', duration_ms: 4 };
  const path = `/public/v1/webhooks/${hook.id}/deliveries/${delivery.delivery_id}/report`;
  const first = await call('POST', path, { key: owner.key, body: report });
  assert.equal(first.status, 200, first.text);
  assert.equal(first.body.status, 'pending');
  assert.ok(first.body.next_attempt_at, 'the schedule goes on (1 s in the test schedule)');
  const again = await call('POST', path, { key: owner.key, body: report });
  assert.deepEqual([again.status, again.body.status], [200, 'pending'], 'a repeated report changes nothing');
  assertError(await call('POST', path, { key: owner.key, body: { attempt: 5, status_code: 200, duration_ms: 1 } }), 409, 'CONFLICT');
  // The retry comes to the listener again, as attempt 2; a 200 delivers it.
  let retried;
  await eventually(async () => {
    retried = (await call('GET', `/public/v1/webhooks/${hook.id}/pull?wait=2`, { key: owner.key })).body.data;
    return retried.length === 1;
  }, 15_000);
  assert.deepEqual([retried[0].delivery_id, retried[0].attempt], [delivery.delivery_id, 2]);
  const done = await call('POST', path, { key: owner.key, body: { attempt: 2, status_code: 200, duration_ms: 3 } });
  assert.equal(done.body.status, 'delivered');
  const [shown] = await deliveriesOf(owner.key, hook.id);
  assert.deepEqual(shown.attempts.map((a) => [a.attempt, a.response_code, a.response_body]), [[1, 503, 'busy'], [2, 200, '']]);
});

test('without a listener a cli delivery fails on the normal schedule; a trigger sends a sample event', async () => {
  const { owner } = await createProject('listen none', { plan: 'business' });
  const hook = (await call('POST', '/public/v1/webhooks', { key: owner.key, body: { kind: 'cli', events: ['*'] } })).body;
  const triggered = await call('POST', '/public/v1/webhooks/trigger', { key: owner.key, body: { type: 'order.shipped' } });
  assert.equal(triggered.status, 202, triggered.text);
  assert.deepEqual([triggered.body.type, triggered.body.deliveries], ['order.shipped', 1]);
  assertError(await call('POST', '/public/v1/webhooks/trigger', { key: owner.key, body: { type: 'Bad Type' } }), 422, 'VALIDATION_ERROR');
  let delivery;
  await eventually(async () => {
    [delivery] = await deliveriesOf(owner.key, hook.id);
    return delivery?.status === 'failed';
  }, 30_000);
  assert.equal(delivery.attempts.length, 6, 'the whole schedule: 1 + 5 retries');
  assert.ok(delivery.attempts.every((a) => a.error === NO_LISTENER && a.response_code === null), JSON.stringify(delivery.attempts));
  assert.deepEqual(delivery.payload.data, { sample: true });
  // A listener that connects now gets it: failed only for want of a listener, it is pending again.
  const resumed = await call('GET', `/public/v1/webhooks/${hook.id}/pull?wait=5&resume=true`, { key: owner.key });
  assert.deepEqual(resumed.body.data.map((d) => [d.delivery_id, d.attempt]), [[delivery.id, 7]]);
});

/** Starts `gatehouse listen`; answers {lines (its stdout lines so far), stderr(), kill()}. */
function listen(ownerKey, state, forwardTo) {
  const env = { ...process.env, GATEHOUSE_URL: BASE, GATEHOUSE_KEY: ownerKey };
  const child = spawn(gatehouse.bin, ['listen', '--forward-to', forwardTo, '--state', state, '--wait', '2'], { env });
  const lines = [];
  let err = '';
  let buffered = '';
  child.stdout.on('data', (chunk) => {
    buffered += chunk;
    const parts = buffered.split('\n');
    buffered = parts.pop();
    lines.push(...parts.filter(Boolean));
  });
  child.stderr.on('data', (chunk) => { err += chunk; });
  return {
    lines,
    stderr: () => err,
    kill: () => new Promise((resolve) => { child.once('exit', resolve); child.kill('SIGKILL'); }),
  };
}

test('gatehouse listen forwards with the same signatures, survives a kill with nothing skipped, and gatehouse trigger reaches it', async () => {
  const { owner } = await createProject('listen cli', { plan: 'business' });
  const path = hooks.endpoint(() => ({ status: 200, body: 'thanks' }), 'listened');
  const state = join(work, 'listen.json');
  const first = listen(owner.key, state, hooks.url + path);
  await eventually(async () => first.stderr().includes('Ready'), 20_000);
  const saved = JSON.parse(readFileSync(state, 'utf8'));
  assert.match(saved.subscription_id, /^wh_/);

  const one = await call('POST', '/public/v1/contacts', { key: owner.key, body: { name: 'One' } });
  assert.ok(await hooks.waitFor(path, 1, 20_000), `forwarded (listener said: ${first.stderr()})`);
  const [got] = hooks.requestsTo(path);
  assert.ok(verified(got, saved.secret), 'the receiver verifies the signature with the subscription secret');
  assert.deepEqual(JSON.parse(got.body).data, one.body);
  await eventually(async () => first.lines.some((l) => l.includes('contact.created') && l.includes('200')), 10_000);
  await first.kill();

  // Killed: two events arrive while no listener runs; their attempts fail on the schedule.
  const two = await call('POST', '/public/v1/contacts', { key: owner.key, body: { name: 'Two' } });
  const three = await call('POST', '/public/v1/contacts', { key: owner.key, body: { name: 'Three' } });
  await eventually(async () => {
    const missed = (await deliveriesOf(owner.key, saved.subscription_id)).filter((d) => d.status !== 'delivered');
    return missed.length === 2 && missed.every((d) => d.attempts.some((a) => a.error === NO_LISTENER));
  }, 30_000);

  // Started again with the same state: it resumes and both arrive, the first not again.
  const second = listen(owner.key, state, hooks.url + path);
  assert.ok(await hooks.waitFor(path, 3, 30_000), `resumed (listener said: ${second.stderr()})`);
  const names = hooks.requestsTo(path).map((r) => JSON.parse(r.body).data.name);
  assert.deepEqual(names.sort(), ['One', 'Three', 'Two']);
  assert.ok([two, three].every((c) => c.status === 201));
  const reused = JSON.parse(readFileSync(state, 'utf8'));
  assert.equal(reused.subscription_id, saved.subscription_id, 'the same subscription, not a new one');

  const triggered = gatehouse(['trigger', 'contact.created'], { key: owner.key });
  assert.equal(triggered.status, 0, triggered.stderr);
  assert.equal(JSON.parse(triggered.stdout).deliveries, 1);
  assert.ok(await hooks.waitFor(path, 4, 20_000), 'the sample event is forwarded');
  const sample = JSON.parse(hooks.requestsTo(path)[3].body);
  assert.deepEqual([sample.type, sample.data.id], ['contact.created', 'ct_sample']);
  await second.kill();
  const all = await deliveriesOf(owner.key, saved.subscription_id);
  assert.equal(all.length, 4);
  assert.ok(all.every((d) => d.status === 'delivered'), JSON.stringify(all.map((d) => d.status)));
});
