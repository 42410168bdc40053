// SPEC §12.1 "Webhook consumer", end to end against real receivers on 127.0.0.1: a refused
// connection, a receiver that hangs past WEBHOOK_TIMEOUT_MS (3000 in scripts/test), one that streams
// a 50 MB body, one that answers 429 with `Retry-After: 99999999999`, a manual retry fired during a
// slow attempt, and a subscription deleted with a delivery pending. Each ends with its attempts
// recorded and no uncaught exception in the worker's log.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { call, createProject, d1, eventually, freePort, listAll, receiver, sleep } from './harness.mjs';

const TIMEOUT_MS = 3000; // WEBHOOK_TIMEOUT_MS in scripts/test

/** The receiver: a handler per path, and what each path received. */
let hooks;

before(async () => {
  hooks = await receiver();
});

after(() => hooks.close());

/** A fresh path answered by `handler(request, res)` (see `receiver` in the harness). */
const endpoint = (handler) => hooks.endpoint(handler, 'fault');
const requestsTo = (path) => hooks.requestsTo(path);

async function owner() {
  // Plans belong to projects (SPEC §13): an owner can no longer raise its own key's plan.
  return createProject(undefined, { plan: 'business' });
}

async function subscribe(ownerKey, url) {
  const res = await call('POST', '/public/v1/webhooks', { key: ownerKey, body: { url, events: ['contact.created'] } });
  assert.equal(res.status, 201, res.text);
  return res.body;
}

/** Creates a contact (one event) and answers the delivery id once the delivery exists. */
async function emit(ownerKey, hookId) {
  const created = await call('POST', '/public/v1/contacts', { key: ownerKey, body: { name: 'Fault' } });
  assert.equal(created.status, 201, created.text);
  let found;
  await eventually(async () => {
    [found] = await listAll(`/public/v1/webhooks/${hookId}/deliveries`, ownerKey);
    return found;
  });
  assert.ok(found, 'the delivery was written with the contact');
  return found.id;
}

async function deliveryOf(ownerKey, hookId, id) {
  return (await listAll(`/public/v1/webhooks/${hookId}/deliveries`, ownerKey)).find((d) => d.id === id);
}

/** Waits until `probe(delivery)` holds; answers the delivery. */
async function until(ownerKey, hookId, id, probe, ms = 30_000) {
  let d;
  const ok = await eventually(async () => {
    d = await deliveryOf(ownerKey, hookId, id);
    return d && probe(d);
  }, ms);
  assert.ok(ok, `delivery ${id} never reached the expected state: ${JSON.stringify(d)}`);
  return d;
}

/** The attempts as stored in D1, whatever the API shows. */
async function storedAttempts(id) {
  return d1(`SELECT attempt, response_code, error, length(CAST(response_excerpt AS BLOB)) AS excerpt_bytes
             FROM webhook_attempts WHERE delivery_id = '${id}' ORDER BY attempt`);
}

function assertNumbered(attempts) {
  assert.deepEqual(attempts.map((a) => a.attempt), attempts.map((_, i) => i + 1), 'attempt numbers are 1, 2, … once each');
  for (const a of attempts) assert.ok(a.response_code !== null || a.error, `attempt ${a.attempt} is complete`);
}

/** The worker's raw log from `offset` on, and a check that nothing in it was an uncaught error. */
async function logSize() {
  return (await readFile(`${process.env.GATEHOUSE_STATE}/wrangler.log`, 'utf8')).length;
}
async function assertNoUncaught(offset) {
  const text = (await readFile(`${process.env.GATEHOUSE_STATE}/wrangler.log`, 'utf8')).slice(offset);
  const bad = text.split('\n').filter((l) => /uncaught|panicked|RuntimeError|unreachable executed/i.test(l));
  assert.deepEqual(bad, [], 'no uncaught exception in the worker log');
}

