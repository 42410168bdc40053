// SPEC §13 "No plaintext secret at rest", end to end: an API key and a webhook secret created with
// an Idempotency-Key replay in full to their caller, deliveries are still signed with the secret,
// and neither the key nor the secret is anywhere in the local state folder (KV blobs, the Durable
// Objects' SQLite, the D1 files with their -wal, the worker's log), searched as raw bytes.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createDecipheriv, createHmac, hkdfSync, randomBytes } from 'node:crypto';
import { readdir, readFile } from 'node:fs/promises';
import { join, relative } from 'node:path';
import { call, createProject, d1, eventually, idemKey, receiver, workerLog, runCron } from './harness.mjs';

const STATE = process.env.GATEHOUSE_STATE;

/** The webhook receiver: every request it got, by path. */
let hooks;

before(async () => {
  hooks = await receiver();
});

after(() => hooks.close());

/** Waits for the `n`-th request to `url` and answers whether it carries the Standard Webhooks
 * signature a receiver holding `secret` computes. */
async function signedWith(url, n, secret) {
  const path = new URL(url).pathname;
  assert.ok(await hooks.waitFor(path, n, 20_000), `request ${n} to ${path}`);
  const { headers, body } = hooks.requestsTo(path)[n - 1];
  const key = Buffer.from(secret.slice('whsec_'.length), 'base64');
  const signed = `${headers['webhook-id']}.${headers['webhook-timestamp']}.${body}`;
  return headers['webhook-signature'] === `v1,${createHmac('sha256', key).update(signed).digest('base64')}`;
}

/** Every file under `dir`, recursively. */
async function filesUnder(dir) {
  const entries = await readdir(dir, { withFileTypes: true }).catch(() => []);
  const nested = await Promise.all(entries.map((e) => {
    const path = join(dir, e.name);
    return e.isDirectory() ? filesUnder(path) : [path];
  }));
  return nested.flat();
}

/** The files of the state folder (relative paths) whose raw bytes contain `text`. */
async function stateFilesContaining(text) {
  const needle = Buffer.from(text, 'utf8');
  const found = [];
  for (const path of await filesUnder(STATE)) {
    // A SQLite journal may come and go between the listing and the read.
    const bytes = await readFile(path).catch(() => null);
    if (bytes?.includes(needle)) found.push(relative(STATE, path));
  }
  return found;
}

