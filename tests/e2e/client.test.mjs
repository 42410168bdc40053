// SPEC §14 end to end: the Rust SDK's live tests (crates/gatehouse-client/tests/live.rs) and the `gatehouse` CLI,
// run as a user runs them, against the gateway under wrangler dev. Webhooks go to a receiver on
// 127.0.0.1 (scripts/test sets ALLOW_PRIVATE_WEBHOOK_URLS=true).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ADMIN_TOKEN, BASE, buildCli, call, createKey, createProject, eventually, freePort, listAll, receiver, sleep } from './harness.mjs';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const work = mkdtempSync(join(tmpdir(), 'gatehouse-cli-'));
let gatehouse;

before(() => {
  gatehouse = buildCli();
});

const jsonLines = (text) => text.split('\n').filter(Boolean).map((line) => JSON.parse(line));

async function businessProject() {
  const project = await createProject('cli e2e', { plan: 'business' });
  const server = await createKey(project.owner.key, 'server');
  return { ...project, server };
}

test('the SDK against the gateway: resources, replays, events and the buffer, logs and tail, a verified webhook', () => {
  const run = spawnSync('cargo', ['test', '--quiet', '-p', 'gatehouse-client', '--test', 'live', '--', '--ignored', '--test-threads=2'], {
    cwd: ROOT, encoding: 'utf8', env: { ...process.env, GATEHOUSE_URL: BASE, GATEHOUSE_ADMIN_TOKEN: ADMIN_TOKEN },
  });
  const output = `${run.stdout}\n${run.stderr}`;
  assert.equal(run.status, 0, output);
  assert.match(run.stdout, /test result: ok\. 4 passed; 0 failed; 0 ignored/, output);
});

test('me, keys create / list / revoke, and the exit codes', async () => {
  const { owner, projectId, server } = await businessProject();
  const me = gatehouse(['me'], { key: owner.key });
  assert.equal(me.status, 0, me.stderr);
  assert.deepEqual([JSON.parse(me.stdout).type, JSON.parse(me.stdout).project_id], ['owner', projectId]);

  const created = gatehouse(['keys', 'create', '--type', 'browser', '--name', 'from the cli'], { key: owner.key });
  assert.equal(created.status, 0, created.stderr);
  const key = JSON.parse(created.stdout);
  assert.match(key.key, /^gh_b_/);
  assert.equal(key.name, 'from the cli');
  const listed = gatehouse(['keys', 'list'], { key: owner.key });
  assert.equal(listed.status, 0, listed.stderr);
  assert.deepEqual(jsonLines(listed.stdout).map((k) => k.id).sort(), [owner.id, server.id, key.id].sort());
  assert.ok(jsonLines(listed.stdout).every((k) => k.key === undefined), 'lists never show a secret');
  const revoked = gatehouse(['keys', 'revoke', key.id], { key: owner.key });
  assert.equal(revoked.status, 0, revoked.stderr);
  assert.equal(JSON.parse(revoked.stdout).status, 'revoked');

  // API error: exit 1, the error JSON on stderr (not retried: 401 is never retried).
  const refused = gatehouse(['--verbose', 'me'], { key: key.key });
  assert.equal(refused.status, 1);
  const error = JSON.parse(refused.stderr.trim().split('\n').pop()).error;
  assert.deepEqual([error.status, error.code, error.retryable], [401, 'INVALID_API_KEY', false]);
  assert.match(error.request_id, /^[0-9a-f-]{36}$/);
  assert.equal(refused.stderr.match(/→ GET \/public\/v1\/me/g).length, 1, refused.stderr);
  // Usage errors: exit 2.
  assert.equal(gatehouse(['keys', 'create'], { key: owner.key }).status, 2);
  assert.equal(gatehouse(['me']).status, 2, 'no key');
  assert.equal(gatehouse(['--max-attempts', '0', 'me'], { key: owner.key }).status, 2);
  assert.equal(gatehouse(['request', 'POST', '/public/v1/contacts', '--data', '{oops'], { key: owner.key }).status, 2);
  assert.equal(gatehouse(['frobnicate']).status, 2);
  // A network error: exit 1, NETWORK_ERROR after the attempts allowed.
  const port = await freePort();
  const down = spawnSync(gatehouse.bin, ['--url', `http://127.0.0.1:${port}`, '--key', owner.key, '--max-attempts', '2', '--verbose', 'me'], { encoding: 'utf8' });
  assert.equal(down.status, 1, down.stderr);
  assert.match(down.stderr, /attempt 2\/2/);
  assert.match(down.stderr, /retrying in \d\.\d\d s \(exponential backoff\)/);
  assert.equal(JSON.parse(down.stderr.trim().split('\n').pop()).error.code, 'NETWORK_ERROR');
});

