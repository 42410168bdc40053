// SPEC §11 in a real browser: headless Chromium (Debian's package) driven by playwright-core
// against the dashboard served by the worker, with data this test makes through the API.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { chromium } from 'playwright-core';
import { BASE, call, createKey, createProject, eventually, listAll, receiver } from './harness.mjs';

const SHOTS = `${process.env.GATEHOUSE_STATE ?? '/tmp'}/screenshots`;
let browser;
let hooks;
let receiverHealthy = false;

before(async () => {
  mkdirSync(SHOTS, { recursive: true });
  console.log(`screenshots: ${SHOTS}`);
  hooks = await receiver(() => (receiverHealthy ? { status: 200, body: 'ok' } : { status: 500, body: 'down' }));
  browser = await chromium.launch({
    executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
      '--disable-component-update', '--disable-sync'],
  });
});

/**
 * The page, watched: every answer of the API that is not 2xx and every error the page logs are
 * kept, and a failed wait reports them with the banner the page shows (a timeout alone says
 * nothing of why the page did not change).
 */
async function watched(page) {
  const seen = [];
  page.on('response', async (r) => {
    if (r.status() >= 300 && !r.url().endsWith('/favicon.ico')) seen.push(`${r.status()} ${r.request().method()} ${r.url()}: ${(await r.text().catch(() => '')).slice(0, 300)}`);
  });
  page.on('pageerror', (e) => seen.push(`page error: ${e.message}`));
  const waitForSelector = page.waitForSelector.bind(page);
  page.waitForSelector = async (...args) => {
    try {
      return await waitForSelector(...args);
    } catch (e) {
      const banner = await page.textContent('#app-error').catch(() => null);
      e.message += `\nthe page shows: ${JSON.stringify(banner)}\nanswers and errors: ${JSON.stringify(seen, null, 1)}`;
      throw e;
    }
  };
  return page;
}

after(async () => {
  await browser?.close();
  await hooks?.close();
});

test('the dashboard: sign-in, keys with a chart, a filtered log, and a webhook retried from the page', async () => {
  const { owner } = await createProject('Dashboard demo', { plan: 'business' });
  const server = await createKey(owner.key, 'server', { name: 'backend' });
  const hook = await call('POST', '/public/v1/webhooks', {
    key: owner.key, body: { url: `${hooks.url}/hook`, events: ['contact.created'] },
  });
  const contact = await call('POST', '/public/v1/contacts', { key: server.key, body: { name: 'Ada' } });
  await call('GET', `/public/v1/contacts/${contact.body.id}`, { key: server.key });
  const missing = await call('GET', '/public/v1/contacts/con_missing', { key: server.key });
  await call('POST', '/public/v1/contacts', { key: server.key, body: {} });
  // A proxied route (proxy mode; scripts/test routes /e2e/down/ to a closed port: 502).
  assert.equal((await call('GET', '/e2e/down/dashboard', { key: server.key })).status, 502);
  const serverRequests = 5;
  await eventually(async () => (await listAll(`/public/v1/logs?key_id=${server.id}`, owner.key)).length >= serverRequests, 20_000);
  await eventually(async () => (await listAll(`/public/v1/webhooks/${hook.body.id}/deliveries?status=failed`, owner.key)).length === 1, 40_000);

  const page = await watched(await browser.newPage({ viewport: { width: 1280, height: 900 } }));
  await page.goto(`${BASE}/dashboard`);

  // A wrong key gets a clear error and no dashboard.
  await page.fill('#owner-key', 'gh_o_' + 'x'.repeat(40));
  await page.click('#login button[type=submit]');
  await page.waitForFunction(() => document.querySelector('#login-error').textContent.length > 0);
  assert.match(await page.textContent('#login-error'), /not valid/);
  assert.equal(await page.isVisible('#app'), false);
  const browserKey = await createKey(owner.key, 'browser'); // not an owner key: refused with a clear reason
  await page.fill('#owner-key', browserKey.key);
  await page.click('#login button[type=submit]');
  await page.waitForFunction(() => /owner key/.test(document.querySelector('#login-error').textContent));

  // Keys tab: the keys by prefix, and the chart of the server key.
  await page.fill('#owner-key', owner.key);
  await page.click('#login button[type=submit]');
  await page.waitForSelector(`#keys tr[data-prefix="${server.prefix}"]`);
  assert.equal(await page.isVisible('#login'), false, 'the sign-in form is gone');
  const prefixes = await page.$$eval('#keys tr', (rows) => rows.map((r) => r.dataset.prefix));
  assert.deepEqual(new Set(prefixes), new Set([owner.prefix, server.prefix, browserKey.prefix]));
  assert.equal(await page.evaluate(() => sessionStorage.getItem('gatehouse.ownerKey') !== null), true);
  assert.equal(await page.evaluate(() => localStorage.length + document.cookie.length), 0, 'no key in local storage or cookies');
  await page.click(`#keys tr[data-prefix="${server.prefix}"] button:text("Stats")`);
  await page.waitForSelector('#stats-chart[data-total]');
  assert.equal(await page.getAttribute('#stats-chart', 'data-total'), String(serverRequests));
  assert.equal(await page.textContent('#stats-total'), String(serverRequests));
  assert.match(await page.textContent('#stats-endpoints'), /\/public\/v1\/contacts\/\{id\}/);
  assert.match(await page.textContent('#stats-endpoints'), /\/e2e\/down\/\*/, 'top endpoints show the proxied route');
  await page.screenshot({ path: `${SHOTS}/keys.png`, fullPage: true });

  // Request log: only 4xx after filtering; a request_id finds its row, which opens its details.
  await page.click('#tab-log');
  await page.waitForSelector('#log tr');
  await page.selectOption('#log-filters select[name=status]', '4xx');
  await page.click('#log-filters button[type=submit]');
  await page.waitForFunction(() => [...document.querySelectorAll('#log tr')].every((r) => r.dataset.status.startsWith('4')));
  const statuses = await page.$$eval('#log tr', (rows) => rows.map((r) => Number(r.dataset.status)));
  assert.ok(statuses.length >= 2 && statuses.every((s) => s >= 400 && s < 500), statuses.join());
  await page.screenshot({ path: `${SHOTS}/log-4xx.png`, fullPage: true });
  const id = missing.headers.get('x-request-id');
  await page.selectOption('#log-filters select[name=status]', '');
  await page.fill('#log-filters input[name=request_id]', id);
  await page.click('#log-filters button[type=submit]');
  await page.waitForFunction((rid) => {
    const rows = [...document.querySelectorAll('#log tr')];
    return rows.length === 1 && rows[0].dataset.requestId === rid;
  }, id);
  await page.click('#log tr');
  await page.waitForSelector('#log-detail[open]');
  assert.match(await page.textContent('#detail-fields'), /NOT_FOUND/);
  await page.click('#detail-close');

  // Webhooks: the failed delivery with its attempts; the retry button delivers it.
  await page.click('#tab-webhooks');
  await page.click('#webhooks button:text("Deliveries")');
  await page.waitForSelector('#deliveries tr[data-status=failed]');
  assert.equal(await page.$$eval('#deliveries tr[data-status=failed] ol.attempts li', (li) => li.length), 6);
  await page.screenshot({ path: `${SHOTS}/webhooks-failed.png`, fullPage: true });
  receiverHealthy = true;
  await page.click('#deliveries tr[data-status=failed] button:text("Retry now")');
  await page.waitForSelector('#deliveries tr[data-status=delivered]', { timeout: 15_000 });
  await page.screenshot({ path: `${SHOTS}/webhooks-delivered.png`, fullPage: true });
  await page.close();
});