test('a refused connection is a recorded failed attempt, six times, then failed', async () => {
  const offset = await logSize();
  const { owner: o } = await owner();
  const hook = await subscribe(o.key, `http://127.0.0.1:${await freePort()}/nobody`);
  const id = await emit(o.key, hook.id);
  const failed = await until(o.key, hook.id, id, (d) => d.status === 'failed', 45_000);
  assert.equal(failed.attempts.length, 6);
  assertNumbered(failed.attempts);
  for (const a of failed.attempts) {
    assert.equal(a.response_code, null);
    assert.ok(a.error && !/no answer within/.test(a.error), `a network error, not a timeout: ${a.error}`);
  }
  assert.equal((await storedAttempts(id)).length, 6);
  await assertNoUncaught(offset);
});

test('a receiver that hangs past the timeout is a failed attempt after about WEBHOOK_TIMEOUT_MS', async () => {
  const offset = await logSize();
  const { owner: o } = await owner();
  // The first request gets no answer at all (the socket stays open); later ones get 200.
  const path = endpoint((request, res) => { if (request.n > 1) res.end('fine now'); });
  const hook = await subscribe(o.key, hooks.url + path);
  const id = await emit(o.key, hook.id);
  const delivered = await until(o.key, hook.id, id, (d) => d.status === 'delivered');
  assertNumbered(delivered.attempts);
  const [hung, ok] = delivered.attempts;
  assert.equal(delivered.attempts.length, 2);
  assert.equal(hung.error, `no answer within ${TIMEOUT_MS} ms`);
  assert.equal(hung.response_code, null);
  assert.ok(hung.duration_ms >= TIMEOUT_MS - 100 && hung.duration_ms < TIMEOUT_MS + 5_000, `${hung.duration_ms} ms`);
  assert.equal(ok.response_code, 200);
  await assertNoUncaught(offset);
});

test('a 50 MB streamed answer: 1 KiB is kept, the rest is never read, the attempt is recorded promptly', async () => {
  const offset = await logSize();
  const { owner: o } = await owner();
  const total = 50 * 1024 * 1024;
  const chunk = Buffer.alloc(64 * 1024, 'a');
  const path = endpoint((request, res) => {
    request.bytesSent = 0;
    res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': String(total) });
    const pump = () => {
      while (request.bytesSent < total && request.closedAt === null) {
        request.bytesSent += chunk.length;
        if (!res.write(chunk)) return res.once('drain', pump);
      }
      if (request.closedAt === null) res.end();
    };
    pump();
  });
  const hook = await subscribe(o.key, hooks.url + path);
  const id = await emit(o.key, hook.id);
  const delivered = await until(o.key, hook.id, id, (d) => d.status === 'delivered');
  assert.equal(delivered.attempts.length, 1);
  const [attempt] = delivered.attempts;
  assert.equal(attempt.response_code, 200);
  assert.ok(Buffer.byteLength(attempt.response_body) <= 1024, `kept ${Buffer.byteLength(attempt.response_body)} bytes`);
  assert.equal(attempt.response_body, 'a'.repeat(1024));
  assert.ok(attempt.duration_ms < TIMEOUT_MS, `recorded promptly, not at the timeout: ${attempt.duration_ms} ms`);
  const [stored] = await storedAttempts(id);
  assert.ok(stored.excerpt_bytes <= 1024);
  // The worker cancelled the body: the receiver's connection closed long before 50 MB went out.
  const [sent] = requestsTo(path);
  assert.ok(await eventually(async () => sent.closedAt !== null, 10_000), 'the connection was closed');
  assert.ok(sent.bytesSent < total / 2, `the receiver sent only ${sent.bytesSent} of ${total} bytes`);
  await assertNoUncaught(offset);
});

test('429 with Retry-After: 99999999999 waits 24 h at most; a manual retry then delivers it', async () => {
  const offset = await logSize();
  const { owner: o } = await owner();
  const path = endpoint(({ n }) => (n === 1 ? { status: 429, headers: { 'retry-after': '99999999999' }, body: 'slow down' } : { status: 200, body: 'ok' }));
  const hook = await subscribe(o.key, hooks.url + path);
  const id = await emit(o.key, hook.id);
  const waiting = await until(o.key, hook.id, id, (d) => d.attempts.length === 1);
  const [first] = waiting.attempts;
  assert.equal(first.response_code, 429);
  const next = Date.parse(first.next_retry_at) - Date.parse(first.started_at);
  assert.ok(next <= 24 * 3600_000 + 60_000, `next retry ${next} ms away, at most 24 h`);
  assert.ok(next >= 23 * 3600_000, `the long Retry-After is honoured up to the cap: ${next} ms`);
  assert.equal(waiting.status, 'pending');
  assert.equal(Date.parse(waiting.scheduled_at), Date.parse(first.next_retry_at));

  const retry = await call('POST', `/public/v1/webhooks/deliveries/${id}/retry`, { key: o.key });
  assert.equal(retry.status, 202, retry.text);
  const delivered = await until(o.key, hook.id, id, (d) => d.status === 'delivered');
  assert.deepEqual(delivered.attempts.map((a) => a.response_code), [429, 200]);
  assertNumbered(delivered.attempts);
  await assertNoUncaught(offset);
});

