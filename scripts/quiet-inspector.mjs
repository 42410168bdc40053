// Turns off the V8 inspector's Network domain of a worker under `wrangler dev` (see start_worker in
// scripts/lib.sh). wrangler's devtools proxy turns it on for every worker it runs and, while no
// DevTools window is attached, keeps every event and posts each one to wrangler's own process as a
// debug log: each subrequest (a fetch, a KV or D1 call) then costs about 2.5 ms of CPU in wrangler's
// processes, which a deployed worker never pays. A DevTools window that attaches later turns the
// domain on again for itself.
// Usage: node scripts/quiet-inspector.mjs INSPECTOR_PORT
// `ws` comes with wrangler (miniflare's dependency); Node 20 has no WebSocket of its own.
import WebSocket from 'ws';

const port = Number(process.argv[2]);
const [target] = await (await fetch(`http://127.0.0.1:${port}/json`)).json();
const ws = new WebSocket(target.webSocketDebuggerUrl.replace('localhost', '127.0.0.1'));
await new Promise((resolve, reject) => { ws.once('open', resolve); ws.once('error', reject); });
const answer = new Promise((resolve) => ws.on('message', (data) => {
  const message = JSON.parse(data);
  if (message.id === 1) resolve(message);
}));
ws.send(JSON.stringify({ id: 1, method: 'Network.disable' }));
// A proxy that never answers must not hold up the script that started wrangler.
const timeout = new Promise((resolve) => setTimeout(() => resolve({ error: { message: 'no answer in 10 s' } }), 10_000).unref());
const { error } = await Promise.race([answer, timeout]);
// terminate, not close: close waits up to 30 s for the proxy's close frame, which it never sends.
ws.terminate();
if (error) {
  console.error(`Network.disable: ${error.message}`);
  process.exit(1);
}
