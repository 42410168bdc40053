// The client's core runs unchanged in a browser (Chromium through playwright-core): the bundle a
// page downloads, its send loop (a scripted fetch: no CORS on /public routes, which take server
// keys) and webhook verification with the page's Web Crypto (HMAC and Ed25519).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { createServer } from 'node:http';
import { fileURLToPath } from 'node:url';
import * as esbuild from 'esbuild';
import { chromium } from 'playwright-core';

const executablePath = process.env.CHROMIUM ?? '/usr/bin/chromium';
const skip = existsSync(executablePath) ? false : `no Chromium at ${executablePath} (set CHROMIUM)`;
let browser;
let page;
let server;

before(async () => {
  if (skip) return;
  const bundle = await esbuild.build({
    entryPoints: [fileURLToPath(new URL('../dist/index.js', import.meta.url))],
    bundle: true,
    minify: true,
    format: 'iife',
    globalName: 'GH',
    platform: 'browser',
    write: false,
  });
  browser = await chromium.launch({ executablePath, args: ['--no-sandbox'] });
  // A page on 127.0.0.1 is a secure context (Web Crypto's subtle, randomUUID), as an https page is.
  server = createServer((_req, res) => res.writeHead(200, { 'content-type': 'text/html' }).end('<!doctype html><title>client</title>'));
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  page = await browser.newPage();
  await page.goto(`http://127.0.0.1:${server.address().port}/`);
  await page.addScriptTag({ content: bundle.outputFiles[0].text });
});
after(async () => {
  await browser?.close();
  server?.close();
});

test('the bundle loads in a page', { skip }, async () => {
  const names = await page.evaluate(() => ['Gatehouse', 'GatehouseError', 'verifyWebhook', 'shouldRetry'].map((n) => typeof GH[n]));
  assert.deepEqual(names, ['function', 'function', 'function', 'function']);
});

test('the send loop in a page: a 503 then a 201, one key, the waits of the contract', { skip }, async () => {
  const result = await page.evaluate(async () => {
    const answers = [
      new Response(JSON.stringify({ error: { code: 'SERVICE_UNAVAILABLE', message: 'busy', request_id: 'r1', retryable: true, details: {} } }), {
        status: 503,
        headers: { 'retry-after': '2' },
      }),
      new Response(JSON.stringify({ id: 'con_1', name: 'Ada' }), { status: 201 }),
    ];
    const keys = [];
    const waits = [];
    let clock = Date.parse('2026-11-30T16:00:00Z');
    const gh = new GH.Gatehouse({
      apiKey: 'gh_s_page',
      baseUrl: 'https://api.example.test',
      random: () => 1,
      now: () => clock,
      sleep: async (ms) => {
        waits.push(ms);
        clock += ms;
      },
      fetch: async (_url, init) => {
        keys.push(new Headers(init.headers).get('idempotency-key'));
        return answers.shift();
      },
    });
    const contact = await gh.contacts.create({ name: 'Ada' });
    const failed = await gh.contacts.get('con_2', { maxAttempts: 1 }).catch((e) => e);
    return { contact, keys, waits, failed: { name: failed?.name, code: failed?.code, status: failed?.status } };
  });
  assert.deepEqual(result.contact, { id: 'con_1', name: 'Ada' });
  assert.equal(result.keys.length, 3);
  assert.equal(result.keys[0], result.keys[1], 'the retry sends the same key');
  assert.equal(result.keys[2], null, 'a read has none');
  assert.match(result.keys[0], /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
  assert.deepEqual(result.waits.map(Math.round), [2200]);
  // The answers ran out: the page's fetch threw, a network error on a single attempt.
  assert.deepEqual(result.failed, { name: 'GatehouseError', code: 'NETWORK_ERROR', status: 0 });
});

test('verifyWebhook in a page: the documented v1 and v1a vectors', { skip }, async () => {
  const result = await page.evaluate(async () => {
    const body = '{"id":"evt_1","type":"contact.created","created_at":"2026-11-29T08:48:32.123Z","data":{"id":"con_1"}}';
    const headers = (signature) => ({ 'webhook-id': 'msg_2KWPBgLlAfxdpx2AI54pPJ85f4W', 'webhook-timestamp': '1674087231', 'webhook-signature': signature });
    const now = 1674087231 * 1000;
    const v1 = 'v1,8rNxPiX2gpBK2xBV2nEJe+ZsU5vvmR2uJ17KtxQRURY=';
    const v1a = 'v1a,Yp7XSCXKnZdl0ye7BE8gi5cFmYoP5NFF/BUZ0RRxUga3LFjlHoVM7vcOV8+PP4jtzltS+Z9S+xmLQ77p1Xo/BA==';
    const secret = 'whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYX';
    const publicKey = 'whpk_A6EHv/POEL4dcN0Y50vAmWfk1jCbpQ1fHdyGZBJVMbg=';
    const outcome = (promise) => promise.then((ok) => ok, (e) => e.reason ?? String(e));
    return {
      v1: await outcome(GH.verifyWebhook(body, new Headers(headers(v1)), secret, { now })),
      v1a: await outcome(GH.verifyWebhook(body, headers(v1a), publicKey, { now })),
      changed: await outcome(GH.verifyWebhook(`${body} `, headers(v1), secret, { now })),
      changedV1a: await outcome(GH.verifyWebhook(`${body} `, headers(v1a), publicKey, { now })),
      stale: await outcome(GH.verifyWebhook(body, headers(v1), secret, { now: now + 301_000 })),
    };
  });
  assert.deepEqual(result, {
    v1: true,
    v1a: true,
    changed: 'signature_mismatch',
    changedV1a: 'signature_mismatch',
    stale: 'timestamp_out_of_tolerance',
  });
});
