// SPEC §13 "Inputs" end to end: a 200-character log path glob (no storage pattern limit), dates
// that must exist, redaction of percent-encoded secret names, HEAD wherever GET is, and the
// dashboard's Content-Security-Policy (checked in headless Chromium: no violation while it works).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { chromium } from 'playwright-core';
import { BASE, assertError, businessProject, call, createKey, createProject, freshWindow, sleep } from './harness.mjs';

/** A fresh project with a server key. The owner key only reads the log, slowly (trial limits). */
async function project() {
  const p = await createProject('inputs');
  const server = await createKey(p.owner.key, 'server');
  return { ...p, server };
}

/** The log rows `query` answers, once there are at least `count` (the consumer writes in batches). */
async function rowsOnce(ownerKey, query, count) {
  const end = Date.now() + 20_000;
  for (;;) {
    const res = await call('GET', `/public/v1/logs?limit=200&${query}`, { key: ownerKey });
    assert.equal(res.status, 200, res.text);
    if (res.body.data.length >= count || Date.now() > end) return res.body.data;
    await sleep(1_000);
  }
}

test('a 200-character path glob matches the right rows; 201 characters is a 422', async () => {
  const { owner, server } = await project();
  // `%`, `_` and `\` are LIKE metacharacters: they must match only themselves.
  const long = 'x'.repeat(120);
  const paths = [
    `/public/v1/contacts/con_a?q=${long}&tag=a_b%25c&z=1`, // matches
    `/public/v1/contacts/con_b?q=${long}&tag=a_b%25c&z=1`, // matches (the * covers the id)
    `/public/v1/contacts/con_c?q=${long}&tag=aXbYc&z=1`, // `_` and `%25` are literal: no match
    `/public/v1/contacts/con_d?q=${long.slice(1)}&tag=a_b%25c&z=1`, // one x short: no match
  ];
  const sent = [];
  for (const path of paths) {
    const res = await call('GET', path, { key: server.key });
    assert.equal(res.status, 400, res.text); // unknown query parameters, audited all the same
    sent.push(res.headers.get('x-request-id'));
  }
  const glob = `/public/v1/contacts/con_*?q=${long}&tag=a_b%25c&z=1`;
  const padded = `*${'*'.repeat(200 - glob.length - 1)}${glob}`; // leading stars: same meaning
  assert.equal(padded.length, 200);
  const rows = await rowsOnce(owner.key, `path=${encodeURIComponent(padded)}`, 2);
  assert.deepEqual(rows.map((r) => r.request_id).sort(), sent.slice(0, 2).sort());
  // The same glob as an exact path, and a glob with parts in the middle, longer than D1's 50-byte
  // LIKE pattern limit (this answered 503 before).
  const exact = await rowsOnce(owner.key, `path=${encodeURIComponent(paths[3])}`, 1);
  assert.deepEqual(exact.map((r) => r.request_id), [sent[3]]);
  const middle = `/public/v1/*/con_*?q=${'x'.repeat(60)}*&tag=a*c&z=1`;
  const mid = await rowsOnce(owner.key, `path=${encodeURIComponent(middle)}`, 4);
  assert.deepEqual(mid.map((r) => r.request_id).sort(), sent.slice().sort());

  const tooLong = await call('GET', `/public/v1/logs?path=${encodeURIComponent(`${padded}x`)}`, { key: owner.key });
  assert.equal(assertError(tooLong, 422, 'VALIDATION_ERROR').details.field, 'path');
});