test('request: the body on stdout; a given key replays, an automatic key is a UUIDv4 on every attempt', async () => {
  const { server } = await businessProject();
  const body = join(work, 'ada.json');
  writeFileSync(body, JSON.stringify({ name: 'Ada', email: 'ada@example.com' }));
  const first = gatehouse(['--verbose', 'request', 'POST', '/public/v1/contacts', '--data', `@${body}`, '--idempotency-key', 'cli-signup-1'], { key: server.key });
  assert.equal(first.status, 0, first.stderr);
  assert.match(first.stderr, /→ POST \/public\/v1\/contacts \(attempt 1\/5, Idempotency-Key cli-signup-1\)/);
  assert.match(first.stderr, /← 201 POST \/public\/v1\/contacts in \d+ ms, request [0-9a-f-]{36}/);
  const again = gatehouse(['request', 'POST', '/public/v1/contacts', '--data', `@${body}`, '--idempotency-key', 'cli-signup-1'], { key: server.key });
  assert.equal(JSON.parse(again.stdout).id, JSON.parse(first.stdout).id, 'the replay answers the same contact');
  const auto = gatehouse(['--verbose', 'request', 'post', '/public/v1/contacts', '--data', '{"name":"Grace"}'], { key: server.key });
  assert.equal(auto.status, 0, auto.stderr);
  assert.match(auto.stderr, /Idempotency-Key [0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}\)/);
  const list = gatehouse(['request', 'GET', '/public/v1/contacts?limit=10'], { key: server.key });
  assert.deepEqual(JSON.parse(list.stdout).data.map((c) => c.name).sort(), ['Ada', 'Grace']);
  const missing = gatehouse(['--verbose', 'request', 'GET', '/public/v1/contacts/con_nope'], { key: server.key });
  assert.equal(missing.status, 1);
  assert.match(missing.stderr, /← 404 NOT_FOUND GET \/public\/v1\/contacts\/con_nope/);
  assert.equal(missing.stdout, '');
});

test('contacts import: 1,000 contacts with a progress bar, the same file again creates none, failures name their line', async () => {
  const { server } = await businessProject();
  const rows = ['name,email,phone'];
  for (let i = 1; i <= 1000; i++) rows.push(`Contact ${i},contact${i}@example.com,+1 555 01${String(i).padStart(4, '0')}`);
  const file = join(work, 'contacts.csv');
  writeFileSync(file, rows.join('\n') + '\n');

  const first = gatehouse(['contacts', 'import', file], { key: server.key });
  assert.equal(first.status, 0, first.stderr + first.stdout);
  assert.match(first.stderr, /importing 1000 contacts from .*contacts\.csv in 10 bulk call\(s\) of up to 100/);
  assert.equal(first.stdout.split('\n')[0], 'created 1000, failed 0');
  assert.equal((await listAll('/public/v1/contacts', server.key)).length, 1000);

  const second = gatehouse(['contacts', 'import', file], { key: server.key });
  assert.equal(second.status, 0, second.stderr + second.stdout);
  assert.equal(second.stdout.split('\n')[0], 'created 0, failed 0');
  assert.match(second.stdout, /10 of 10 chunk\(s\) were already imported by an earlier run of this file: 1000 contact\(s\) not created again/);
  assert.equal((await listAll('/public/v1/contacts', server.key)).length, 1000, 'the second run created none');

  const mixed = join(work, 'mixed.ndjson');
  writeFileSync(mixed, '{"name":"Fine"}\n{"phone":"12"}\n\n{"email":"not-an-email"}\n');
  const partial = gatehouse(['contacts', 'import', mixed], { key: server.key });
  assert.equal(partial.status, 1);
  assert.match(partial.stdout, /^created 1, failed 2\nline 2: VALIDATION_ERROR: .*phone.*\nline 4: VALIDATION_ERROR: .*email/m);
  const badColumn = join(work, 'bad.csv');
  writeFileSync(badColumn, 'name,age\nAda,36\n');
  const usage = gatehouse(['contacts', 'import', badColumn], { key: server.key });
  assert.equal(usage.status, 2);
  assert.match(usage.stderr, /CSV column "age" is not a contact field/);
});

