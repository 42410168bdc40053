// SPEC §12.1 end to end: a queue message whose consumer keeps failing is retried alone (its
// neighbours are stored), moves to the dead-letter queue after max_retries, is kept in D1 and
// listed by GET /admin/v1/dead-letters; POST /admin/v1/dead-letters/redrive sends it back and it
// is stored exactly once. The failure is real: a SQLite trigger (made through `wrangler d1
// execute`) makes D1 refuse that one row, as a broken table would.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { ADMIN_TOKEN, assertError, auditDbOf, call, createKey, createProject, d1, eventually, receiver, sleep } from './harness.mjs';

const admin = { authorization: `Bearer ${ADMIN_TOKEN}` };
const deadLetters = (query = '') => call('GET', `/admin/v1/dead-letters${query}`, { headers: admin });
const redrive = (body) => call('POST', '/admin/v1/dead-letters/redrive', { headers: admin, body });

/** The dead letter whose body contains `needle`, once it is listed (retries take ~30 s). */
async function letterWith(queue, needle) {
  return eventually(async () => {
    const res = await deadLetters(`?queue=${queue}&limit=200`);
    assert.equal(res.status, 200, res.text);
    return res.body.data.find((l) => l.body.includes(needle));
  }, 120_000);
}

const count = async (sql, database) => (await d1(sql, database))[0].n;

test('the dead-letter routes take the admin token only, and page like every list', async () => {
  assertError(await call('GET', '/admin/v1/dead-letters'), 401, 'INVALID_API_KEY');
  assertError(await call('POST', '/admin/v1/dead-letters/redrive', { body: {} }), 401, 'INVALID_API_KEY');
  const { owner } = await createProject();
  assertError(await call('GET', '/admin/v1/dead-letters', { key: owner.key }), 401, 'INVALID_API_KEY');
  const page = await deadLetters('?limit=1');
  assert.equal(page.status, 200, page.text);
  assert.ok(Array.isArray(page.body.data) && 'next_cursor' in page.body);
  assertError(await deadLetters('?limit=0'), 400, 'VALIDATION_ERROR');
  assertError(await deadLetters('?cursor=nonsense!'), 400, 'VALIDATION_ERROR');
  assertError(await redrive({ ids: [] }), 400, 'VALIDATION_ERROR');
  assertError(await redrive({ ids: 'x' }), 400, 'VALIDATION_ERROR');
  const none = await redrive({ ids: ['no-such-letter'] });
  assert.deepEqual([none.status, none.body], [200, { redriven: 0, failed: 0, skipped: 1 }]);
});

test('an event D1 refuses ends in the dead letters, its neighbours are stored, and a re-drive stores it once', async () => {
  const project = await createProject('dead letters', { plan: 'business' });
  const server = await createKey(project.owner.key, 'server');
  const tag = randomUUID().slice(0, 8);
  const poisonId = randomUUID();
  const goodIds = [randomUUID(), randomUUID(), randomUUID()];
  await d1(`CREATE TRIGGER refuse_${tag} BEFORE INSERT ON events WHEN NEW.event = 'Poisoned ${tag}'
    BEGIN SELECT RAISE(ABORT, 'refused by the dead-letter test'); END`);
  let letter;
  try {
    // Sent together, so the two messages can share a consumer batch.
    const [bad, good] = await Promise.all([
      call('POST', '/v1/track', { key: server.key, body: { batch: [{ event_id: poisonId, event: `Poisoned ${tag}`, user_id: 'u' }] } }),
      call('POST', '/v1/track', { key: server.key, body: { batch: goodIds.map((event_id) => ({ event_id, event: 'Fine', user_id: 'u' })) } }),
    ]);
    assert.deepEqual([bad.status, good.status], [202, 202], bad.text + good.text);
    const neighbours = `SELECT count(*) AS n FROM events WHERE project_id = '${project.projectId}' AND event = 'Fine'`;
    assert.equal(await eventually(async () => (await count(neighbours)) === 3, 60_000), true, 'the neighbours are stored');

    letter = await letterWith('gatehouse-events', poisonId);
    assert.ok(letter, 'the refused event is listed as a dead letter');
    assert.equal(letter.queue, 'gatehouse-events');
    assert.equal(letter.status, 'dead');
    assert.equal(letter.redriven_at, null);
    assert.match(letter.last_error ?? '', /refused by the dead-letter test/);
    assert.ok(letter.attempts >= 10, `failures counted: ${letter.attempts}`);
    assert.ok(Date.parse(letter.first_failed_at) <= Date.parse(letter.dead_at));
    assert.equal(await count(`SELECT count(*) AS n FROM events WHERE event_id = '${poisonId}'`), 0);
  } finally {
    await d1(`DROP TRIGGER IF EXISTS refuse_${tag}`);
  }

  const res = await redrive({ ids: [letter.id] });
  assert.deepEqual([res.status, res.body], [200, { redriven: 1, failed: 0, skipped: 0 }], res.text);
  const stored = `SELECT count(*) AS n FROM events WHERE event_id = '${poisonId}'`;
  assert.equal(await eventually(async () => (await count(stored)) === 1, 60_000), true, 'the re-driven event is stored');
  const listed = (await letterWith('gatehouse-events', poisonId));
  assert.equal(listed.status, 'redriven');
  assert.ok(Date.parse(listed.redriven_at) >= Date.parse(listed.dead_at));
  const again = await redrive({ ids: [letter.id] });
  assert.deepEqual(again.body, { redriven: 0, failed: 0, skipped: 1 }, 'a letter is re-driven once');
  await sleep(2000); // a second copy would have landed by now
  assert.equal(await count(stored), 1);
});

