// SPEC §19 "Secrets", end to end: KEY_PEPPER and WEBHOOK_SECRETS_KEY are rotated on a gateway of
// this file's own (its own state folder and secrets, started twice more with the secrets of each
// step). Keys issued before the rotation keep working, their kept responses still replay, webhook
// secrets still sign and the minute cron re-seals them under the new key; keys issued after it
// are hashed under the new pepper. SPEC §26: a key used during the rotation is re-hashed under the
// new pepper and keeps its guard (its window goes on); the admin routes count what the rotation
// has not reached (keys not used since, secrets not re-sealed yet). Once the previous webhook key
// is removed, the re-sealed secrets still sign; once the previous pepper is removed, the keys used
// during the rotation keep working and only those never used since stop.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createHmac, randomBytes } from 'node:crypto';
import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { assertError, call, d1 as harnessD1, eventually, freshWindow, idemKey, receiver, startGateway, runCron } from './harness.mjs';

const secret = () => randomBytes(24).toString('hex');
const [P1, P2, W1, W2, ADMIN] = [secret(), secret(), secret(), secret(), secret()];
const keyId = (s) => createHmac('sha256', s).update('gatehouse/key-id').digest('hex').slice(0, 8);
const keyHash = (pepper, key) => createHmac('sha256', pepper).update(key).digest('hex');

let dir;
let hooks;

before(async () => {
  dir = await mkdtemp(join(tmpdir(), 'gatehouse-rotation-'));
  hooks = await receiver();
});

after(() => hooks.close());

/** Starts the gateway on this file's state folder with `secrets`; answers its URL and a stop. */
async function gateway(step, secrets) {
  const envFile = join(dir, `${step}.env`);
  await writeFile(envFile, Object.entries({ ADMIN_TOKEN: ADMIN, ...secrets }).map(([k, v]) => `${k}=${v}\n`).join(''));
  return startGateway(`${dir}/state`, { envFile });
}

/** Rows of `sql` in this file's gateway's D1. */
const d1 = (sql) => harnessD1(sql, 'DB', `${dir}/state`);

/** Whether the receiver's `n`-th request carries the signature a holder of `whsec` computes. */
async function signedWith(n, whsec) {
  assert.ok(await eventually(async () => hooks.received.length >= n, 20_000), `delivery ${n}`);
  const { headers, body } = hooks.received[n - 1];
  const key = Buffer.from(whsec.slice('whsec_'.length), 'base64');
  const signed = `${headers['webhook-id']}.${headers['webhook-timestamp']}.${body}`;
  return headers['webhook-signature'].split(' ').includes(`v1,${createHmac('sha256', key).update(signed).digest('base64')}`);
}