test('issued keys and webhook secrets replay to their caller and are nowhere in the state folder', async () => {
  assert.ok(STATE, 'GATEHOUSE_STATE names the state folder of the running gateway');
  const { projectId, owner } = await createProject('at rest');
  const receiverUrl = `${hooks.url}/at-rest-${Date.now()}`;

  // A key created idempotently: the replay answers the very key again.
  const keyIdem = idemKey();
  const created = await call('POST', '/public/v1/keys', { key: owner.key, idem: keyIdem, body: { type: 'server', name: 'at-rest' } });
  assert.equal(created.status, 201, created.text);
  const issued = created.body.key;
  assert.match(issued, /^gh_s_/);
  const keyReplay = await call('POST', '/public/v1/keys', { key: owner.key, idem: keyIdem, body: { type: 'server', name: 'at-rest' } });
  assert.equal(keyReplay.status, 201, keyReplay.text);
  assert.equal(keyReplay.headers.get('idempotent-replayed'), '1');
  assert.equal(keyReplay.headers.get('x-original-request-id'), created.headers.get('x-request-id'));
  assert.deepEqual(keyReplay.body, created.body);
  assert.equal((await call('GET', '/public/v1/me', { key: issued })).status, 200, 'the issued key works');

  // A webhook subscription created idempotently: the replay answers the very secret again.
  const hookIdem = idemKey();
  const subscription = { url: receiverUrl, events: ['contact.created'] };
  const hook = await call('POST', '/public/v1/webhooks', { key: owner.key, idem: hookIdem, body: subscription });
  assert.equal(hook.status, 201, hook.text);
  const secret = hook.body.secret;
  assert.match(secret, /^whsec_/);
  const hookReplay = await call('POST', '/public/v1/webhooks', { key: owner.key, idem: hookIdem, body: subscription });
  assert.equal(hookReplay.status, 201, hookReplay.text);
  assert.equal(hookReplay.headers.get('idempotent-replayed'), '1');
  assert.deepEqual(hookReplay.body, hook.body);

  // Same Idempotency-Key, another body: still 409 REUSED (SPEC §5 unchanged).
  const reused = await call('POST', '/public/v1/keys', { key: owner.key, idem: keyIdem, body: { type: 'browser' } });
  assert.equal(reused.status, 409, reused.text);
  assert.equal(reused.body.error.code, 'IDEMPOTENCY_KEY_REUSED');

  // The sealed secret still signs: a delivery verifies with the secret shown at creation.
  const contact = await call('POST', '/public/v1/contacts', { key: issued, body: { name: 'At Rest' } });
  assert.equal(contact.status, 201, contact.text);
  assert.ok(await signedWith(receiverUrl, 1, secret), 'the delivery verifies with the secret');

  // The responses reach KV after they are sent: wait until both entries are in the state folder.
  // This is also the search's own check: it finds what is stored in the clear (the KV key names,
  // the key's 12-character prefix, the subscription's URL and the project id in D1).
  for (const name of [`papi:idem:${owner.id}:${keyIdem}`, `papi:idem:${owner.id}:${hookIdem}`]) {
    assert.ok(await eventually(async () => (await stateFilesContaining(name)).length > 0, 20_000), `KV holds ${name}`);
  }
  for (const stored of [created.body.prefix, receiverUrl, projectId]) {
    assert.notDeepEqual(await stateFilesContaining(stored), [], `the search finds ${stored}`);
  }

  // No issued key and no signing secret, anywhere, in any file.
  for (const [what, text] of [['the issued key', issued], ['the owner key', owner.key], ['the webhook secret', secret]]) {
    assert.deepEqual(await stateFilesContaining(text), [], `${what} is stored in plaintext`);
  }
  // Nor the secret's base64 part alone (e.g. a JSON-escaped copy of it).
  assert.deepEqual(await stateFilesContaining(secret.slice('whsec_'.length)), [], 'the secret is stored in plaintext');
});

test('a webhook secret stored in plaintext before the upgrade signs as before, and the minute cron seals it', async () => {
  const { owner } = await createProject('at rest, upgraded');
  const url = `${hooks.url}/legacy-${Date.now()}`;
  const hook = await call('POST', '/public/v1/webhooks', { key: owner.key, body: { url, events: ['contact.created'] } });
  assert.equal(hook.status, 201, hook.text);
  // The row as the version before sealing wrote it: the `whsec_` secret itself.
  const legacy = `whsec_${randomBytes(24).toString('base64')}`;
  await d1(`UPDATE webhooks SET secret = '${legacy}' WHERE id = '${hook.body.id}'`);
  const contact = (name) => call('POST', '/public/v1/contacts', { key: owner.key, body: { name } });
  assert.equal((await contact('Before')).status, 201);
  assert.ok(await signedWith(url, 1, legacy), 'the plaintext secret still signs');

  const cron = await runCron();
  assert.equal(cron.status, 200);
  const [row] = await d1(`SELECT secret FROM webhooks WHERE id = '${hook.body.id}'`);
  assert.match(row.secret, /^v2\./, 'the cron sealed the secret');
  assert.ok(!row.secret.includes(legacy.slice('whsec_'.length)));
  assert.equal((await contact('After')).status, 201);
  assert.ok(await signedWith(url, 2, legacy), 'the sealed secret signs with the same key');
});

