// SPEC §26 in a real browser (headless Chromium, as tests/e2e/dashboard.test.mjs): the views the
// dashboard lacked — usage by key, identity and day (the numbers of GET /public/v1/usage),
// identities (list with their keys, create, edit limits), a log row's detail with its key's name
// and its time in UTC and the browser's zone, the webhook form offering an origin's event types,
// a name per endpoint — and a layout that holds at 400 px (no tab scrolls sideways).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { chromium } from 'playwright-core';
import { BASE, call, createKey, createProject, eventually, listAll, nudging } from './harness.mjs';

const SHOTS = `${process.env.GATEHOUSE_STATE ?? '/tmp'}/screenshots`;
let browser;
/** Page loads wrangler dev's proxy might park are released (harness.mjs, `unparked`). */
let nudge;

before(async () => {
  nudge = nudging();
  mkdirSync(SHOTS, { recursive: true });
  browser = await chromium.launch({
    executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking'],
  });
});
after(async () => {
  nudge.stop();
  await browser?.close();
});

/** A signed-in page of `width` px (the page's errors fail the test). */
async function signedIn(ownerKey, width) {
  const page = await browser.newPage({ viewport: { width, height: 900 }, timezoneId: 'Asia/Tokyo' });
  const errors = [];
  page.on('pageerror', (e) => errors.push(e.message));
  await page.goto(`${BASE}/dashboard`);
  await page.fill('#owner-key', ownerKey);
  await page.click('#login button[type=submit]');
  await page.waitForSelector('#keys tr');
  page.errors = errors;
  return page;
}

/** A project with a named server key in an identity, a few billable requests, and an origin's subscription. */
async function project() {
  const { owner } = await createProject('Dashboard views', { plan: 'business' });
  const identity = await call('POST', '/public/v1/identities', { key: owner.key, body: { external_id: 'cust_42', limits: { per_minute: 50 } } });
  assert.equal(identity.status, 201, identity.text);
  const server = await createKey(owner.key, 'server', { name: 'backend', identity_id: identity.body.id });
  for (const name of ['Ada', 'Grace', 'Edsger']) {
    assert.equal((await call('POST', '/public/v1/contacts', { key: server.key, body: { name } })).status, 201);
  }
  const hook = await call('POST', '/public/v1/webhooks', { key: owner.key, body: { url: 'http://127.0.0.1:9/hook', events: ['order.created'] } });
  assert.equal(hook.status, 201, hook.text);
  const usage = await eventually(async () => {
    const u = await call('GET', '/public/v1/usage?group_by=key', { key: owner.key });
    return u.body.data?.some((g) => g.key_id === server.id && g.requests >= 3) && u.body;
  }, 20_000);
  assert.ok(usage, 'the requests are counted');
  return { owner, server, identity: identity.body, usage };
}

