// SPEC §11 in a real browser: headless Chromium (Debian's package) driven by playwright-core
// against the dashboard served by the worker, with data this test makes through the API.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, readdirSync, readFileSync } from 'node:fs';
import { chromium } from 'playwright-core';
import { spawn } from 'node:child_process';
import { ADMIN_TOKEN, assertError, BASE, buildCli, call, createKey, createProject, eventually, listAll, nudging, receiver, sleep } from './harness.mjs';

/** DASHBOARD_READS_PER_MINUTE as scripts/test sets it (the default). */
const DASHBOARD_READS_PER_MINUTE = 120;
const PUBLIC = new URL('../../public/', import.meta.url);
const SHOTS = `${process.env.GATEHOUSE_STATE ?? '/tmp'}/screenshots`;
let browser;
/** Page loads wrangler dev's proxy might park are released (harness.mjs, `unparked`). */
let nudge;
let hooks;
let receiverHealthy = false;

before(async () => {
  nudge = nudging();
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
  nudge.stop();
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
    page.on('dialog', (dialog) => assert.fail(`the page opened a ${dialog.type()} box: ${dialog.message()}`));
    /** Answers the page's own question form. */
    const answer = async (value) => {
      await page.waitForSelector('#ask:not([hidden])');
      await page.fill('#ask-input', value);
      await page.click('#ask button[type=submit]');
    };
    await page.goto(`${BASE}/dashboard`);
    await page.fill('#owner-key', owner.key);
    await page.click('#login button[type=submit]');
    await page.waitForSelector(`#keys tr[data-prefix="${server.prefix}"]`);

    // Roll with a minute of grace: the new key is shown once and works; the old one is expiring.
    await page.click(`#keys tr[data-prefix="${server.prefix}"] button:text("Roll")`);
    await answer('60');
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
    await page.click(`#webhooks tr[data-id="${hook.id}"] button:text("Rotate secret")`);
    await answer('3600');
    await page.waitForSelector('#shown-once:not([hidden])');
    assert.match(await page.textContent('#shown-secret'), /^whsec_/);
    gone = false;
    await page.click(`#webhooks tr[data-id="${hook.id}"] button:text("Re-enable")`);
    await page.waitForSelector(`#webhooks tr[data-id="${hook.id}"][data-status=active]`);
    await page.click(`#webhooks tr[data-id="${hook.id}"] button:text("Recover")`);
    // An hour ago, as the browser's local time the form takes.
    const hourAgo = await page.evaluate(() => {
      const d = new Date(Date.now() - 3_600_000);
      return new Date(d.getTime() - d.getTimezoneOffset() * 60_000).toISOString().slice(0, 16);
    });
    await answer(hourAgo);
    await page.waitForFunction(() => /1 failed delivery queued again/.test(document.querySelector('#webhook-note').textContent));
    await page.waitForSelector('#deliveries tr[data-status=delivered]', { timeout: 15_000 });
    await page.screenshot({ path: `${SHOTS}/webhook-recovered.png`, fullPage: true });
    await page.close();
  } finally {
    await gate.close();
  }
});

/** Every API call the page makes, by path, with its status. */
function calls(page) {
  const seen = [];
  page.on('response', (r) => {
    const url = new URL(r.url());
    seen.push({
      path: url.pathname, query: url.search, status: r.status(), method: r.request().method(),
      budget: r.request().headers()['gatehouse-budget'], limit: r.headers()['x-ratelimit-limit'],
    });
  });
  return seen;
}

async function signIn(page, key) {
  await page.goto(`${BASE}/dashboard`);
  await page.fill('#owner-key', key);
  await page.click('#login button[type=submit]');
  await page.waitForSelector('#app:not([hidden])');
}