test('dates and times must exist: 2026-02-31 and 2026-13-01 are 422, leap days are right', async () => {
  const { owner } = await project();
  const logs = (query) => call('GET', `/public/v1/logs?${query}`, { key: owner.key });
  for (const query of ['from=2026-02-31', 'to=2026-13-01', 'from=2027-02-29', 'from=2026-02-31T00:00:00Z',
    'to=2026-11-29T24:00:00Z', `to=${encodeURIComponent('2026-11-29T10:00:00+24:00')}`, 'from=2026-11-30&to=2026-11-29']) {
    const e = assertError(await logs(query), 422, 'VALIDATION_ERROR');
    assert.match(e.details.field, /^(from|to)$/, query);
  }
  assertError(await logs('from=yesterday'), 400, 'VALIDATION_ERROR');
  const leap = await logs('from=2028-02-29&to=2028-02-29');
  assert.equal(leap.status, 200, leap.text);
  assert.deepEqual(leap.body.data, []);
  assertError(await call('GET', '/public/v1/logs/archives/2026-02-31', { key: owner.key }), 422, 'VALIDATION_ERROR');
  assertError(await call('GET', '/public/v1/logs/archives/2027-02-29', { key: owner.key }), 422, 'VALIDATION_ERROR');
  assertError(await call('GET', '/public/v1/logs/archives/2028-02-29', { key: owner.key }), 404, 'NOT_FOUND');
  assertError(await call('GET', '/public/v1/logs/archives/2026-2-1', { key: owner.key }), 400, 'VALIDATION_ERROR');
});

test('query values of percent-encoded secret names are stored REDACTED, the names as sent', async () => {
  const { owner, server } = await project();
  const res = await call('GET', '/public/v1/contacts?tok%65n=abc&%61pi%5Fkey=zzz&pass%2577ord=p&page=2&q=%74oken', { key: server.key });
  assertError(res, 400, 'VALIDATION_ERROR'); // unknown query parameters, audited all the same
  const [row] = await rowsOnce(owner.key, `request_id=${res.headers.get('x-request-id')}`, 1);
  assert.equal(row.path, '/public/v1/contacts?tok%65n=REDACTED&%61pi%5Fkey=REDACTED&pass%2577ord=REDACTED&page=2&q=%74oken');
});

test('an unknown query parameter is 400 VALIDATION_ERROR naming it, as an unknown body field is', async () => {
  const { owner, server } = await businessProject();
  for (const name of ['Ada', 'Grace']) {
    assert.equal((await call('POST', '/public/v1/contacts', { key: server.key, body: { name } })).status, 201);
  }
  // It listed every contact, as if filtered (fails on main before this commit).
  const filtered = await call('GET', '/public/v1/contacts?email=ada@example.com', { key: server.key });
  const e = assertError(filtered, 400, 'VALIDATION_ERROR');
  assert.equal(e.details.field, 'email');
  assert.match(e.message, /unknown parameter `email`, expected one of `limit`, `cursor`/);
  const field = assertError(await call('POST', '/public/v1/contacts', { key: server.key, body: { name: 'A', emial: 'x' } }), 400, 'VALIDATION_ERROR');
  assert.match(field.message, /unknown field `emial`/);
  assert.equal(assertError(await call('GET', '/public/v1/me?verbose=1', { key: server.key }), 400, 'VALIDATION_ERROR').details.field, 'verbose');
  assert.equal((await call('HEAD', '/public/v1/contacts?email=x', { key: server.key })).status, 400);
  assertError(await call('GET', '/public/v1/logs?stauts=4xx', { key: owner.key }), 400, 'VALIDATION_ERROR');
  assertError(await call('POST', '/public/v1/contacts?dry_run=1', { key: server.key, body: { name: 'C' } }), 400, 'VALIDATION_ERROR');
  // Known parameters work as before; what the dashboard and the SDK send is accepted.
  const page = await call('GET', '/public/v1/contacts?limit=1', { key: server.key });
  assert.equal(page.status, 200, page.text);
  assert.equal(page.body.data.length, 1);
  const next = await call('GET', `/public/v1/contacts?limit=1&cursor=${encodeURIComponent(page.body.next_cursor)}`, { key: server.key });
  assert.equal(next.body.data.length, 1);
  for (const path of ['/public/v1/keys?limit=200', '/public/v1/logs?key_id=k&limit=1', '/public/v1/logs?method=GET&status=4xx&path=%2F*&request_id=r&limit=50',
    `/public/v1/keys/${server.id}/stats?days=30`, '/public/v1/webhooks']) {
    const r = await call('GET', path, { key: owner.key });
    assert.equal(r.status, 200, `${path}: ${r.text}`);
  }
});