test('usage, identities, a log row in UTC and local time with its key\'s name, and an origin\'s event types', { timeout: 120_000 }, async () => {
  const { owner, server, identity, usage } = await project();
  const page = await signedIn(owner.key, 1280);

  await page.click('#tab-usage');
  await page.waitForSelector(`#usage tr:has-text("${server.id}")`);
  const byKey = await page.$eval(`#usage tr:has-text("${server.id}")`, (tr) => [...tr.children].map((td) => td.textContent));
  const apiCount = usage.data.find((g) => g.key_id === server.id).requests;
  assert.equal(byKey[0], `${server.prefix}… backend`, 'the key by its prefix and name');
  assert.ok(Number(byKey[2]) >= apiCount, `${byKey[2]} requests, the API said ${apiCount}`);
  await page.selectOption('#usage-range select[name=group_by]', 'identity');
  await page.waitForSelector('#usage tr:has-text("cust_42")');
  await page.selectOption('#usage-range select[name=group_by]', 'day');
  await page.waitForFunction(() => document.querySelector('#usage-group').textContent === 'Day (UTC)');
  await page.waitForSelector(`#usage tr:has-text("${new Date().toISOString().slice(0, 10)}")`);
  await page.screenshot({ path: `${SHOTS}/usage.png`, fullPage: true });

  await page.click('#tab-identities');
  await page.waitForSelector('#identities tr[data-external-id="cust_42"]');
  assert.match(await page.textContent('#identities tr[data-external-id="cust_42"]'), new RegExp(`${server.prefix}… backend.*`));
  assert.match(await page.textContent('#identities tr[data-external-id="cust_42"]'), /50 \/ minute/);
  await page.fill('#new-identity input[name=external_id]', 'cust_43');
  await page.fill('#new-identity input[name=per_minute]', '10');
  await page.click('#new-identity button[type=submit]');
  await page.waitForSelector('#identities tr[data-external-id="cust_43"]');
  await page.click('#identities tr[data-external-id="cust_43"] button:text("Edit limits")');
  await page.fill('#edit-identity input[name=per_minute]', '20');
  await page.fill('#edit-identity input[name=per_day]', '1000');
  await page.click('#edit-identity button[type=submit]');
  await page.waitForFunction(() => /20 \/ minute, 1000 \/ day/.test(document.querySelector('#identities tr[data-external-id="cust_43"]').textContent));
  const made = (await listAll('/public/v1/identities', owner.key)).find((i) => i.external_id === 'cust_43');
  assert.deepEqual([made.limits.per_minute, made.limits.per_day], [20, 1000], 'the edit reached the API');
  assert.notEqual(made.id, identity.id);
  await page.screenshot({ path: `${SHOTS}/identities.png`, fullPage: true });

  await page.click('#tab-log');
  const contactRow = `#log tr[data-status="201"]:has-text("${server.prefix}")`;
  await page.waitForSelector(contactRow);
  await page.click(contactRow);
  await page.waitForSelector('#log-detail[open]');
  const detail = await page.textContent('#detail-fields');
  assert.match(detail, new RegExp(`${server.id} \\(${server.prefix}… backend\\)`), 'the key by its name');
  assert.match(detail, /\d{4}-\d\d-\d\dT[\d:.]+Z \(UTC\) · .+ \(Asia\/Tokyo\)/, 'UTC beside the browser\'s zone');
  await page.click('#detail-close');

  await page.click('#tab-webhooks');
  await page.waitForSelector('#new-webhook input[value="order.created"]');
  assert.match(await page.textContent('#event-types'), /order\.created \(origin\)/);
  assert.ok(await page.$('#test-event-type option[value="order.created"]'), 'a test event of the origin\'s type');
  await page.fill('#new-webhook input[name=name]', 'Order events');
  await page.fill('#new-webhook input[name=url]', 'http://127.0.0.1:9/other');
  await page.uncheck('#new-webhook input[value="*"]');
  await page.fill('#new-webhook input[name=other_events]', 'order.shipped, order.cancelled');
  await page.click('#new-webhook button[type=submit]');
  await page.waitForSelector('#shown-once:not([hidden])');
  const added = (await listAll('/public/v1/webhooks', owner.key)).find((w) => w.url === 'http://127.0.0.1:9/other');
  assert.deepEqual([added.name, added.events], ['Order events', ['order.shipped', 'order.cancelled']]);
  await page.click('#shown-dismiss');
  await page.waitForSelector(`#webhooks tr[data-id="${added.id}"]:has-text("Order events")`);
  // A name per endpoint through the API: renamed, cleared, refused when too long.
  const renamed = await call('PATCH', `/public/v1/webhooks/${added.id}`, { key: owner.key, body: { name: '  Shipping  ' } });
  assert.deepEqual([renamed.status, renamed.body.name, renamed.body.status], [200, 'Shipping', 'active'], renamed.text);
  const cleared = await call('PATCH', `/public/v1/webhooks/${added.id}`, { key: owner.key, body: { name: null } });
  assert.deepEqual([cleared.status, cleared.body.name], [200, null], cleared.text);
  const long = await call('PATCH', `/public/v1/webhooks/${added.id}`, { key: owner.key, body: { name: 'x'.repeat(201) } });
  assert.deepEqual([long.status, long.body.error?.details?.field], [400, 'name'], long.text);
  assert.deepEqual(page.errors, []);
  await page.close();
});

test('every tab holds at 400 px: nothing scrolls sideways', { timeout: 120_000 }, async () => {
  const { owner } = await project();
  const page = await signedIn(owner.key, 400);
  for (const tab of ['keys', 'log', 'events', 'webhooks', 'usage', 'identities', 'overview']) {
    await page.click(`#tab-${tab}`);
    await page.waitForSelector(`#panel-${tab}:not([hidden])`);
    await page.waitForLoadState('networkidle');
    const [scroll, client] = await page.evaluate(() => [document.documentElement.scrollWidth, document.documentElement.clientWidth]);
    assert.ok(scroll <= client, `${tab}: ${scroll} px wide in a ${client} px window`);
    if (tab === 'keys' || tab === 'usage') await page.screenshot({ path: `${SHOTS}/narrow-${tab}.png`, fullPage: true });
  }
  assert.deepEqual(page.errors, []);
  await page.close();
});