test('keys created and edited from forms, last use in one call, the log by key and time and live, endpoints added, tested, resent and deleted', { timeout: 180_000 }, async () => {
  const { owner } = await createProject('Dashboard forms', { plan: 'business' });
  const server = await createKey(owner.key, 'server', { name: 'backend' });
  await call('GET', '/public/v1/me', { key: server.key });
  await eventually(async () => (await call('GET', '/public/v1/keys/last-used', { key: owner.key })).body.data?.some((u) => u.key_id === server.id), 20_000);

  const page = await watched(await browser.newPage({ viewport: { width: 1280, height: 1000 } }));
  const seen = calls(page);
  await signIn(page, owner.key);
  await page.waitForSelector(`#keys tr[data-prefix="${server.prefix}"]`);
  // "Last use" for every key in one call: no log query per key.
  assert.equal(seen.filter((c) => c.path === '/public/v1/keys/last-used').length, 1);
  assert.equal(seen.filter((c) => c.path === '/public/v1/logs').length, 0, JSON.stringify(seen));
  const today = new Date().toISOString().slice(0, 10);
  assert.equal(await page.textContent(`#keys tr[data-prefix="${server.prefix}"] td:nth-child(8)`), today);
  assert.deepEqual(seen.filter((c) => c.path.startsWith('/favicon')).map((c) => c.status), [200], 'the icon loads');

  // Create a key from the form: shown once, and it works.
  await page.selectOption('#new-key select[name=type]', 'server');
  await page.fill('#new-key input[name=name]', 'from the page');
  await page.fill('#new-key input[name=rate_limit_per_minute]', '20');
  await page.click('#new-key button[type=submit]');
  await page.waitForSelector('#shown-once:not([hidden])');
  const secret = await page.textContent('#shown-secret');
  assert.match(secret, /^gh_s_/);
  assert.equal((await call('GET', '/public/v1/me', { key: secret })).status, 200);
  const made = (await listAll('/public/v1/keys', owner.key)).find((k) => k.name === 'from the page');
  assert.equal(made.rate_limit_per_minute, 20);
  await page.click('#shown-dismiss');
  // Edit it: a new name and limit.
  await page.waitForSelector(`#keys tr[data-prefix="${made.prefix}"]`);
  await page.click(`#keys tr[data-prefix="${made.prefix}"] button:text("Edit")`);
  await page.fill('#edit-key input[name=name]', 'renamed');
  await page.fill('#edit-key input[name=rate_limit_per_minute]', '15');
  await page.click('#edit-key button[type=submit]');
  await page.waitForFunction((prefix) => document.querySelector(`#keys tr[data-prefix="${prefix}"] td:nth-child(5)`)?.textContent === '15', made.prefix);
  assert.equal(await page.textContent(`#keys tr[data-prefix="${made.prefix}"] td:nth-child(3)`), 'renamed');
  await page.screenshot({ path: `${SHOTS}/keys-forms.png`, fullPage: true });

  // The log by key and time range, then live: a new request appears without a reload.
  await page.click('#tab-log');
  await page.waitForSelector('#log tr');
  await page.selectOption('#log-filters select[name=key_id]', server.id);
  await page.selectOption('#log-filters select[name=range]', '3600');
  await page.click('#log-filters button[type=submit]');
  await page.waitForFunction((prefix) => {
    const rows = [...document.querySelectorAll('#log tr')];
    return rows.length > 0 && rows.every((r) => r.children[4].textContent === prefix);
  }, server.prefix);
  await page.check('#log-live');
  const fresh = await call('GET', '/public/v1/contacts?limit=1', { key: server.key });
  const id = fresh.headers.get('x-request-id');
  // Its row reaches the log through the audit queue; once the API has it, the page shows it
  // within a few of its 5 s polls, without a reload.
  assert.ok(await eventually(async () => (await call('GET', `/public/v1/logs?request_id=${id}`, { key: owner.key })).body.data?.length === 1, 60_000), 'the row is in the log');
  await page.waitForSelector(`#log tr[data-request-id="${id}"]`, { timeout: 20_000 });
  assert.equal(await page.$$eval(`#log tr[data-request-id="${id}"]`, (r) => r.length), 1, 'shown once');
  await page.uncheck('#log-live');
  await page.screenshot({ path: `${SHOTS}/log-live.png`, fullPage: true });

  // Webhooks: add an endpoint (its secret shown once), send a test event, resend it, delete.
  await page.click('#tab-webhooks');
  await page.fill('#new-webhook input[name=url]', `${hooks.url}/page-hook`);
  await page.uncheck('#new-webhook input[value="*"]');
  await page.check('#new-webhook input[value="contact.created"]');
  await page.click('#new-webhook button[type=submit]');
  await page.waitForSelector('#shown-once:not([hidden])');
  assert.match(await page.textContent('#shown-secret'), /^whsec_/);
  await page.click('#shown-dismiss');
  const endpoint = (await listAll('/public/v1/webhooks', owner.key)).find((w) => w.url === `${hooks.url}/page-hook`);
  assert.deepEqual(endpoint.events, ['contact.created']);
  receiverHealthy = true;
  await page.selectOption('#test-event select[name=type]', 'contact.created');
  await page.click('#test-event button[type=submit]');
  await page.waitForFunction(() => /Sample contact.created sent: 1 delivery/.test(document.querySelector('#webhook-note').textContent));
  assert.ok(await hooks.waitFor('/page-hook', 1, 30_000), 'the test event arrived');
  await page.click(`#webhooks tr[data-id="${endpoint.id}"] button:text("Deliveries")`);
  await eventually(async () => {
    await page.click(`#webhooks tr[data-id="${endpoint.id}"] button:text("Deliveries")`);
    return page.$('#deliveries tr[data-status=delivered]');
  }, 20_000);
  assert.match(await page.textContent('#deliveries details.payload pre'), /ct_sample/);
  await page.click('#deliveries tr[data-status=delivered] button:text("Resend")');
  assert.ok(await hooks.waitFor('/page-hook', 2, 30_000), 'resent');
  await page.screenshot({ path: `${SHOTS}/webhooks-forms.png`, fullPage: true });
  await page.click(`#webhooks tr[data-id="${endpoint.id}"] button:text("Delete")`);
  await page.click(`#webhooks tr[data-id="${endpoint.id}"] button:text("Confirm delete")`);
  await page.waitForFunction((wid) => !document.querySelector(`#webhooks tr[data-id="${wid}"]`), endpoint.id);
  assert.ok(!(await listAll('/public/v1/webhooks', owner.key)).some((w) => w.id === endpoint.id));

  // The project overview: every key together, with response-time percentiles from the aggregates.
  const overview = (await call('GET', '/public/v1/stats?days=7', { key: owner.key })).body;
  const latest = overview.daily.at(-1);
  assert.ok(overview.total >= 3, JSON.stringify(overview));
  assert.ok(latest.p50_ms >= 10 && latest.p50_ms <= latest.p95_ms && latest.p95_ms <= latest.p99_ms, JSON.stringify(latest));
  assert.ok(overview.top_endpoints.some((e) => e.route === '/public/v1/me' && e.p95_ms >= 10), JSON.stringify(overview.top_endpoints));
  await page.click('#tab-overview');
  await page.waitForSelector('#overview-chart[data-total]');
  assert.ok(Number(await page.getAttribute('#overview-chart', 'data-total')) >= overview.total);
  assert.match(await page.textContent('#overview-latency'), /^\d+ \/ \d+ \/ \d+ ms$/);
  assert.match(await page.textContent('#overview-endpoints'), /\/public\/v1\/me/);
  // One endpoint over time: the chart and the figures of GET /public/v1/me alone.
  const me = (await call('GET', `/public/v1/stats?days=7&endpoint=${encodeURIComponent('GET /public/v1/me')}`, { key: owner.key })).body;
  assert.equal(me.endpoint, 'GET /public/v1/me');
  assert.deepEqual(me.top_endpoints.map((e) => `${e.method} ${e.route}`), ['GET /public/v1/me']);
  assertError(await call('GET', '/public/v1/stats?endpoint=nonsense', { key: owner.key }), 400, 'VALIDATION_ERROR');
  await page.click('#overview-endpoints tr[data-endpoint="GET /public/v1/me"]');
  await page.waitForFunction(() => document.querySelector('#overview-endpoint').textContent === 'GET /public/v1/me');
  assert.ok(Number(await page.getAttribute('#overview-chart', 'data-total')) >= me.total);
  await page.screenshot({ path: `${SHOTS}/overview.png`, fullPage: true });
  await page.close();
});