test('the minute cron calls every object an earlier version wrote once, so idle ones purge by this version\'s rules', { timeout: 120_000 }, async () => {
  // SPEC §23: objects an earlier version wrote set their alarms decades ahead; one nobody calls
  // any more would keep its rows (an idle guard's old sealed responses). The cron calls, once,
  // each object the directory names that was made before this version's migration: here, as if
  // the upgrade happened now, every identity's authority (the cheapest list to walk in a suite
  // that made thousands of keys and projects).
  const { owner } = await createProject('woken');
  for (const external_id of ['a', 'b', 'c']) {
    const made = await call('POST', '/public/v1/identities', { key: owner.key, body: { external_id } });
    assert.equal(made.status, 201, made.text);
  }
  const [{ n: identities }] = await d1('SELECT count(*) AS n FROM identities');
  const now = Date.now() + 1;
  await d1(`UPDATE object_wake SET state = json_object('list', 'identities', 'after', NULL, 'before', ${now}) WHERE id = 1`);
  const state = async () => JSON.parse((await d1('SELECT state FROM object_wake WHERE id = 1'))[0].state);
  const seen = (await workerLog()).length;
  for (let run = 0; run < 10 && (await state()).list !== null; run += 1) {
    const cron = await runCron();
    assert.equal(cron.status, 200);
  }
  assert.equal((await state()).list, null, 'the wake went through');
  const lines = (await workerLog()).slice(seen).filter((l) => l.component === 'object_wake');
  const woken = lines.reduce((n, l) => n + (l.woken ?? 0), 0);
  assert.ok(woken >= identities, `${woken} authorities called, ${identities} identities made before`);
});

