// Seeds a demo project through the public API of a running gateway and prints its keys.
// Keys are shown once by the API, so they are kept in KEYS_FILE and printed again on later runs
// against the same state. The file is outside the state folder (SPEC §13: the state holds no key
// in plaintext, so a copy of it opens nothing), beside .dev.vars, readable by its owner only.
// Usage: node scripts/seed-demo.mjs URL ADMIN_TOKEN KEYS_FILE
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { created } from '../testing/created.mjs';

const [base, adminToken, file] = process.argv.slice(2);

const post = (path, token, body) => created(base, path, token, body);

async function stillValid(keys) {
  const res = await fetch(base + '/public/v1/me', { headers: { authorization: `Bearer ${keys.owner}` } });
  return res.status === 200;
}

let demo = existsSync(file) ? JSON.parse(readFileSync(file, 'utf8')) : null;
if (!demo || !(await stillValid(demo.keys))) {
  const project = await post('/admin/v1/projects', adminToken, { name: 'Demo project' });
  const keys = { owner: project.owner_key.key };
  for (const type of ['server', 'browser', 'cicd']) {
    keys[type] = (await post('/public/v1/keys', keys.owner, { type, name: `demo ${type}` })).key;
  }
  demo = { project_id: project.project_id, keys };
  writeFileSync(file, JSON.stringify(demo, null, 2), { mode: 0o600 });
}

// scripts/dev --demo-origin: a subscription to the demo origin's receiver for its order events.
const demoOrigin = process.env.DEMO_ORIGIN;
if (demoOrigin) {
  const url = `${demoOrigin}/webhook`;
  const list = await fetch(base + '/public/v1/webhooks', { headers: { authorization: `Bearer ${demo.keys.owner}` } });
  const subscribed = (await list.json()).data?.some((w) => w.url === url);
  if (!subscribed) await post('/public/v1/webhooks', demo.keys.owner, { url, events: ['order.created'] });
}

console.log(`\nDemo project ${demo.project_id} (keys kept in ${file}):\n`);
for (const [type, key] of Object.entries(demo.keys)) console.log(`  ${type.padEnd(8)} ${key}`);
// The README's tour starts from this line: every command there follows these variables.
const exports = [`GH=${base}`, ...(demoOrigin ? [`DEMO=${demoOrigin}`] : []), `OWNER=${demo.keys.owner}`];
console.log(`\nFor the README's tour, in your shell:\n  export ${exports.join(' ')}`);
console.log(`\nTry it:\n  curl -s ${base}/public/v1/me -H "Authorization: Bearer ${demo.keys.server}"\n`);
if (demoOrigin) {
  console.log(`Proxy mode: /shop/v1/ goes to the demo origin at ${demoOrigin}. Place an order through the gateway:
  curl -si -X POST ${base}/shop/v1/orders -H "Authorization: Bearer ${demo.keys.server}" \\
       -H "Idempotency-Key: demo-order-1" -H "Content-Type: application/json" -d '{"sku":"tea","qty":2}'
Send it again: the same order comes back (Idempotent-Replayed: 1) and the origin is not called twice.
Its log row, by the X-Request-Id the answer carried (rows arrive within a second or two):
  curl -s ${base}/public/v1/logs/<X-Request-Id> -H "Authorization: Bearer ${demo.keys.owner}"
The order.created webhook is printed above by the demo origin ("[demo origin] webhook received").
`);
}