test('a manual retry during a slow attempt waits for it: unique numbers, no lost row, one request at a time', async () => {
  const offset = await logSize();
  const { owner: o } = await owner();
  // The first request takes 2 s and fails; the next ones succeed at once.
  const path = endpoint(({ n }) => (n === 1 ? sleep(2_000).then(() => ({ status: 500, body: 'slow failure' })) : { status: 200, body: 'ok' }));
  const hook = await subscribe(o.key, hooks.url + path);
  const id = await emit(o.key, hook.id);
  assert.ok(await eventually(async () => requestsTo(path).length >= 1), 'the slow attempt started');
  // Several retries while it is in flight, in parallel.
  const retries = await Promise.all([1, 2, 3].map(() => call('POST', `/public/v1/webhooks/deliveries/${id}/retry`, { key: o.key })));
  for (const r of retries) assert.equal(r.status, 202, r.text);
  assert.equal(requestsTo(path).length, 1, 'no attempt beside the one in flight');

  const delivered = await until(o.key, hook.id, id, (d) => d.status === 'delivered');
  assertNumbered(delivered.attempts);
  assert.deepEqual(delivered.attempts.map((a) => a.response_code), [500, 200]);
  const stored = await storedAttempts(id);
  assert.deepEqual(stored.map((a) => [a.attempt, a.response_code]), [[1, 500], [2, 200]], 'every attempt row is kept');
  const [slow, next] = requestsTo(path);
  assert.ok(next.at >= slow.closedAt, 'the next attempt started after the slow one had its answer');
  // The retry made it due now: the next attempt followed the slow one at once, not after the schedule.
  assert.ok(next.at - slow.closedAt < 5_000, `${next.at - slow.closedAt} ms between them`);
  await sleep(1_500);
  assert.equal(requestsTo(path).length, 2, 'nothing more once delivered');
  await assertNoUncaught(offset);
});

test('deleting a subscription fails its pending delivery with "subscription deleted" and no fake attempt', async () => {
  const offset = await logSize();
  const { owner: o } = await owner();
  const path = endpoint(() => ({ status: 503, headers: { 'retry-after': '3600' }, body: 'later' }));
  const hook = await subscribe(o.key, hooks.url + path);
  const id = await emit(o.key, hook.id);
  await until(o.key, hook.id, id, (d) => d.attempts.length === 1 && d.status === 'pending');
  assert.equal((await call('DELETE', `/public/v1/webhooks/${hook.id}`, { key: o.key })).status, 200);
  const [row] = await d1(`SELECT status, last_error, attempts FROM webhook_deliveries WHERE id = '${id}'`);
  assert.deepEqual(row, { status: 'failed', last_error: 'subscription deleted', attempts: 1 });
  const stored = await storedAttempts(id);
  assert.deepEqual(stored.map((a) => [a.attempt, a.response_code]), [[1, 503]], 'no attempt for the deletion');
  // A retry of it now fails it again without calling anyone.
  const retry = await call('POST', `/public/v1/webhooks/deliveries/${id}/retry`, { key: o.key });
  assert.equal(retry.status, 202, retry.text);
  await sleep(2_000);
  const [again] = await d1(`SELECT status, last_error, attempts FROM webhook_deliveries WHERE id = '${id}'`);
  assert.deepEqual(again, { status: 'failed', last_error: 'subscription deleted', attempts: 1 });
  assert.equal(requestsTo(path).length, 1);
  await assertNoUncaught(offset);
});
