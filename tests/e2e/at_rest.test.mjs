// SPEC §13 "No plaintext secret at rest", end to end: an API key and a webhook secret created with
// an Idempotency-Key replay in full to their caller, deliveries are still signed with the secret,
// and neither the key nor the secret is anywhere in the local state folder (KV blobs, the Durable
// Objects' SQLite, the D1 files with their -wal, the worker's log), searched as raw bytes.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createHmac } from 'node:crypto';
import { readdir, readFile } from 'node:fs/promises';
import { createServer } from 'node:http';
import { join, relative } from 'node:path';
import { call, createProject, eventually, idemKey } from './harness.mjs';

const STATE = process.env.GATEHOUSE_STATE;

/** The receiver of the webhook: every request it got. */
const received = [];
let receiver;
let receiverUrl;

before(async () => {
  receiver = createServer((req, res) => {
    let body = '';
    req.on('data', (c) => { body += c; });
    req.on('end', () => {
      received.push({ headers: req.headers, body });
      res.writeHead(200).end('ok');
    });
  });
  await new Promise((resolve) => receiver.listen(0, '127.0.0.1', resolve));
  receiverUrl = `http://127.0.0.1:${receiver.address().port}/at-rest-${Date.now()}`;
});

after(() => receiver.close());

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
  assert.ok(await eventually(async () => received.length > 0, 20_000), 'the receiver got the event');
  const [{ headers, body }] = received;
  const signingKey = Buffer.from(secret.slice('whsec_'.length), 'base64');
  const signed = `${headers['webhook-id']}.${headers['webhook-timestamp']}.${body}`;
  assert.equal(headers['webhook-signature'], `v1,${createHmac('sha256', signingKey).update(signed).digest('base64')}`);

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