test('40 keys on trial while gatehouse logs tail runs: the keys tab loads again and again without a 429', { timeout: 180_000 }, async () => {
  const gatehouse = buildCli();
  const { projectId, owner } = await createProject('Dashboard budget');
  const admin = { authorization: `Bearer ${ADMIN_TOKEN}` };
  for (let i = 0; i < 40; i++) {
    const made = await call('POST', `/admin/v1/projects/${projectId}/keys`, { headers: admin, body: { type: 'server', name: `k${i}` } });
    assert.equal(made.status, 201, made.text);
  }
  const tail = spawn(gatehouse.bin, ['logs', 'tail'], { env: { ...process.env, GATEHOUSE_URL: BASE, GATEHOUSE_KEY: owner.key } });
  let tailErrors = '';
  tail.stderr.on('data', (chunk) => { tailErrors += chunk; });
  try {
    const page = await watched(await browser.newPage({ viewport: { width: 1280, height: 900 } }));
    const seen = calls(page);
    await signIn(page, owner.key);
    for (let load = 0; load < 3; load++) {
      await page.waitForFunction(() => document.querySelectorAll('#keys tr').length === 41);
      await sleep(10_000);
      await page.reload();
    }
    await page.waitForFunction(() => document.querySelectorAll('#keys tr').length === 41);
    const refused = seen.filter((c) => c.status === 429);
    assert.deepEqual(refused, [], 'the page got no 429');
    const apiCalls = seen.filter((c) => c.path.startsWith('/public/'));
    assert.ok(apiCalls.length <= 4 * 3, `three calls a load, not one per key: ${apiCalls.length}`);
    assert.doesNotMatch(tailErrors, /RATE_LIMIT_EXCEEDED/, 'nor did the tail');
    // Every read of the page was counted under the dashboard budget (its limit, not trial's 30),
    // but /me, asked once at sign-in under the API window and not again on a reload.
    assert.equal(apiCalls.filter((c) => c.path === '/public/v1/me').length, 1, JSON.stringify(apiCalls));
    for (const c of apiCalls.filter((c) => c.path !== '/public/v1/me')) {
      assert.equal(c.method, 'GET', `the page only read: ${JSON.stringify(c)}`);
      assert.equal(c.budget, 'dashboard', JSON.stringify(c));
      assert.equal(c.limit, String(DASHBOARD_READS_PER_MINUTE), JSON.stringify(c));
    }
    // The owner key's log shows them only when asked: by default the sign-in and the tail's polls.
    // (This test reads under the dashboard budget too: the tail has the key's window.)
    const rows = async (dashboard) => (await call('GET', `/public/v1/logs?key_id=${owner.id}&dashboard=${dashboard}&limit=200`,
      { key: owner.key, headers: { 'gatehouse-budget': 'dashboard' } })).body.data;
    const pageReads = apiCalls.length - 1;
    await eventually(async () => (await rows(true)).filter((r) => r.route.startsWith('/public/v1/keys')).length === pageReads, 20_000);
    assert.ok((await rows(true)).every((r) => r.dashboard && r.method === 'GET'));
    const own = await rows(false);
    assert.ok(own.length > 0 && own.every((r) => !r.dashboard && !r.path.startsWith('/public/v1/keys')), JSON.stringify(own.slice(0, 3)));
    assert.equal(own.filter((r) => r.path === '/public/v1/me').length, 1, 'the sign-in');
    await page.close();
  } finally {
    tail.kill('SIGINT');
  }
});