test('lifecycles from the dashboard: roll a key (the new one shown once), rotate a secret, re-enable after 410, recover', async () => {
  const { owner } = await createProject('Dashboard lifecycles', { plan: 'business' });
  const server = await createKey(owner.key, 'server', { name: 'worker' });
  let gone = true;
  const gate = await receiver(() => (gone ? 410 : 200));
  try {
    const hook = (await call('POST', '/public/v1/webhooks', {
      key: owner.key, body: { url: `${gate.url}/gone`, events: ['contact.created'] },
    })).body;
    await call('POST', '/public/v1/contacts', { key: owner.key, body: { name: 'Gone' } });
    await eventually(async () => (await listAll(`/public/v1/webhooks/${hook.id}/deliveries?status=failed`, owner.key)).length === 1, 20_000);

    const page = await watched(await browser.newPage({ viewport: { width: 1280, height: 900 } }));
    const answers = [];
    page.on('dialog', (dialog) => dialog.accept(answers.shift()));
    await page.goto(`${BASE}/dashboard`);
    await page.fill('#owner-key', owner.key);
    await page.click('#login button[type=submit]');
    await page.waitForSelector(`#keys tr[data-prefix="${server.prefix}"]`);

    // Roll with a minute of grace: the new key is shown once and works; the old one is expiring.
    answers.push('60');
    await page.click(`#keys tr[data-prefix="${server.prefix}"] button:text("Roll")`);
    await page.waitForSelector('#shown-once:not([hidden])');
    const newKey = (await page.textContent('#shown-secret')).trim();
    assert.match(newKey, /^gh_s_/);
    assert.equal((await call('GET', '/public/v1/me', { key: newKey })).status, 200);
    await page.waitForSelector(`#keys tr[data-prefix="${server.prefix}"][data-status=expiring]`);
    assert.equal(await page.$(`#keys tr[data-prefix="${server.prefix}"] button:text("Roll")`), null, 'a rolled key is not rolled twice');
    await page.screenshot({ path: `${SHOTS}/key-rolled.png`, fullPage: true });
    await page.click('#shown-dismiss');
    assert.equal(await page.isVisible('#shown-once'), false);

    // Webhooks: rotate (the new secret shown once), re-enable, recover.
    await page.click('#tab-webhooks');
    await page.waitForSelector(`#webhooks tr[data-id="${hook.id}"][data-status=disabled]`);
    answers.push('3600');
    await page.click(`#webhooks tr[data-id="${hook.id}"] button:text("Rotate secret")`);
    await page.waitForSelector('#shown-once:not([hidden])');
    assert.match(await page.textContent('#shown-secret'), /^whsec_/);
    gone = false;
    await page.click(`#webhooks tr[data-id="${hook.id}"] button:text("Re-enable")`);
    await page.waitForSelector(`#webhooks tr[data-id="${hook.id}"][data-status=active]`);
    answers.push(new Date(Date.now() - 3_600_000).toISOString());
    await page.click(`#webhooks tr[data-id="${hook.id}"] button:text("Recover")`);
    await page.waitForFunction(() => /1 failed delivery queued again/.test(document.querySelector('#webhook-note').textContent));
    await page.waitForSelector('#deliveries tr[data-status=delivered]', { timeout: 15_000 });
    await page.screenshot({ path: `${SHOTS}/webhook-recovered.png`, fullPage: true });
    await page.close();
  } finally {
    await gate.close();
  }
});

test('the API description is served at /openapi.json', async () => {
  const res = await fetch(`${BASE}/openapi.json`);
  assert.equal(res.status, 200);
  const doc = await res.json();
  assert.equal(doc.openapi, '3.1.0');
  assert.ok(doc.paths['/public/v1/contacts'].post);
  assert.equal(doc.components.securitySchemes.apiKey.scheme, 'bearer');
});