/** A following command (`logs tail`, `events tail`) run with `key` until `stop()`: what it printed so far. */
function follow(args, key) {
  const child = spawn(gatehouse.bin, args, { env: { ...process.env, GATEHOUSE_URL: BASE, GATEHOUSE_KEY: key } });
  let out = '';
  let errors = '';
  child.stdout.on('data', (chunk) => { out += chunk; });
  child.stderr.on('data', (chunk) => { errors += chunk; });
  return { out: () => out, errors: () => errors, stop: () => child.kill('SIGINT') };
}

test('events tail follows new stored events, one JSON line each, oldest first, filtered by name (SPEC §24)', async () => {
  const { owner, server } = await businessProject();
  const tail = follow(['events', 'tail', '--event', 'Tail Me', '--interval', '1'], owner.key);
  try {
    await sleep(300);
    const ids = [];
    for (const event of ['Tail Me', 'Not Me', 'Tail Me']) {
      const event_id = crypto.randomUUID();
      const res = await call('POST', '/v1/track', { key: server.key, body: { batch: [{ event_id, event, user_id: 'u1' }] } });
      assert.equal(res.status, 202, res.text);
      if (event === 'Tail Me') ids.push(event_id);
      await sleep(20);
    }
    const seen = await eventually(async () => ids.every((id) => tail.out().includes(id)), 30_000);
    assert.ok(seen, `tail printed:\n${tail.out()}\nstderr:\n${tail.errors()}`);
    await sleep(1500);
    const printed = jsonLines(tail.out());
    assert.deepEqual(printed.map((e) => e.event_id), ids, 'the two named events, each once, oldest first');
    assert.ok(printed.every((e) => e.event === 'Tail Me' && e.user_id === 'u1'));
  } finally {
    tail.stop();
  }
});

test('logs list is one page of JSON lines; logs tail follows new rows until interrupted', async () => {
  const { owner, server } = await businessProject();
  const tail = follow(['logs', 'tail', '--path', '/public/v1/contacts*', '--method', 'POST', '--interval', '1'], owner.key);
  try {
    await sleep(300);
    const created = [];
    for (const name of ['Tail 1', 'Tail 2']) {
      const res = await call('POST', '/public/v1/contacts', { key: server.key, body: { name } });
      assert.equal(res.status, 201);
      created.push(res.headers.get('x-request-id'));
    }
    await call('GET', '/public/v1/contacts', { key: server.key });
    const seen = await eventually(async () => created.every((id) => tail.out().includes(id)), 30_000);
    assert.ok(seen, `tail printed:\n${tail.out()}\nstderr:\n${tail.errors()}`);
    const printed = tail.out().trim().split('\n');
    assert.equal(printed.length, 2, `only the two POSTs, each once:\n${tail.out()}`);
    assert.match(printed[0], new RegExp(`^\\S+Z  201 POST /public/v1/contacts  \\d+ ms  gh_s_\\S+  ${created[0]}`));
    assert.ok(printed[1].includes(created[1]), 'oldest first');
  } finally {
    tail.stop();
  }

  // The GET's row may still be on its way through the audit queue.
  const all = () => jsonLines(gatehouse(['logs', 'list', '--path', '/public/v1/contacts*'], { key: owner.key }).stdout);
  assert.ok(await eventually(async () => all().length === 3, 30_000), 'three rows: two POSTs and a GET');
  const page = gatehouse(['logs', 'list', '--path', '/public/v1/contacts*', '--limit', '2'], { key: owner.key });
  assert.equal(page.status, 0, page.stderr);
  const rows = jsonLines(page.stdout);
  assert.equal(rows.length, 2);
  assert.ok(rows[0].ts >= rows[1].ts, 'newest first');
  assert.match(page.stderr, /^next cursor: \S+/m);
  const cursor = page.stderr.match(/^next cursor: (\S+)/m)[1];
  const next = gatehouse(['logs', 'list', '--path', '/public/v1/contacts*', '--limit', '2', '--cursor', cursor], { key: owner.key });
  assert.equal(jsonLines(next.stdout).length, 1, 'the third row on the second page');
});

