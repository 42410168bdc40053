// SPEC §15, §26: a bad UPSTREAMS is a configuration error, reported like other bad vars — every
// request answers 503 SERVICE_UNAVAILABLE (never 500), /health says why in the worker's own words,
// the other routes do not, and the worker log names the entry and what is wrong. Each case starts
// its own `wrangler dev` (the built worker of scripts/test) with that UPSTREAMS and a fresh state.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, openSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort, sleep } from './harness.mjs';

/** Starts a gateway with `upstreams`, answers its /health and what its log says, and stops it. */
async function withUpstreams(upstreams) {
  const state = mkdtempSync(join(tmpdir(), 'gatehouse-upstreams-'));
  const port = await freePort();
  const log = join(state, 'wrangler.log');
  const out = openSync(log, 'w');
  const child = spawn('wrangler', ['dev', '--ip', '127.0.0.1', '--port', String(port), '--persist-to', state,
    '--inspector-port', String(await freePort()), '--show-interactive-dev-session=false', '--var', `UPSTREAMS:${upstreams}`],
  { detached: true, stdio: ['ignore', out, out] });
  try {
    let res;
    for (let i = 0; i < 120 && !res; i += 1) {
      res = await fetch(`http://127.0.0.1:${port}/health`).catch(() => null);
      if (!res) await sleep(500);
    }
    assert.ok(res, 'wrangler dev answered');
    const body = await res.json();
    const other = await fetch(`http://127.0.0.1:${port}/public/v1/me`);
    const otherBody = await other.json();
    await sleep(500);
    return { status: res.status, body, other: { status: other.status, body: otherBody }, log: readFileSync(log, 'utf8') };
  } finally {
    process.kill(-child.pid, 'SIGTERM');
  }
}

test('a prefix over a built-in route is refused at start, naming the entry and the route', async () => {
  const r = await withUpstreams('[{"prefix":"/shop/v1/","origin":"http://127.0.0.1:9"},{"prefix":"/public/","origin":"http://127.0.0.1:9"}]');
  assert.equal(r.status, 503);
  assert.equal(r.body.error.code, 'SERVICE_UNAVAILABLE');
  assert.match(r.body.error.message, /configuration is invalid: UPSTREAMS\[1\]: prefix "\/public\/" overlaps the built-in route/);
  assert.equal(r.other.status, 503);
  assert.equal(r.other.body.error.code, 'SERVICE_UNAVAILABLE');
  assert.doesNotMatch(JSON.stringify(r.other.body), /UPSTREAMS/, 'only /health says why');
  assert.match(r.log, /configuration: UPSTREAMS\[1\]: prefix "\/public\/" overlaps the built-in route GET \/public\/v1\/me/);
});

test('a service origin without its binding is refused at start', async () => {
  const r = await withUpstreams('[{"prefix":"/billing/","origin":"service:BILLING"}]');
  assert.equal(r.status, 503);
  assert.match(r.body.error.message, /no service binding BILLING is configured/);
  assert.match(r.log, /configuration: UPSTREAMS: the origin of \/billing\/ is service:BILLING, but no service binding BILLING is configured/);
});
