// The test kit's cold start and reset (SPEC §21: start ≤ 5 s, reset ≤ 200 ms on this machine),
// measured over several runs: `scripts/bench` calls it after scripts/build-kit. Prints one table
// and, as its last line, the numbers as JSON. Numbers are reported, not asserted.
import { Gatehouse } from '../testing/index.mjs';

const starts = Number(process.argv[2] ?? 3);
const resets = Number(process.argv[3] ?? 20);
const quantile = (list, q) => [...list].sort((a, b) => a - b)[Math.min(list.length - 1, Math.floor(q * list.length))];

const startMs = [];
let kit;
for (let i = 0; i < starts; i++) {
  const t = performance.now();
  const started = await Gatehouse.start();
  startMs.push(Math.round(performance.now() - t));
  if (kit) await started.stop();
  else kit = started;
}
const resetMs = [];
for (let i = 0; i < resets; i++) {
  // Something to clear: a contact (D1 rows, a webhook delivery row) and an idempotent response (KV).
  await fetch(`${kit.url}/public/v1/contacts`, {
    method: 'POST',
    headers: { authorization: `Bearer ${kit.project.keys.server}`, 'content-type': 'application/json', 'idempotency-key': `bench-${i}` },
    body: JSON.stringify({ name: `Contact ${i}` }),
  });
  const t = performance.now();
  await kit.reset();
  resetMs.push(Math.round(performance.now() - t));
}
await kit.stop();
const result = {
  starts, start_ms_p50: quantile(startMs, 0.5), start_ms_max: Math.max(...startMs),
  resets, reset_ms_p50: quantile(resetMs, 0.5), reset_ms_p90: quantile(resetMs, 0.9), reset_ms_max: Math.max(...resetMs),
};
console.log(`kit cold start: p50 ${result.start_ms_p50} ms, max ${result.start_ms_max} ms over ${starts} (target ≤ 5000)`);
console.log(`kit reset: p50 ${result.reset_ms_p50} ms, p90 ${result.reset_ms_p90} ms, max ${result.reset_ms_max} ms over ${resets} (target ≤ 200)`);
console.log(JSON.stringify(result));
