// verifyWebhook against the test vectors of docs/api/webhooks.md (the gateway's signer and the Rust
// SDK's verifier are tested against the same ones).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { verifyWebhook, WebhookVerificationError } from '../dist/index.js';

const ID = 'msg_2KWPBgLlAfxdpx2AI54pPJ85f4W';
const TS = '1674087231';
const AT = Number(TS) * 1000;
const BODY = '{"id":"evt_1","type":"contact.created","created_at":"2026-11-29T08:48:32.123Z","data":{"id":"con_1"}}';
const SECRET = 'whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYX';
const V1 = 'v1,8rNxPiX2gpBK2xBV2nEJe+ZsU5vvmR2uJ17KtxQRURY=';
const PUBLIC = 'whpk_A6EHv/POEL4dcN0Y50vAmWfk1jCbpQ1fHdyGZBJVMbg=';
const V1A = 'v1a,Yp7XSCXKnZdl0ye7BE8gi5cFmYoP5NFF/BUZ0RRxUga3LFjlHoVM7vcOV8+PP4jtzltS+Z9S+xmLQ77p1Xo/BA==';
const headers = (signature, extra = {}) => ({ 'webhook-id': ID, 'webhook-timestamp': TS, 'webhook-signature': signature, ...extra });
const refused = (reason) => (e) => e instanceof WebhookVerificationError && e.reason === reason;

test('the documented v1 vector verifies, and only at ±5 minutes', async () => {
  assert.equal(await verifyWebhook(BODY, headers(V1), SECRET, { now: AT }), true);
  assert.equal(await verifyWebhook(BODY, new Headers(headers(V1)), SECRET, { now: new Date(AT + 300_000) }), true);
  await assert.rejects(verifyWebhook(BODY, headers(V1), SECRET, { now: AT + 301_000 }), refused('timestamp_out_of_tolerance'));
  await assert.rejects(verifyWebhook(BODY, headers(V1), SECRET, { now: AT - 301_000 }), refused('timestamp_out_of_tolerance'));
  await assert.rejects(verifyWebhook(BODY, headers(V1), SECRET), refused('timestamp_out_of_tolerance'));
});

test('any of several entries may match (rotation), in either order', async () => {
  const other = 'v1,AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=';
  assert.equal(await verifyWebhook(BODY, headers(`${other} ${V1}`), SECRET, { now: AT }), true);
  assert.equal(await verifyWebhook(BODY, headers(`${V1} ${other}`), SECRET, { now: AT }), true);
  assert.equal(await verifyWebhook(BODY, { 'Webhook-Id': ID, 'Webhook-Timestamp': TS, 'Webhook-Signature': [other, V1] }, SECRET, { now: AT }), true);
  await assert.rejects(verifyWebhook(BODY, headers(other), SECRET, { now: AT }), refused('signature_mismatch'));
});

test('the documented v1a (Ed25519) vector verifies with the public key', async () => {
  assert.equal(await verifyWebhook(BODY, headers(V1A), PUBLIC, { now: AT }), true);
  assert.equal(await verifyWebhook(BODY, headers(`${V1A} ${V1}`), [PUBLIC], { now: AT }), true);
  await assert.rejects(verifyWebhook(`${BODY} `, headers(V1A), PUBLIC, { now: AT }), refused('signature_mismatch'));
  await assert.rejects(verifyWebhook(BODY, headers(V1), PUBLIC, { now: AT }), refused('no_signature'));
  await assert.rejects(verifyWebhook(BODY, headers(V1A), SECRET, { now: AT }), refused('no_signature'));
});

test('refusals name their reason', async () => {
  await assert.rejects(verifyWebhook(BODY.replace('con_1', 'con_2'), headers(V1), SECRET, { now: AT }), refused('signature_mismatch'));
  await assert.rejects(verifyWebhook(BODY, headers(V1, { 'webhook-timestamp': 'yesterday' }), SECRET, { now: AT }), refused('invalid_timestamp'));
  await assert.rejects(verifyWebhook(BODY, { 'webhook-id': ID, 'webhook-timestamp': TS }, SECRET, { now: AT }), refused('missing_header'));
  await assert.rejects(verifyWebhook(BODY, headers('v1,not*base64'), SECRET, { now: AT }), refused('no_signature'));
  for (const key of ['', 'whsec_', 'whsec_***', 'secret', 'whpk_AAAA', []]) {
    await assert.rejects(verifyWebhook(BODY, headers(V1), key, { now: AT }), refused('invalid_secret'), JSON.stringify(key));
  }
  // The same secret as bytes of the body works (a Uint8Array or ArrayBuffer body).
  const bytes = new TextEncoder().encode(BODY);
  assert.equal(await verifyWebhook(bytes, headers(V1), SECRET, { now: AT }), true);
  assert.equal(await verifyWebhook(bytes.buffer, headers(V1), SECRET, { now: AT }), true);
});

test('a time or tolerance that is no number cannot turn the timestamp check off', async () => {
  const old = headers(V1, { 'webhook-timestamp': '1000' });
  await assert.rejects(verifyWebhook(BODY, old, SECRET, { now: AT }), refused('timestamp_out_of_tolerance'));
  await assert.rejects(verifyWebhook(BODY, old, SECRET, { now: AT, toleranceSeconds: Number.NaN }), TypeError);
  await assert.rejects(verifyWebhook(BODY, old, SECRET, { now: new Date('not a date') }), TypeError);
  await assert.rejects(verifyWebhook(BODY, old, SECRET, { now: AT, toleranceSeconds: -1 }), TypeError);
});