test('the dashboard budget: its own window beside the owner key\'s, owner keys only, the dashboard\'s reads only', async () => {
  const { owner } = await createProject('Dashboard window');
  const server = await createKey(owner.key, 'server');
  const budget = { 'gatehouse-budget': 'dashboard' };
  // The owner key's trial window (30 a minute) used up by API calls …
  let last;
  for (let i = 0; i < 31 && last?.status !== 429; i++) last = await call('GET', '/public/v1/keys', { key: owner.key });
  assertError(last, 429, 'RATE_LIMIT_EXCEEDED');
  // … the dashboard still reads, in its own window.
  const read = await call('GET', '/public/v1/keys', { key: owner.key, headers: budget });
  assert.equal(read.status, 200, read.text);
  assert.equal(read.headers.get('x-ratelimit-limit'), String(DASHBOARD_READS_PER_MINUTE));
  assert.equal(Number(read.headers.get('x-ratelimit-remaining')), DASHBOARD_READS_PER_MINUTE - 1);
  assert.equal((await call('HEAD', '/public/v1/keys/last-used', { key: owner.key, headers: { 'Gatehouse-Budget': 'Dashboard' } })).status, 200);
  // Not for other key types, not for changes, resources or /me, not with another value.
  const refused = await call('GET', '/public/v1/keys', { key: server.key, headers: budget });
  assertError(refused, 403, 'FORBIDDEN');
  assert.match(refused.body.error.message, /Only an owner key/);
  assertError(await call('GET', '/public/v1/contacts', { key: server.key, headers: budget }), 400, 'VALIDATION_ERROR');
  assertError(await call('GET', '/public/v1/me', { key: server.key, headers: budget }), 400, 'VALIDATION_ERROR');
  assertError(await call('GET', '/public/v1/logs', { key: owner.key, headers: { 'gatehouse-budget': 'api' } }), 429, 'RATE_LIMIT_EXCEEDED');
  const fresh = await createProject('Dashboard window 2');
  const change = await call('POST', '/public/v1/keys', { key: fresh.owner.key, headers: budget, body: { type: 'server' } });
  assertError(change, 400, 'VALIDATION_ERROR');
  assert.equal(change.body.error.details.header, 'Gatehouse-Budget');
  assert.equal((await listAll('/public/v1/keys', fresh.owner.key)).length, 1, 'the refused change made no key');
  // The server key's refusal is in the owner's default log (dashboard=false): the budget counted nothing.
  const look = (path, key = owner.key) => call('GET', path, { key, headers: budget });
  await eventually(async () => (await look(`/public/v1/logs?dashboard=false&key_id=${server.id}&status=403`)).body.data.length === 1, 20_000);
  // A key used only through the budget still shows its last use (a leaked owner key cannot hide).
  const second = await createKey(fresh.owner.key, 'owner');
  assert.equal((await look('/public/v1/keys', second.key)).status, 200);
  await eventually(async () => (await look('/public/v1/keys/last-used', fresh.owner.key)).body.data.some((k) => k.key_id === second.id), 20_000);
  const rows = (await look(`/public/v1/logs?key_id=${second.id}`, fresh.owner.key)).body.data;
  assert.deepEqual(rows.map((r) => [r.route, r.dashboard]), [['/public/v1/keys', true]]);
});