test('webhooks verify: a real delivery from the engine verifies; a changed body or another secret does not', async () => {
  const hooks = await receiver();
  try {
    const { owner, server } = await businessProject();
    const hook = await call('POST', '/public/v1/webhooks', {
      key: owner.key, body: { url: `${hooks.url}/hook`, events: ['contact.created'] },
    });
    assert.equal(hook.status, 201, hook.text);
    await call('POST', '/public/v1/contacts', { key: server.key, body: { name: 'Hooked' } });
    assert.ok(await eventually(async () => hooks.received.length > 0, 30_000), 'a delivery within 30 s');
    const { headers, raw: body } = hooks.received[0];
    const file = join(work, 'delivery.json');
    writeFileSync(file, body);
    const args = (secret) => ['webhooks', 'verify', '--secret', secret, '--id', headers['webhook-id'],
      '--timestamp', headers['webhook-timestamp'], '--signature', headers['webhook-signature']];

    const valid = gatehouse([...args(hook.body.secret), '--body-file', file]);
    assert.equal(valid.status, 0, valid.stderr);
    assert.equal(valid.stdout, 'valid\n');
    assert.equal(gatehouse(args(hook.body.secret), { input: body }).status, 0, 'the body from stdin');

    const changed = gatehouse(args(hook.body.secret), { input: Buffer.concat([body, Buffer.from(' ')]) });
    assert.equal(changed.status, 1);
    assert.equal(changed.stderr, 'invalid: no signature matches the body\n');
    const other = gatehouse(args('whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYX'), { input: body });
    assert.equal(other.status, 1);
    const old = gatehouse(['webhooks', 'verify', '--secret', hook.body.secret, '--id', headers['webhook-id'],
      '--timestamp', String(Number(headers['webhook-timestamp']) - 600), '--signature', headers['webhook-signature']], { input: body });
    assert.equal(old.status, 1);
    assert.match(old.stderr, /^invalid: webhook-timestamp is 6\d\ds old \(tolerance ±300s\)/);

    // SPEC §25: a v1a subscription made with the CLI; its delivery verifies with the public key.
    const made = gatehouse(['webhooks', 'create', `${hooks.url}/v1a`, '--events', 'contact.created', '--signature', 'v1a'], { key: owner.key });
    assert.equal(made.status, 0, made.stderr);
    const v1a = JSON.parse(made.stdout);
    assert.deepEqual([v1a.signature, v1a.secret], ['v1a', undefined]);
    await call('POST', '/public/v1/contacts', { key: server.key, body: { name: 'Signed with Ed25519' } });
    assert.ok(await eventually(async () => hooks.requestsTo('/v1a').length > 0, 30_000), 'a v1a delivery within 30 s');
    const signed = hooks.requestsTo('/v1a')[0];
    const v1aArgs = ['webhooks', 'verify', '--secret', v1a.public_key, '--id', signed.headers['webhook-id'],
      '--timestamp', signed.headers['webhook-timestamp'], '--signature', signed.headers['webhook-signature']];
    const verified = gatehouse(v1aArgs, { input: signed.raw });
    assert.equal(verified.status, 0, verified.stderr);
    const tampered = gatehouse(v1aArgs, { input: Buffer.concat([signed.raw, Buffer.from(' ')]) });
    assert.equal(tampered.stderr, 'invalid: no signature matches the body\n');
  } finally {
    await hooks.close();
  }
});

