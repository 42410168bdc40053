// The kit for a test process that is not JavaScript (the Rust SDK's `testing` feature): starts a
// Gatehouse and speaks JSON lines on stdin/stdout. The first line out is the kit:
//   {"ok":true,"url":…,"adminToken":…,"project":{"id":…,"keys":{…}},"sink":…}
// then one answer per command in, in order:
//   {"op":"advance","seconds":60}         → {"ok":true,"now":"…"}
//   {"op":"now"}                          → {"ok":true,"now":"…"}
//   {"op":"reset"}                        → {"ok":true,"project":{…}}
//   {"op":"subscribe","events":[…]}       → {"ok":true,"subscription":{…}}
//   {"op":"trust","secret":"whsec_…"}     → {"ok":true}
//   {"op":"next","type":"…","timeout":ms} → {"ok":true,"delivery":{…}}
//   {"op":"fail","n":1}                   → {"ok":true}
//   {"op":"all"} / {"op":"clear"}         → {"ok":true,"deliveries":[…]} / {"ok":true}
// A failed command answers {"ok":false,"error":"…"}. The kit stops when stdin closes.
// Options come as JSON in the environment variable GATEHOUSE_KIT_OPTIONS (see Gatehouse.start).
import { createInterface } from 'node:readline';
import { Gatehouse } from './index.mjs';

const out = (answer) => process.stdout.write(`${JSON.stringify(answer)}\n`);

let gh;
try {
  gh = await Gatehouse.start(JSON.parse(process.env.GATEHOUSE_KIT_OPTIONS || '{}'));
} catch (e) {
  out({ ok: false, error: String(e?.stack ?? e) });
  process.exit(1);
}
out({ ok: true, url: gh.url, adminToken: gh.adminToken, project: gh.project, sink: gh.webhooks.endpoint() });

const ops = {
  advance: async ({ seconds }) => { await gh.clock.advance(seconds); return { now: gh.clock.now() }; },
  now: async () => ({ now: gh.clock.now() }),
  reset: async () => { await gh.reset(); return { project: gh.project }; },
  subscribe: async ({ events, key, path }) => ({ subscription: await gh.webhooks.subscribe(events, { key, path }) }),
  trust: async ({ secret }) => { gh.webhooks.trust(secret); return {}; },
  next: async ({ type, timeout }) => ({ delivery: await gh.webhooks.next({ type, timeout }) }),
  fail: async ({ n }) => { gh.webhooks.fail(n); return {}; },
  all: async () => ({ deliveries: gh.webhooks.all() }),
  clear: async () => { gh.webhooks.clear(); return {}; },
};

// One command at a time, answered in order.
let queue = Promise.resolve();
const lines = createInterface({ input: process.stdin });
lines.on('line', (line) => {
  queue = queue.then(async () => {
    try {
      const command = JSON.parse(line);
      const op = ops[command.op];
      if (!op) throw new Error(`unknown op ${JSON.stringify(command.op)}`);
      out({ ok: true, ...(await op(command)) });
    } catch (e) {
      out({ ok: false, error: String(e?.message ?? e) });
    }
  });
});
lines.on('close', () => queue.then(() => gh.stop()).then(() => process.exit(0)));