test('rotating the pepper and the webhook secrets key loses no key, replay or secret', { timeout: 600_000 }, async () => {
  // Before the rotation.
  let gw = await gateway('before', { KEY_PEPPER: P1, WEBHOOK_SECRETS_KEY: W1 });
  let base = gw.base;
  let owner;
  let issued;
  let whsec;
  let hookId;
  let idle;
  let ownerId;
  let remaining;
  const idem = idemKey();
  try {
    const project = await call('POST', '/admin/v1/projects', { base, key: ADMIN, body: { name: 'rotation' } });
    assert.equal(project.status, 201, project.text);
    [owner, ownerId] = [project.body.owner_key.key, project.body.owner_key.id];
    issued = await call('POST', '/public/v1/keys', { base, key: owner, idem, body: { type: 'server', name: 'before' } });
    assert.equal(issued.status, 201, issued.text);
    const hook = await call('POST', '/public/v1/webhooks', { base, key: owner, body: { url: `${hooks.url}/rotation`, events: ['contact.created'] } });
    assert.equal(hook.status, 201, hook.text);
    [whsec, hookId] = [hook.body.secret, hook.body.id];
    assert.equal((await call('POST', '/public/v1/contacts', { base, key: owner, body: { name: 'Before' } })).status, 201);
    assert.ok(await signedWith(1, whsec));
    idle = await call('POST', '/public/v1/keys', { base, key: owner, body: { type: 'server', name: 'idle' } });
    assert.equal(idle.status, 201, idle.text);
    const none = await call('GET', '/admin/v1/keys/previous-pepper', { base, key: ADMIN });
    assert.equal(none.status, 200, none.text);
    assert.deepEqual([none.body.count, none.body.current, none.body.previous], [0, keyId(P1), null]);
    // The issued key's minute window, which must go on under the new pepper (the same guard).
    await freshWindow(45);
    for (let i = 0; i < 3; i += 1) {
      const me = await call('GET', '/public/v1/me', { base, key: issued.body.key });
      remaining = Number(me.headers.get('x-ratelimit-remaining'));
    }
  } finally {
    gw.stop();
  }
  assert.ok((await d1(`SELECT secret FROM webhooks WHERE id = '${hookId}'`))[0].secret.startsWith(`v2.${keyId(W1)}.`));

  // During the rotation: new secrets, the previous ones beside them.
  gw = await gateway('during', { KEY_PEPPER: P2, KEY_PEPPER_PREVIOUS: P1, WEBHOOK_SECRETS_KEY: W2, WEBHOOK_SECRETS_KEY_PREVIOUS: W1 });
  base = gw.base;
  let fresh;
  try {
    const pending = await call('GET', '/admin/v1/keys/previous-pepper', { base, key: ADMIN });
    assert.equal(pending.status, 200, pending.text);
    assert.deepEqual([pending.body.count, pending.body.current, pending.body.previous], [3, keyId(P2), keyId(P1)]);
    assert.deepEqual(pending.body.keys.map((k) => k.id).sort(), [issued.body.id, idle.body.id, ownerId].sort());
    const me = await call('GET', '/public/v1/me', { base, key: issued.body.key });
    assert.equal(me.status, 200, 'an issued key of before works');
    assert.equal(Number(me.headers.get('x-ratelimit-remaining')), remaining - 1, 'its guard, and its window, kept');
    const [rehashed] = await d1(`SELECT key_hash, guard_hash, pepper FROM api_keys WHERE id = '${issued.body.id}'`);
    assert.deepEqual(rehashed, { key_hash: keyHash(P2, issued.body.key), guard_hash: keyHash(P1, issued.body.key), pepper: keyId(P2) });
    assert.equal((await call('GET', '/public/v1/me', { base, key: owner })).status, 200, 'the owner key of before works');
    const left = await call('GET', '/admin/v1/keys/previous-pepper', { base, key: ADMIN });
    assert.deepEqual([left.body.count, left.body.keys.map((k) => k.id)], [1, [idle.body.id]], 'only the key not used since');
    assert.equal(left.body.keys[0].prefix, idle.body.prefix);
    const unsealed = await call('GET', '/admin/v1/webhooks/previous-secret-key', { base, key: ADMIN });
    assert.equal(unsealed.status, 200, unsealed.text);
    assert.deepEqual([unsealed.body.count, unsealed.body.webhooks[0].id, unsealed.body.webhooks[0].opens], [1, hookId, true]);
    const replay = await call('POST', '/public/v1/keys', { base, key: owner, idem, body: { type: 'server', name: 'before' } });
    assert.equal(replay.status, 201, replay.text);
    assert.equal(replay.headers.get('idempotent-replayed'), '1');
    assert.deepEqual(replay.body, issued.body, 'a response kept before the rotation replays');
    fresh = await call('POST', '/public/v1/keys', { base, key: owner, body: { type: 'server', name: 'during' } });
    assert.equal(fresh.status, 201, fresh.text);
    assert.equal((await call('GET', '/public/v1/me', { base, key: fresh.body.key })).status, 200);
    const [row] = await d1(`SELECT key_hash FROM api_keys WHERE id = '${fresh.body.id}'`);
    assert.equal(row.key_hash, keyHash(P2, fresh.body.key), 'a new key is hashed under the new pepper');
    assert.equal((await call('POST', '/public/v1/contacts', { base, key: owner, body: { name: 'During' } })).status, 201);
    assert.ok(await signedWith(2, whsec), 'a secret sealed under the previous key signs');
    const cron = await runCron({ base });
    assert.equal(cron.status, 200);
    const resealed = await call('GET', '/admin/v1/webhooks/previous-secret-key', { base, key: ADMIN });
    assert.deepEqual([resealed.body.count, resealed.body.webhooks], [0, []], 'the cron re-sealed it');
  } finally {
    gw.stop();
  }
  assert.ok((await d1(`SELECT secret FROM webhooks WHERE id = '${hookId}'`))[0].secret.startsWith(`v2.${keyId(W2)}.`), 'the cron re-sealed the secret under the new key');

  // After: the previous webhook key and pepper removed.
  gw = await gateway('after', { KEY_PEPPER: P2, WEBHOOK_SECRETS_KEY: W2 });
  base = gw.base;
  try {
    assert.equal((await call('GET', '/public/v1/me', { base, key: fresh.body.key })).status, 200, 'a key of the new pepper works');
    assert.equal((await call('POST', '/public/v1/contacts', { base, key: fresh.body.key, body: { name: 'After' } })).status, 201);
    assert.ok(await signedWith(3, whsec), 'the re-sealed secret signs without the previous key');
    assert.equal((await call('GET', '/public/v1/me', { base, key: owner })).status, 200, 're-hashed during the rotation');
    assert.equal((await call('GET', '/public/v1/me', { base, key: issued.body.key })).status, 200, 'found through its new hash');
    // Documented: a key not used during the rotation is still under a pepper that is no longer
    // configured, and no longer authenticates (the count said so).
    assertError(await call('GET', '/public/v1/me', { base, key: idle.body.key }), 401, 'INVALID_API_KEY');
  } finally {
    gw.stop();
  }
});