test('the worker serves every file of public/ itself: bytes, type, ETag and 304, pages without .html, HEAD', async () => {
  // No static assets binding (docs/performance.md, "The asset router"): build.rs builds public/ in.
  const files = [];
  const walk = (dir) => {
    for (const e of readdirSync(new URL(dir, PUBLIC), { withFileTypes: true })) {
      if (e.isDirectory()) walk(`${dir}${e.name}/`);
      else if (!e.name.startsWith('_')) files.push(`${dir}${e.name}`);
    }
  };
  walk('');
  assert.ok(files.includes('dashboard.html') && files.includes('openapi.json'), files.join());
  const types = { html: 'text/html', js: 'text/javascript', css: 'text/css', json: 'application/json', svg: 'image/svg+xml' };
  for (const file of files) {
    const path = `/${file.replace(/\.html$/, '')}`;
    const res = await fetch(`${BASE}${path}`);
    assert.equal(res.status, 200, path);
    assert.ok(res.headers.get('content-type').startsWith(types[file.split('.').pop()]), `${path}: ${res.headers.get('content-type')}`);
    assert.deepEqual(Buffer.from(await res.arrayBuffer()), readFileSync(new URL(file, PUBLIC)), path);
    const etag = res.headers.get('etag');
    assert.match(etag, /^"[0-9a-f]{16}"$/, path);
    assert.equal(res.headers.get('cache-control'), 'public, max-age=0, must-revalidate', path);
    assert.equal(res.headers.get('x-content-type-options'), 'nosniff', path);
    const again = await fetch(`${BASE}${path}`, { headers: { 'if-none-match': `W/${etag}, "other"` } });
    assert.equal(again.status, 304, path);
    assert.equal((await again.arrayBuffer()).byteLength, 0, path);
    const head = await fetch(`${BASE}${path}`, { method: 'HEAD' });
    assert.equal(head.status, 200, path);
    assert.equal(head.headers.get('etag'), etag, path);
  }
  const chart = await fetch(`${BASE}/vendor/chart.umd.min.js`);
  assert.equal(chart.status, 200);
  assert.match(await chart.text(), /Chart/);
  for (const spelling of ['/dashboard.html', '/dashboard/']) {
    const moved = await fetch(`${BASE}${spelling}`, { redirect: 'manual' });
    assert.equal(moved.status, 307, spelling);
    assert.equal(moved.headers.get('location'), '/dashboard', spelling);
  }
  // Only GET and HEAD: anything else is the API's (no such route); build.rs skips names that start with _.
  assert.equal((await fetch(`${BASE}/dashboard`, { method: 'POST' })).status, 404);
  assert.equal((await fetch(`${BASE}/_headers`)).status, 404);
  // A file is changed only by a build: a stale ETag gets the whole file.
  assert.equal((await fetch(`${BASE}/openapi.json`, { headers: { 'if-none-match': '"0000000000000000"' } })).status, 200);
});

