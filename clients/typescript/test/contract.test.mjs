// The retry contract both SDKs keep (clients/contract/retry.json): the classification and delay
// rows through the pure functions, and every answer sequence through a real Gatehouse client whose
// fetch plays the answers, whose clock moves only by its waits, and whose random is the case's.
import { test, describe } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { Gatehouse, GatehouseError, parseRetryAfter, retryDelay, shouldRetry } from '../dist/index.js';

const fixture = JSON.parse(readFileSync(new URL('../../contract/retry.json', import.meta.url), 'utf8'));
const NOW = Date.parse(fixture.now);
const UUID_V4 = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

const failureOf = (f) => (f.timeout ? 'timeout' : f.network ? 'network' : f);

describe('classification', () => {
  for (const [i, row] of fixture.classification.entries()) {
    test(`#${i} ${JSON.stringify(row.failure)} idempotent=${row.idempotent} → ${row.retried}`, () => {
      assert.equal(shouldRetry(failureOf(row.failure), row.idempotent), row.retried);
    });
  }
});

describe('delays', () => {
  for (const [i, row] of fixture.delays.entries()) {
    test(`#${i} attempt ${row.attempt} retry-after ${JSON.stringify(row.retry_after)} random ${row.random} → ${row.wait_ms} ms`, () => {
      const wait = retryDelay(row.attempt, parseRetryAfter(row.retry_after, NOW), row.random);
      assert.equal(Math.round(wait), row.wait_ms);
    });
  }
});

/** An answer of the fixture as a fetch outcome. */
function play(answer) {
  if (answer.network) return Promise.reject(new TypeError('fetch failed'));
  if (answer.timeout) return Promise.reject(new DOMException('The operation timed out.', 'TimeoutError'));
  const ok = answer.status >= 200 && answer.status < 300;
  const body = ok
    ? JSON.stringify({ ok: true })
    : JSON.stringify({
        error: { code: answer.code, message: `scripted ${answer.status}`, request_id: null, retryable: answer.retryable, details: {} },
      });
  return Promise.resolve(
    new Response(body, { status: answer.status, headers: { 'content-type': 'application/json', ...answer.headers } }),
  );
}

describe('sequences through a Gatehouse client', () => {
  for (const sequence of fixture.sequences) {
    test(sequence.name, async () => {
      let clock = NOW;
      let waits = [];
      let script = [];
      let sent = [];
      const gh = new Gatehouse({
        apiKey: 'gh_s_contract',
        baseUrl: 'http://127.0.0.1:9',
        now: () => clock,
        sleep: async (ms) => {
          waits.push(ms);
          clock += ms;
        },
        random: () => sequence.random,
        fetch: async (url, init) => {
          sent.push({ url: String(url), method: init.method, headers: new Headers(init.headers) });
          // The last answer repeats for every further attempt ("on every attempt").
          const answer = script[Math.min(sent.length - 1, script.length - 1)];
          return play(answer);
        },
      });
      for (const [c, call] of sequence.calls.entries()) {
        waits = [];
        sent = [];
        script = call.answers;
        const { request, expect } = call;
        const options = {};
        if (request.idempotency_key !== undefined) options.idempotencyKey = request.idempotency_key;
        if (request.max_attempts !== undefined) options.maxAttempts = request.max_attempts;
        if (request.deadline_ms !== undefined) options.deadlineMs = request.deadline_ms;
        if (request.pacing !== undefined) options.pacing = request.pacing;
        if (request.method !== 'GET') options.body = { name: 'contract' };
        const where = `call ${c + 1}`;
        let outcome;
        try {
          const reply = await gh.send(request.method, request.path, options);
          outcome = { status: reply.status };
        } catch (error) {
          assert.ok(error instanceof GatehouseError, `${where}: a GatehouseError, not ${error}`);
          outcome = { error };
        }
        assert.equal(sent.length, expect.attempts, `${where}: attempts`);
        assert.deepEqual(waits.map(Math.round), expect.waits_ms, `${where}: waits`);
        for (const s of sent) assert.equal(s.url, `http://127.0.0.1:9${request.path}`);
        for (const s of sent) assert.equal(s.method, request.method);
        for (const s of sent) assert.equal(s.headers.get('authorization'), 'Bearer gh_s_contract');
        const wanted = expect.outcome;
        if (wanted.status !== undefined) {
          assert.deepEqual(outcome, { status: wanted.status }, `${where}: outcome`);
        } else if (wanted.error === 'network') {
          assert.ok(outcome.error, `${where}: an error`);
          assert.equal(outcome.error.status, 0);
          assert.equal(outcome.error.code, 'NETWORK_ERROR');
          assert.equal(outcome.error.retryable, true);
        } else {
          assert.ok(outcome.error, `${where}: an error, not ${JSON.stringify(outcome)}`);
          const { status, code, retryable, retry_after_ms } = wanted.error;
          assert.equal(outcome.error.status, status, `${where}: status`);
          assert.equal(outcome.error.code, code, `${where}: code`);
          assert.equal(outcome.error.retryable, retryable, `${where}: retryable`);
          if (retry_after_ms !== undefined) assert.equal(outcome.error.retryAfter * 1000, retry_after_ms, `${where}: retry-after`);
        }
        const keys = sent.map((s) => s.headers.get('idempotency-key'));
        if (request.method === 'GET') assert.deepEqual(keys, keys.map(() => null), `${where}: a read has no key`);
        else for (const key of keys) assert.ok(key, `${where}: every attempt of a write has a key`);
        if (expect.same_key) assert.equal(new Set(keys).size, 1, `${where}: one key for every attempt`);
        if (expect.key === 'uuid-v4') assert.match(keys[0], UUID_V4);
        else if (expect.key !== undefined) assert.equal(keys[0], expect.key);
      }
    });
  }
});

