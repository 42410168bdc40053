// SPEC §10 and §13, webhook targets: under `ALLOW_PRIVATE_WEBHOOK_URLS=true` (as scripts/test runs
// wrangler dev) loopback is allowed, but every other special-purpose target is refused, however it
// is spelled; and each attempt checks its target again. Traffic stays on this machine: the only
// subscriptions created point to 127.0.0.1 or [::1], and the one whose row is changed afterwards
// names the local receiver through an IPv4-mapped address (refused, and local if it were not).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { assertError, call, createProject, d1, listAll, receiver, sleep } from './harness.mjs';

/** Every form of a special-purpose target other than loopback and private (RFC 1918, ULA). */
const REFUSED = [
  // IPv4 blocks, written every way the URL standard reads an IPv4 address.
  'https://198.18.0.1/', 'https://198.19.255.255/hook', 'https://3323068417/', 'https://0xc6.0x12.0.1/',
  'https://0306.022.0.1/', 'https://198.18.1/', 'http://198.18.0.1/',
  'https://192.0.0.1/', 'https://192.0.0.192/', 'https://240.0.0.1/', 'https://255.255.255.255/',
  'https://0.0.0.0/', 'https://0/', 'https://100.64.0.1/', 'https://100.100.100.200/',
  'https://169.254.169.254/latest/meta-data/', 'https://2852039166/', 'https://0xa9fea9fe/',
  'https://0251.0376.0251.0376/', 'https://169.254.1.1/', 'https://224.0.0.1/', 'https://192.0.2.1/',
  'https://198.51.100.1/', 'https://203.0.113.1/', 'https://192.88.99.1/',
  // IPv6 blocks, IPv4 embedded in IPv6 whatever the IPv4 address (loopback included).
  'https://[::]/', 'https://[::127.0.0.1]/', 'https://[::7f00:1]/', 'https://[::ffff:7f00:1]/',
  'https://[::ffff:127.0.0.1]/', 'http://[::ffff:127.0.0.1]:8787/', 'https://[::ffff:0:7f00:1]/',
  'https://[64:ff9b::7f00:1]/', 'https://[64:ff9b:1::1]/', 'https://[2002:7f00:1::]/',
  'https://[2001::1]/', 'https://[2001:db8::1]/', 'https://[fec0::1]/', 'https://[fe80::1]/',
  'https://[ff02::1]/', 'https://[fd00:ec2::254]/', 'https://[100::1]/', 'https://[3fff::1]/',
  // Metadata and internal names.
  'https://metadata.google.internal/computeMetadata/v1/', 'https://METADATA.GOOGLE.INTERNAL./',
  'https://metadata.goog/', 'https://instance-data/', 'https://db.internal/', 'https://printer.local/',
  'https://intranet/',
];

/** Owner keys, a fresh project's every 20 calls (a trial owner key allows 30 a minute). */
let owner;
let calls = 0;
async function ownerKey() {
  if (!owner || calls >= 20) {
    owner = (await createProject('ssrf')).owner;
    calls = 0;
  }
  calls += 1;
  return owner.key;
}

let hooks;

before(async () => {
  hooks = await receiver();
});

after(() => hooks.close());

/** The subscription's deliveries once `done` holds for its first one or the receiver got anything
 *  (polled every 1.5 s: the owner key allows 30 requests a minute). */
async function settle(key, hookId, done, ms = 25_000) {
  const end = Date.now() + ms;
  for (;;) {
    const list = await listAll(`/public/v1/webhooks/${hookId}/deliveries`, key);
    if ((list[0] && done(list[0])) || hooks.received.length > 0 || Date.now() > end) return list;
    await sleep(1500);
  }
}

test('every special-purpose target other than loopback is refused with 422, however it is written', async () => {
  const accepted = [];
  for (const url of REFUSED) {
    const key = await ownerKey();
    const res = await call('POST', '/public/v1/webhooks', { key, body: { url, events: ['*'] } });
    if (res.status !== 422) {
      accepted.push(`${url}: ${res.status} ${res.text}`);
      // Never leave it active: nothing may be sent there.
      if (res.status === 201) await call('DELETE', `/public/v1/webhooks/${res.body.id}`, { key });
      continue;
    }
    assertError(res, 422, 'VALIDATION_ERROR');
    assert.equal(res.body.error.details.field, 'url', url);
    assert.match(res.body.error.message, /^url must not point to /, url);
  }
  assert.deepEqual(accepted, [], 'refused targets that were accepted');
});

test('with the switch, loopback (127.0.0.1, [::1]) is allowed, and nothing refused was stored', async () => {
  const { owner: own } = await createProject('ssrf loopback');
  const ok = [`http://127.0.0.1:${hooks.port}/never-1`, `http://[::1]:${hooks.port}/never-2`];
  for (const url of ok) {
    const res = await call('POST', '/public/v1/webhooks', { key: own.key, body: { url, events: ['contact.created'] } });
    assert.equal(res.status, 201, `${url}: ${res.text}`);
  }
  const bad = await call('POST', '/public/v1/webhooks', { key: own.key, body: { url: 'https://[64:ff9b::7f00:1]/', events: ['*'] } });
  assertError(bad, 422, 'VALIDATION_ERROR');
  const list = await listAll('/public/v1/webhooks', own.key);
  assert.deepEqual(list.map((h) => h.url).sort(), ok.sort());
  for (const h of list) assert.equal((await call('DELETE', `/public/v1/webhooks/${h.id}`, { key: own.key })).status, 200);
});

test('each attempt checks the target again: a row that no longer passes is a failed attempt and nothing is sent', async () => {
  const { projectId, owner: own } = await createProject('ssrf recheck');
  const path = '/recheck';
  const created = await call('POST', '/public/v1/webhooks', {
    key: own.key, body: { url: `http://127.0.0.1:${hooks.port}${path}`, events: ['contact.created'] },
  });
  assert.equal(created.status, 201, created.text);
  const hook = created.body;
  // A row that predates the rules: the local receiver through an IPv4-mapped address.
  const mapped = `http://[::ffff:127.0.0.1]:${hooks.port}${path}`;
  await d1(`UPDATE webhooks SET url = '${mapped}' WHERE id = '${hook.id}' AND project_id = '${projectId}'`);

  const contact = await call('POST', '/public/v1/contacts', { key: own.key, body: { name: 'Refused target' } });
  assert.equal(contact.status, 201, contact.text);
  const reason = 'refused: url must not point to an IPv4-mapped address (::ffff:0:0/96)';
  const [delivery] = await settle(own.key, hook.id, (d) => d.status !== 'pending');
  assert.deepEqual(hooks.received.map((r) => r.url), [], 'the receiver got no request');
  assert.ok(delivery, 'the delivery was attempted');
  assert.deepEqual([delivery.status, delivery.last_error, delivery.last_response_code], ['failed', reason, null]);
  assert.deepEqual(delivery.attempts.map((a) => [a.attempt, a.error, a.response_code]), [[1, reason, null]]);

  // A manual retry is checked again too.
  const retried = await call('POST', `/public/v1/webhooks/deliveries/${delivery.id}/retry`, { key: own.key });
  assert.equal(retried.status, 202, retried.text);
  const [again] = await settle(own.key, hook.id, (d) => d.attempts.length === 2 && d.status !== 'pending');
  await sleep(500);
  assert.deepEqual(hooks.received.map((r) => r.url), [], 'the receiver got no request');
  assert.ok(again, 'the retry was attempted');
  assert.deepEqual([again.status, ...again.attempts.map((a) => a.error)], ['failed', reason, reason]);
});
