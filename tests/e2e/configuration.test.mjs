// SPEC §26: a broken configuration never reaches a running gateway unnoticed. scripts/dev and
// scripts/deploy --dry-run run the worker's own parser (gatehouse-config-check) over what they are
// about to use and stop with its message before anything starts, builds or uploads; scripts/dev
// leaves nothing listening. (A gateway started with a broken configuration answers 503 on every
// route, /health with the message: tests/e2e/proxy_config.test.mjs.)
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { freePort, listening, ROOT } from './harness.mjs';

const NO_TRIAL = '{"business":{"per_minute":2000,"monthly_quota":10000000}}';

/** Runs a script of the project; answers its exit code, output and seconds (killed after `limitMs`). */
function run(args, env = {}, limitMs = 120_000) {
  return new Promise((resolve) => {
    const started = Date.now();
    const child = spawn(args[0], args.slice(1), { cwd: ROOT, env: { ...process.env, ...env }, detached: true });
    let output = '';
    child.stdout.on('data', (d) => { output += d; });
    child.stderr.on('data', (d) => { output += d; });
    const timer = setTimeout(() => process.kill(-child.pid, 'SIGKILL'), limitMs);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, output: output.replace(/\x1b\[[0-9;]*m/g, ''), seconds: (Date.now() - started) / 1000 });
    });
  });
}

test('scripts/dev refuses a PLANS without "trial" at once, with the worker\'s message, and leaves nothing running', async () => {
  const port = await freePort();
  const r = await run(['scripts/dev', '--var', `PLANS:${NO_TRIAL}`], { PORT: String(port) });
  assert.notEqual(r.code, 0, r.output);
  assert.ok(r.seconds < 60, `refused after ${r.seconds} s`);
  assert.match(r.output, /configuration: PLANS must define the "trial" plan/);
  assert.doesNotMatch(r.output, /Build the worker|Start the gateway/, 'nothing was built or started');
  assert.equal(await listening(port), false, `nothing listens on ${port}`);
});

test('scripts/dev refuses a service origin that wrangler.toml does not bind', async () => {
  const port = await freePort();
  const r = await run(['scripts/dev', '--var', 'UPSTREAMS:[{"prefix":"/billing/","origin":"service:BILLING"}]'], { PORT: String(port) });
  assert.notEqual(r.code, 0, r.output);
  assert.match(r.output, /UPSTREAMS: the origin of \/billing\/ is service:BILLING, but no service binding BILLING is configured/);
  assert.equal(await listening(port), false);
});

/** A wrangler.toml beside the real one with `edit` applied; removed after `use`. */
async function withConfig(edit, use) {
  const file = `wrangler.e2e-${process.pid}.toml`;
  writeFileSync(join(ROOT, file), edit(readFileSync(join(ROOT, 'wrangler.toml'), 'utf8')));
  try {
    return await use(file);
  } finally {
    rmSync(join(ROOT, file), { force: true });
  }
}

test('scripts/deploy --dry-run refuses a broken PLANS before it builds or uploads anything', async () => {
  const r = await withConfig((t) => t.replace(/^PLANS = .*$/m, `PLANS = '${NO_TRIAL}'`),
    (file) => run(['scripts/deploy', '--dry-run', '--config', file]));
  assert.notEqual(r.code, 0, r.output);
  assert.match(r.output, /configuration: PLANS must define the "trial" plan/);
  assert.doesNotMatch(r.output, /Build the worker|wrangler deploy --dry-run/);
});

test('scripts/deploy --dry-run refuses a secret written into [vars]', async () => {
  const r = await withConfig((t) => t.replace(/^\[vars\]$/m, '[vars]\nKEY_PEPPER = "written-into-the-file-by-mistake"'),
    (file) => run(['scripts/deploy', '--dry-run', '--config', file]));
  assert.notEqual(r.code, 0, r.output);
  assert.match(r.output, /KEY_PEPPER is in the \[vars\] of wrangler\.e2e-\d+\.toml: a secret there is uploaded/);
  assert.doesNotMatch(r.output, /written-into-the-file-by-mistake/, 'the secret is not echoed');
});