test('HEAD answers like GET without a body, counts against the rate limit and is audited', async () => {
  const { owner, server } = await project();
  await freshWindow(10);
  const get = await call('GET', '/public/v1/me', { key: server.key });
  const head = await call('HEAD', '/public/v1/me', { key: server.key });
  const again = await call('GET', '/public/v1/me', { key: server.key });
  assert.equal(head.status, 200);
  assert.equal(head.text, '');
  // Framing headers aside (a HEAD response has no body to frame: the GET is sent chunked and
  // compressed, the HEAD without Transfer-Encoding), the same headers.
  const framing = ['date', 'transfer-encoding', 'content-length'];
  const names = (res) => [...res.headers.keys()].filter((n) => !framing.includes(n)).sort();
  assert.deepEqual(names(head), names(get));
  assert.ok([null, get.headers.get('content-length')].includes(head.headers.get('content-length')));
  for (const name of ['content-type', 'content-encoding', 'x-ratelimit-limit', 'ratelimit-policy']) {
    assert.equal(head.headers.get(name), get.headers.get(name), name);
  }
  const remaining = [get, head, again].map((r) => Number(r.headers.get('x-ratelimit-remaining')));
  assert.deepEqual(remaining, [remaining[0], remaining[0] - 1, remaining[0] - 2], 'HEAD is a request');

  // Errors too: same status and headers, no body.
  const missing = await call('HEAD', '/public/v1/contacts/con_missing', { key: server.key });
  assert.equal(missing.status, 404);
  assert.equal(missing.text, '');
  assert.match(missing.headers.get('content-type'), /^application\/json/);
  assert.equal((await call('HEAD', '/health')).status, 200);
  const unauthenticated = await call('HEAD', '/public/v1/me');
  assert.equal(unauthenticated.status, 401);
  const post = await call('HEAD', '/v1/track', { key: server.key });
  assert.equal(post.status, 405);
  assert.equal(post.headers.get('allow'), 'POST');
  assert.equal((await call('PUT', '/public/v1/webhooks', { key: owner.key })).headers.get('allow'), 'POST, GET, HEAD');

  const [row] = await rowsOnce(owner.key, `request_id=${head.headers.get('x-request-id')}`, 1);
  assert.equal(row.method, 'HEAD');
  assert.equal(row.status, 200);
  assert.equal(row.route, '/public/v1/me');
  assert.equal(row.response_bytes, 0, 'a HEAD answer sends no body');
  // The 405 was sent with a valid key of the project: its row is the project's too (SPEC §19).
  const heads = await rowsOnce(owner.key, 'method=HEAD', 3);
  assert.deepEqual(heads.map((r) => r.status).sort(), [200, 404, 405], 'one row per HEAD request');
});

test('the dashboard is served with its CSP and works under it (no violation in Chromium)', async () => {
  const policy = "default-src 'self'; frame-ancestors 'none'";
  for (const method of ['GET', 'HEAD']) {
    const res = await fetch(`${BASE}/dashboard`, { method });
    assert.equal(res.status, 200);
    assert.equal(res.headers.get('content-security-policy'), policy, method);
  }
  const { owner } = await project();
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
    args: ['--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking'],
  });
  try {
    const page = await browser.newPage();
    const violations = [];
    page.on('console', (m) => { if (/Content Security Policy|Refused to/i.test(m.text())) violations.push(m.text()); });
    await page.exposeFunction('reportViolation', (v) => violations.push(v));
    await page.addInitScript(() => document.addEventListener('securitypolicyviolation',
      (e) => window.reportViolation(`${e.violatedDirective} ${e.blockedURI}`)));
    await page.goto(`${BASE}/dashboard`);
    await page.fill('#owner-key', owner.key);
    await page.click('#login button[type=submit]');
    await page.waitForSelector(`#keys tr[data-prefix="${owner.prefix}"]`);
    await page.click(`#keys tr[data-prefix="${owner.prefix}"] button:text("Stats")`);
    await page.waitForSelector('#stats-chart[data-total]');
    await page.click('#tab-log');
    await page.waitForLoadState('networkidle');
    await page.click('#tab-webhooks');
    await page.waitForLoadState('networkidle');
    assert.equal(await page.evaluate(() => typeof window.Chart), 'function', 'Chart.js loaded');
    assert.deepEqual(violations, []);
  } finally {
    await browser.close();
  }
});