/** A `KEY=value` line of the .dev.vars the test gateway runs with. */
async function devVar(name) {
  const text = await readFile(new URL('../../.dev.vars', import.meta.url), 'utf8');
  return text.match(new RegExp(`^${name}=(.*)$`, 'm'))?.[1].replace(/"/g, '');
}

const INFOS = [
  'gatehouse/idempotent-response/v1', 'gatehouse/idempotent-response/v2',
  'gatehouse/webhook-signing-secret/v1', 'gatehouse/webhook-signing-secret/v2', '',
];

/** Opens a `v1.`/`v2.<key id>.` value with a 32-byte key, or answers null. */
function open(sealed, key, aad) {
  const bytes = Buffer.from(sealed.split('.').pop(), 'base64url');
  if (bytes.length < 28) return null;
  try {
    const decipher = createDecipheriv('aes-256-gcm', key, bytes.subarray(0, 12));
    decipher.setAAD(Buffer.from(aad));
    decipher.setAuthTag(bytes.subarray(bytes.length - 16));
    return Buffer.concat([decipher.update(bytes.subarray(12, bytes.length - 16)), decipher.final()]).toString();
  } catch {
    return null;
  }
}

const hkdf = (salt, ikm, info) => Buffer.from(hkdfSync('sha256', ikm, salt, info, 32));

/** Every key an attacker could try from one stored value: the value as text, hex and base64(url),
 * each as a key, as an HKDF pseudo-random key, as HKDF input and as HKDF salt, under every `info`
 * the code uses. HKDF-Expand(PRK, info) is one HMAC block: HMAC(PRK, info ‖ 0x01). */
function candidateKeys(token) {
  const forms = [Buffer.from(token)];
  if (/^[0-9a-f]+$/i.test(token) && token.length % 2 === 0) forms.push(Buffer.from(token, 'hex'));
  if (/^[A-Za-z0-9_\-+/]+=*$/.test(token)) forms.push(Buffer.from(token, 'base64url'), Buffer.from(token, 'base64'));
  const keys = [];
  for (const form of forms) {
    if (form.length === 0) continue;
    if (form.length === 32) keys.push(form);
    for (const info of INFOS) {
      keys.push(createHmac('sha256', form).update(Buffer.concat([Buffer.from(info), Buffer.from([1])])).digest());
      keys.push(hkdf(Buffer.alloc(0), form, info));
      keys.push(hkdf(form, Buffer.alloc(0), info));
    }
  }
  return keys;
}

// SPEC §19 "Secrets": what a storage reader holds is every value in the state folder (KV blobs,
// D1, every object's SQLite, the log). On the main of before sealing v2 this test fails: the key
// hash in D1 (hex) is the PRK of the v1 response key, so the v1 responses open.
test('no value in the state folder derives a key that opens a kept response or a webhook secret', async () => {
  const { owner } = await createProject('at rest, attacker');
  const idem = idemKey();
  const created = await call('POST', '/public/v1/keys', { key: owner.key, idem, body: { type: 'server', name: 'attacked' } });
  assert.equal(created.status, 201, created.text);
  const hook = await call('POST', '/public/v1/webhooks', { key: owner.key, body: { url: `${hooks.url}/attacked`, events: ['contact.created'] } });
  assert.equal(hook.status, 201, hook.text);
  const responseAad = `papi:idem:${owner.id}:${idem}`;
  const secretAad = `webhook:${hook.body.id}:secret`;
  assert.ok(await eventually(async () => (await stateFilesContaining(responseAad)).length > 0, 20_000), 'KV holds the response');

  // Every token of every file: runs of the characters stored values are made of, and their parts.
  // SQLite stores a row's text columns side by side, so a run may join two values: each run's
  // parts, its hex runs (and their first and last 64 digits: a SHA-256 in hex) join it.
  const tokens = new Set();
  for (const path of await filesUnder(STATE)) {
    const text = (await readFile(path).catch(() => Buffer.alloc(0))).toString('latin1');
    for (const run of text.match(/[A-Za-z0-9_\-.:+/=]{8,}/g) ?? []) {
      tokens.add(run);
      for (const part of run.split(/[.:]/)) if (part.length >= 8) tokens.add(part);
      for (const hex of run.match(/[0-9a-f]{32,}/g) ?? []) tokens.add(hex).add(hex.slice(0, 64)).add(hex.slice(-64));
    }
  }
  // The sealed values: each `v1.`/`v2.<id>.` run, cut where a neighbouring column begins.
  const sealedRuns = [...tokens].filter((t) => /^v[12]\.([0-9a-f]{8}\.)?[A-Za-z0-9_-]{40,}$/.test(t));
  assert.ok(sealedRuns.length > 0, 'the state folder holds sealed values');
  const opening = (key, aad) => {
    for (const run of sealedRuns) {
      for (let end = run.length; end > 40; end -= 1) if (open(run.slice(0, end), key, aad) !== null) return run.slice(0, end);
    }
    return undefined;
  };

  // The control: with the secrets an attacker does not hold (the API key and the pepper; the
  // webhook secrets' key) the same values open, so the targets and associated data are right.
  const pepper = await devVar('KEY_PEPPER');
  const responseKey = hkdf(createHmac('sha256', pepper).update('gatehouse/idempotent-response/v2/root').digest(), owner.key, INFOS[1]);
  const secretKey = hkdf(Buffer.alloc(0), await devVar('WEBHOOK_SECRETS_KEY'), INFOS[3]);
  const response = opening(responseKey, responseAad);
  const secret = opening(secretKey, secretAad);
  assert.ok(response?.startsWith('v2.') && open(response, responseKey, responseAad).includes(created.body.key), 'the kept response opens with the caller\'s key');
  assert.ok(secret?.startsWith('v2.') && open(secret, secretKey, secretAad) === hook.body.secret, 'the sealed secret opens with WEBHOOK_SECRETS_KEY');

  // The attack: every candidate from every stored value, against both.
  let tried = 0;
  const opened = [];
  for (const token of tokens) {
    for (const key of candidateKeys(token)) {
      tried += 1;
      if (open(response, key, responseAad) !== null || open(secret, key, secretAad) !== null) opened.push(token);
    }
  }
  assert.ok(tried > 10_000, `${tried} candidate keys tried`);
  assert.deepEqual(opened, [], 'stored values that open a sealed value');
});