test('an audit row D1 refuses becomes a dead letter; re-driving all stores it once beside its neighbours', async () => {
  const { owner, projectId } = await createProject('dead audit rows', { plan: 'business' }); // it polls the log
  const db = await auditDbOf(projectId);
  const tag = `poison-${randomUUID().slice(0, 8)}`;
  await d1(`CREATE TRIGGER refuse_audit_${tag.slice(7)} BEFORE INSERT ON audit_log WHEN NEW.path LIKE '%${tag}%'
    BEGIN SELECT RAISE(ABORT, 'refused by the dead-letter test'); END`, db);
  let letter;
  let badId;
  const neighbourIds = [];
  // Read through the gateway, not with `wrangler d1 execute`: a second process polling the
  // SQLite file can make the consumer's own writes fail (SQLITE_BUSY) and so delay them.
  const logged = async (id) => (await call('GET', `/public/v1/logs/${id}`, { key: owner.key })).status;
  try {
    const results = await Promise.all([
      call('GET', `/public/v1/me?note=${tag}`, { key: owner.key }),
      ...[1, 2, 3].map((i) => call('GET', `/public/v1/me?note=fine-${tag.slice(7)}-${i}`, { key: owner.key })),
    ]);
    badId = results[0].headers.get('x-request-id');
    neighbourIds.push(...results.slice(1).map((r) => r.headers.get('x-request-id')));
    const stored = async () => (await Promise.all(neighbourIds.map(logged))).every((s) => s === 200);
    assert.equal(await eventually(stored, 60_000), true,
      `the neighbours are stored: ${JSON.stringify(await Promise.all(neighbourIds.map(logged)))}`);

    letter = await letterWith('gatehouse-audit', badId);
    assert.ok(letter, 'the refused row is listed as a dead letter');
    assert.match(letter.last_error ?? '', /refused by the dead-letter test/);
    assert.equal(await logged(badId), 404);
  } finally {
    await d1(`DROP TRIGGER IF EXISTS refuse_audit_${tag.slice(7)}`, db);
  }

  const res = await redrive({});
  assert.equal(res.status, 200, res.text);
  assert.ok(res.body.redriven >= 1 && res.body.failed === 0, res.text);
  const stored = `SELECT count(*) AS n FROM audit_log WHERE request_id = '${badId}'`;
  assert.equal(await eventually(async () => (await logged(badId)) === 200, 60_000), true, 'the re-driven row is stored');
  assert.equal((await letterWith('gatehouse-audit', badId)).status, 'redriven');
  await sleep(2000);
  assert.equal(await count(stored, db), 1);
});

test('a webhook delivery D1 refuses to take ends in the dead letters; re-driven, it is delivered once', async () => {
  const hooks = await receiver();
  try {
    const { owner } = await createProject('dead letters', { plan: 'business' });
    const server = await createKey(owner.key, 'server');
    const url = `${hooks.url}/hook`;
    const hook = await call('POST', '/public/v1/webhooks', { key: owner.key, body: { url, events: ['contact.created'] } });
    assert.equal(hook.status, 201, hook.text);
    const tag = randomUUID().slice(0, 8);
    await d1(`CREATE TRIGGER refuse_take_${tag} BEFORE UPDATE ON webhook_deliveries WHEN OLD.webhook_id = '${hook.body.id}'
      BEGIN SELECT RAISE(ABORT, 'refused by the dead-letter test'); END`);
    let letter;
    let deliveryId;
    try {
      const contact = await call('POST', '/public/v1/contacts', { key: server.key, body: { name: 'Poisoned' } });
      assert.equal(contact.status, 201, contact.text);
      deliveryId = (await eventually(async () => (await d1(
        `SELECT id FROM webhook_deliveries WHERE webhook_id = '${hook.body.id}'`))[0]))?.id;
      assert.ok(deliveryId, 'the delivery was written with the contact');
      letter = await letterWith('gatehouse-webhooks', deliveryId);
      assert.ok(letter, 'the delivery message is listed as a dead letter');
      assert.match(letter.last_error ?? '', /refused by the dead-letter test/);
      assert.equal(hooks.received.length, 0, 'nothing reached the receiver while D1 refused');
    } finally {
      await d1(`DROP TRIGGER IF EXISTS refuse_take_${tag}`);
    }
    const res = await redrive({ ids: [letter.id] });
    assert.deepEqual([res.status, res.body], [200, { redriven: 1, failed: 0, skipped: 0 }], res.text);
    const delivered = await eventually(async () => {
      const list = await call('GET', `/public/v1/webhooks/${hook.body.id}/deliveries?status=delivered`, { key: owner.key });
      return list.body.data?.find((d) => d.id === deliveryId);
    }, 30_000);
    assert.ok(delivered, 'the re-driven delivery is delivered');
    await sleep(2000);
    assert.equal(hooks.received.length, 1, 'the receiver got the event once');
  } finally {
    await hooks.close();
  }
});
