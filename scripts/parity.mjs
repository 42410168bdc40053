// Parity (SPEC §21): end-to-end files of tests/e2e/ run against the test kit (Miniflare, in this
// process) instead of `wrangler dev`, with the test gateway's settings (tests/e2e/gateway-vars.json).
// The kit keeps its state where wrangler would (STATE/v3), so the files' own reads of the local
// D1 and KV (`wrangler d1 execute --persist-to STATE`) and of the log (STATE/wrangler.log) work.
// Usage: node scripts/parity.mjs tests/e2e/a.test.mjs …   (exit status: the test run's)
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Gatehouse } from '../testing/index.mjs';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const files = process.argv.slice(2);
const vars = JSON.parse(readFileSync(join(root, 'tests/e2e/gateway-vars.json'), 'utf8'));
const state = mkdtempSync(join(tmpdir(), 'gatehouse-parity-'));
const kit = await Gatehouse.start({
  vars: { ...vars, PRIVATE_WEBHOOK_ORIGINS: '', WEBHOOK_SWEEP_GRACE_SECONDS: '30' },
  persist: join(state, 'v3'),
  logFile: join(state, 'wrangler.log'),
});
console.log(`kit on ${kit.url} (state ${state}), started in ${kit.startedInMs} ms`);
const env = {
  ...process.env,
  GATEHOUSE_URL: kit.url,
  GATEHOUSE_ADMIN_TOKEN: kit.adminToken,
  GATEHOUSE_STATE: state,
  GATEHOUSE_SCHEDULED_PATH: '/cdn-cgi/handler/scheduled',
};
const run = spawn(process.execPath, ['--test', '--test-concurrency=1', '--test-reporter=spec', ...files], { env, stdio: 'inherit', cwd: root });
const status = await new Promise((resolve) => run.on('exit', (code) => resolve(code ?? 1)));
await kit.stop();
process.exit(status);
