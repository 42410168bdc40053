// SPEC §24 end to end: browser keys in the browser — a window per visitor counted before the
// key's, `?key=` on /v1/track only (for navigator.sendBeacon), and `allowed_origins`.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { assertError, call, createKey, createProject, eventually, freshWindow, randomIp } from './harness.mjs';

const event = () => ({ event_id: randomUUID(), event: 'Page Viewed', anonymous_id: 'anon-1' });
const track = (key, ip, headers = {}) =>
  call('POST', '/v1/track', { key, body: { batch: [event()] }, headers: { 'cf-connecting-ip': ip, ...headers } });
/** A second address in the /64 of an IPv6 `ip`. */
const sameSlash64 = (ip) => ip.replace(/::[0-9a-f]+$/, '::beef');

test('one visitor over its window is refused while another on the same key passes, and the key\'s window was not spent', async () => {
  // trial: 30 a minute for the key, so a tenth, at least 10, for each visitor.
  await freshWindow(20);
  const { owner } = await createProject('visitors');
  const browser = await createKey(owner.key, 'browser');
  const [alice, bob] = [randomIp(), randomIp()];
  for (let i = 0; i < 10; i++) {
    const res = await track(browser.key, alice);
    assert.equal(res.status, 202, res.text);
  }
  for (const ip of [alice, sameSlash64(alice)]) {
    const over = await track(browser.key, ip);
    const e = assertError(over, 429, 'RATE_LIMIT_EXCEEDED');
    assert.equal(e.details.per, 'address', 'the visitor\'s window, not the key\'s');
    assert.equal(e.details.limit, 10);
    assert.ok(Number(over.headers.get('retry-after')) >= 1);
    assert.equal(over.headers.get('x-ratelimit-limit'), '10');
    assert.equal(over.headers.get('access-control-allow-origin'), '*', 'a page can read why');
  }
  const other = await track(browser.key, bob);
  assert.equal(other.status, 202, other.text);
  // Alice's 10 and Bob's 1 came out of the key's 30; her two refusals took nothing.
  assert.equal(other.headers.get('x-ratelimit-limit'), '30');
  assert.equal(other.headers.get('x-ratelimit-remaining'), '19');
  // A server key of the same project has no visitor window.
  const server = await createKey(owner.key, 'server');
  for (let i = 0; i < 12; i++) assert.equal((await track(server.key, alice)).status, 202);
});

test('a browser key may come as ?key= on /v1/track, with a text/plain body as sendBeacon sends it, and nowhere else', async () => {
  const { owner } = await createProject('beacon', { plan: 'business' });
  const browser = await createKey(owner.key, 'browser');
  const server = await createKey(owner.key, 'server');
  const beacon = (path, key, body = JSON.stringify({ batch: [event()] })) =>
    call('POST', `${path}?key=${encodeURIComponent(key)}`, { body, headers: { 'content-type': 'text/plain;charset=UTF-8' } });

  const sent = await beacon('/v1/track', browser.key);
  assert.equal(sent.status, 202, sent.text);
  assert.equal(sent.body.accepted.length, 1);
  assertError(await beacon('/v1/track', server.key), 401, 'INVALID_API_KEY');
  assertError(await beacon('/v1/identify', browser.key, '{"user_id":"u","traits":{}}'), 401, 'INVALID_API_KEY');
  assertError(await call('GET', `/public/v1/me?key=${owner.key}`), 401, 'INVALID_API_KEY');
  const wrong = await beacon('/v1/track', `${browser.key}x`);
  assertError(wrong, 401, 'INVALID_API_KEY');

  // The audit log never holds the key: the path is kept with the value redacted.
  const id = sent.headers.get('x-request-id');
  const row = await eventually(async () => {
    const res = await call('GET', `/public/v1/logs/${id}`, { key: owner.key });
    return res.status === 200 ? res.body : null;
  });
  assert.ok(row, 'the beacon\'s log row');
  assert.equal(row.key_prefix, browser.prefix);
  assert.ok(!JSON.stringify(row).includes(browser.key.slice(12)), JSON.stringify(row));
  assert.match(row.path, /key=REDACTED/);
});

test('a browser key\'s allowed_origins refuse other sites\' pages (403, nothing counted) and only browser keys list them', async () => {
  const { owner } = await createProject('origins', { plan: 'business' });
  const shop = await createKey(owner.key, 'browser', { allowed_origins: ['https://Shop.Example', 'https://shop.example:443'] });
  assert.deepEqual(shop.allowed_origins, ['https://shop.example'], 'one spelling, no repeats');
  const ip = randomIp();

  const fromShop = await track(shop.key, ip, { origin: 'https://shop.example' });
  assert.equal(fromShop.status, 202, fromShop.text);
  const before = Number(fromShop.headers.get('x-ratelimit-remaining'));
  const elsewhere = await track(shop.key, ip, { origin: 'https://evil.example' });
  const e = assertError(elsewhere, 403, 'FORBIDDEN');
  assert.equal(e.details.origin, 'https://evil.example');
  assert.deepEqual(e.details.allowed_origins, ['https://shop.example']);
  const noOrigin = await track(shop.key, ip);
  assert.equal(noOrigin.status, 202, 'a request without Origin is no other site\'s page');
  assert.equal(Number(noOrigin.headers.get('x-ratelimit-remaining')), before - 1, 'the 403 took nothing');

  const cleared = await call('PATCH', `/public/v1/keys/${shop.id}`, { key: owner.key, body: { allowed_origins: null } });
  assert.equal(cleared.status, 200, cleared.text);
  assert.deepEqual(cleared.body.allowed_origins, []);
  assert.equal((await track(shop.key, ip, { origin: 'https://evil.example' })).status, 202);

  const server = await call('POST', '/public/v1/keys', { key: owner.key, body: { type: 'server', allowed_origins: ['https://shop.example'] } });
  assert.equal(assertError(server, 422, 'VALIDATION_ERROR').details.field, 'allowed_origins');
  for (const bad of [['shop.example'], ['https://shop.example/app'], ['*']]) {
    const res = await call('POST', '/public/v1/keys', { key: owner.key, body: { type: 'browser', allowed_origins: bad } });
    assert.equal(assertError(res, 400, 'VALIDATION_ERROR').details.field, 'allowed_origins');
  }
  const listed = await call('GET', '/public/v1/keys', { key: owner.key });
  assert.ok(listed.body.data.filter((k) => k.type !== 'browser').every((k) => !('allowed_origins' in k)));
});