test('the API description is served at /openapi.json', async () => {
  const res = await fetch(`${BASE}/openapi.json`);
  assert.equal(res.status, 200);
  const doc = await res.json();
  assert.equal(doc.openapi, '3.1.0');
  assert.ok(doc.paths['/public/v1/contacts'].post);
  assert.equal(doc.components.securitySchemes.apiKey.scheme, 'bearer');
});

test('the events view: what the keys sent, newest first, filtered by name, and live as new ones arrive (SPEC §24)', async () => {
  const { owner } = await createProject('Dashboard events', { plan: 'business' });
  const web = await createKey(owner.key, 'browser');
  const track = (event, properties) => call('POST', '/v1/track', {
    key: web.key, body: { batch: [{ event_id: crypto.randomUUID(), event, anonymous_id: 'anon-7', properties }] },
  });
  for (const [event, properties] of [['Signed Up', { plan: 'pro' }], ['Page Viewed', { path: '/pricing' }], ['Page Viewed', { path: '/docs' }]]) {
    assert.equal((await track(event, properties)).status, 202);
  }
  await eventually(async () => (await listAll('/public/v1/events', owner.key)).length === 3, 20_000);

  const page = await watched(await browser.newPage({ viewport: { width: 1280, height: 900 } }));
  await page.goto(`${BASE}/dashboard`);
  await page.fill('#owner-key', owner.key);
  await page.click('#login button[type=submit]');
  await page.waitForSelector('#keys tr');
  await page.click('#tab-events');
  await page.waitForFunction(() => document.querySelectorAll('#events tr').length === 3);
  const names = await page.$$eval('#events tr td:nth-child(2)', (cells) => cells.map((c) => c.textContent));
  assert.deepEqual(names, ['Page Viewed', 'Page Viewed', 'Signed Up'], 'newest first');
  assert.match(await page.textContent('#events'), /anon-7/);

  await page.fill('#event-filters input[name=event]', 'Signed Up');
  await page.click('#event-filters button[type=submit]');
  await page.waitForFunction(() => document.querySelectorAll('#events tr').length === 1);
  await page.click('#events tr details summary');
  assert.match(await page.textContent('#events tr pre'), /"plan": "pro"/);

  // Live: a new event of the filtered name appears on top without a click.
  await page.check('#events-live');
  assert.equal((await track('Signed Up', { plan: 'team' })).status, 202);
  await page.waitForFunction(() => document.querySelectorAll('#events tr').length === 2, null, { timeout: 20_000 });
  await page.screenshot({ path: `${SHOTS}/events.png`, fullPage: true });
  await page.close();
});