test('every automatic key is new per logical call', async () => {
  const keys = [];
  const gh = new Gatehouse({
    apiKey: 'gh_s_contract',
    baseUrl: 'http://127.0.0.1:9',
    fetch: async (_url, init) => {
      keys.push(new Headers(init.headers).get('idempotency-key'));
      return new Response('{}', { status: 201 });
    },
  });
  await gh.contacts.create({ name: 'a' });
  await gh.contacts.create({ name: 'a' });
  assert.equal(keys.length, 2);
  assert.notEqual(keys[0], keys[1]);
  for (const key of keys) assert.match(key, UUID_V4);
});

test('the client\'s own per-attempt timeout is a TIMEOUT and is retried; the caller\'s signal cancels without retry', async () => {
  let attempts = 0;
  const gh = new Gatehouse({
    apiKey: 'gh_s_contract',
    baseUrl: 'http://127.0.0.1:9',
    timeoutMs: 20,
    maxAttempts: 2,
    sleep: async () => {},
    fetch: (_url, init) =>
      new Promise((_resolve, reject) => {
        attempts++;
        init.signal.addEventListener('abort', () => reject(init.signal.reason));
      }),
  });
  await assert.rejects(gh.me(), (e) => e instanceof GatehouseError && e.code === 'TIMEOUT' && e.status === 0);
  assert.equal(attempts, 2);
  attempts = 0;
  const controller = new AbortController();
  const call = gh.me({ signal: controller.signal });
  controller.abort(new Error('stop'));
  await assert.rejects(call, /stop/);
  assert.equal(attempts, 1);
});

test('an attempt gets at most what is left of the call\'s deadline', async () => {
  let attempts = 0;
  const gh = new Gatehouse({
    apiKey: 'gh_s_contract',
    baseUrl: 'http://127.0.0.1:9',
    timeoutMs: 10_000,
    fetch: (_url, init) =>
      new Promise((_resolve, reject) => {
        attempts++;
        init.signal.addEventListener('abort', () => reject(init.signal.reason));
      }),
  });
  const started = Date.now();
  await assert.rejects(gh.me({ deadlineMs: 100 }), (e) => e instanceof GatehouseError && e.code === 'TIMEOUT');
  const took = Date.now() - started;
  assert.ok(took >= 90 && took < 2000, `took ${took} ms`);
  assert.equal(attempts, 1, 'no retry whose wait ends after the deadline');
});

test('the slow-down is per key, and shared by withKey clients of the same key', async () => {
  let clock = NOW;
  const waits = [];
  const answer = (remaining) =>
    new Response('{}', { status: 200, headers: { 'x-ratelimit-limit': '30', 'x-ratelimit-remaining': String(remaining), 'x-ratelimit-reset': String(NOW / 1000 + 60) } });
  const a = new Gatehouse({
    apiKey: 'gh_s_a',
    baseUrl: 'http://127.0.0.1:9',
    now: () => clock,
    sleep: async (ms) => waits.push(ms),
    random: () => 0,
    fetch: async (_url, init) => answer(new Headers(init.headers).get('authorization') === 'Bearer gh_s_a' ? 0 : 5),
  });
  await a.me();
  const b = a.withKey('gh_s_b');
  await b.me();
  assert.deepEqual(waits, [], 'another key is not held');
  await a.withKey('gh_s_a').me();
  assert.deepEqual(waits, [60_000], 'the same key through another client is held');
});

test('request: query values and a path with its own query', async () => {
  const urls = [];
  const gh = new Gatehouse({
    apiKey: 'gh_s_contract',
    baseUrl: 'http://127.0.0.1:9/',
    fetch: async (url) => {
      urls.push(String(url));
      return new Response('{"data":[],"next_cursor":null}', { status: 200 });
    },
  });
  await gh.request('GET', '/public/v1/logs?status=5xx', { query: { path: '/public/v1/contacts*', limit: 5, cursor: undefined, from: null } });
  await gh.logs.list({ method: 'post' }).first();
  assert.deepEqual(urls, [
    'http://127.0.0.1:9/public/v1/logs?status=5xx&path=%2Fpublic%2Fv1%2Fcontacts*&limit=5',
    'http://127.0.0.1:9/public/v1/logs?method=post',
  ]);
  await assert.rejects(gh.request('GET', 'public/v1/me'), TypeError);
});