test('keys create / update with every field, contacts list / get, webhooks create / list / test / deliveries / resend / delete', async () => {
  const hooks = await receiver();
  try {
    const { owner, server } = await businessProject();
    const ok = (args, key = owner.key) => {
      const out = gatehouse(args, { key });
      assert.equal(out.status, 0, `${args.join(' ')}: ${out.stderr}`);
      return out.stdout;
    };
    const identity = (await call('POST', '/public/v1/identities', { key: owner.key, body: { external_id: 'cli-customer' } })).body;
    const key = JSON.parse(ok(['keys', 'create', '--type', 'server', '--name', 'worker', '--rate-limit-per-minute', '60',
      '--identity-id', identity.id, '--limits', '{"per_minute":50}']));
    assert.deepEqual([key.rate_limit_per_minute, key.identity_id, key.limits.per_minute], [60, identity.id, 50]);
    const updated = JSON.parse(ok(['keys', 'update', key.id, '--name', 'renamed', '--clear', 'rate_limit_per_minute', '--clear', 'identity_id']));
    assert.deepEqual([updated.name, updated.rate_limit_per_minute, updated.identity_id], ['renamed', null, null]);
    assert.equal(gatehouse(['keys', 'update', key.id], { key: owner.key }).status, 2, 'nothing to change');
    assert.equal(gatehouse(['keys', 'update', key.id, '--clear', 'plan'], { key: owner.key }).status, 2);
    assert.equal(gatehouse(['keys', 'update', key.id, '--name', 'x', '--clear', 'name'], { key: owner.key }).status, 2);
    assert.equal(gatehouse(['keys', 'create', '--type', 'server', '--limits', '{oops'], { key: owner.key }).status, 2);

    const made = [];
    for (const name of ['Ada', 'Grace']) made.push((await call('POST', '/public/v1/contacts', { key: server.key, body: { name } })).body);
    const listed = jsonLines(ok(['contacts', 'list'], server.key));
    assert.deepEqual(listed.map((c) => c.name).sort(), ['Ada', 'Grace']);
    assert.equal(JSON.parse(ok(['contacts', 'get', made[0].id], server.key)).name, 'Ada');

    const hook = JSON.parse(ok(['webhooks', 'create', `${hooks.url}/cli-hook`, '--events', 'contact.created,message.created']));
    assert.match(hook.secret, /^whsec_/);
    assert.deepEqual(hook.events, ['contact.created', 'message.created']);
    assert.ok(jsonLines(ok(['webhooks', 'list'])).some((h) => h.id === hook.id && h.secret === undefined));
    const triggered = JSON.parse(ok(['webhooks', 'test', 'contact.created']));
    assert.ok(triggered.event_id, JSON.stringify(triggered));
    assert.ok(await hooks.waitFor('/cli-hook', 1, 30_000), 'the test event arrived');
    assert.equal(JSON.parse(hooks.requestsTo('/cli-hook')[0].body).data.id, 'ct_sample');
    let delivered;
    await eventually(async () => {
      delivered = jsonLines(ok(['webhooks', 'deliveries', hook.id, '--status', 'delivered']));
      return delivered.length === 1;
    }, 30_000);
    assert.equal(delivered.length, 1, 'one delivered delivery');
    ok(['webhooks', 'resend', delivered[0].id]);
    assert.ok(await hooks.waitFor('/cli-hook', 2, 30_000), 'resent once more');
    assert.equal(hooks.requestsTo('/cli-hook')[1].headers['webhook-id'], hooks.requestsTo('/cli-hook')[0].headers['webhook-id'], 'the same event id');
    ok(['webhooks', 'delete', hook.id]);
    assert.ok(!jsonLines(ok(['webhooks', 'list'])).some((h) => h.id === hook.id));
  } finally {
    await hooks.close();
  }
});

test('track: one event, accepted once under its event_id', async () => {
  const { server } = await businessProject();
  const sent = gatehouse(['track', 'Signed Up', '--user-id', 'user-cli', '--properties', '{"plan":"trial"}'], { key: server.key });
  assert.equal(sent.status, 0, sent.stderr);
  const outcome = JSON.parse(sent.stdout);
  assert.equal(outcome.accepted.length, 1);
  assert.match(outcome.accepted[0], /^[0-9a-f]{8}-[0-9a-f]{4}-4/);
  assert.equal(gatehouse(['track', 'Signed Up'], { key: server.key }).status, 2, 'a user or anonymous id is needed');
  assert.equal(gatehouse(['track', 'x', '--user-id', 'u', '--anonymous-id', 'a'], { key: server.key }).status, 2);
  assert.equal(gatehouse(['track', 'x', '--user-id', 'u', '--properties', '[1]'], { key: server.key }).status, 2);
});

after(() => {
  spawnSync('rm', ['-rf', work]);
});
