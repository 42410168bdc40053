// Where a request's CPU goes in the worker's isolate (see scripts/profile): V8's sampling profiler,
// over the Chrome DevTools Protocol, while autocannon drives one scenario; then a counted pass of
// the same scenario: crossings between JavaScript and the wasm, bytes copied, allocations.
// Usage: node scripts/profile.mjs [--seconds N] [scenario…]   (scenarios: floor me cold proxy create replay)
// Environment: GATEHOUSE_URL, GATEHOUSE_ADMIN_TOKEN, GATEHOUSE_STATE, GATEHOUSE_INSPECTOR (the
// port of wrangler's inspector proxy), GATEHOUSE_PIDS ("name=pid …": processes whose CPU time
// is reported per request too). Writes $GATEHOUSE_STATE/<scenario>.cpuprofile (Chrome DevTools,
// Performance panel: load profile) and prints the breakdown.
import { writeFileSync, readFileSync } from 'node:fs';
// `ws` comes with wrangler (miniflare's dependency); undici's WebSocket fails wrangler's handshake.
import WebSocket from 'ws';
import { api, benchProject, coldKeys, coldScenario, cpuSeconds, processesOf, scenarios, drive, startBenchOrigin } from './load.mjs';

const args = process.argv.slice(2);
const at = args.indexOf('--seconds');
const SECONDS = at >= 0 ? Number(args.splice(at, 2)[1]) : 10;
const WANTED = args.length ? args : ['floor', 'me', 'cold', 'proxy', 'create', 'replay'];
const STATE = process.env.GATEHOUSE_STATE;
const INTERVAL_US = 100;

/** A minimal CDP client: send(method, params) answers the result; events are kept in `events`. */
async function connect(url) {
  const ws = new WebSocket(url);
  await new Promise((resolve, reject) => { ws.once('open', resolve); ws.once('error', reject); });
  let next = 1_000_000;
  const waiting = new Map();
  const events = [];
  ws.on('message', (data) => {
    const msg = JSON.parse(data);
    if (msg.method) events.push(msg);
    const w = waiting.get(msg.id);
    if (!w) return;
    waiting.delete(msg.id);
    msg.error ? w.reject(new Error(`${w.method}: ${msg.error.message}`)) : w.resolve(msg.result);
  });
  return {
    send: (method, params = {}) => new Promise((resolve, reject) => {
      const id = next++;
      waiting.set(id, { resolve, reject, method });
      ws.send(JSON.stringify({ id, method, params }));
    }),
    events,
    close: () => ws.close(),
  };
}

const PIDS = processesOf(process.env.GATEHOUSE_PIDS);
// The proxy scenario's origin (scripts/profile routes /bench/ to it), a process of its own.
if (WANTED.includes('proxy')) PIDS.push(['origin', await startBenchOrigin(process.env.GATEHOUSE_BENCH_ORIGIN_PORT)]);

// ---- Categories -------------------------------------------------------------------------------

/** Rust code by crate or module, from the demangled names of the wasm name section; first match. */
const RUST = [
  ['wasm: alloc (dlmalloc, Vec/String growth)', /dlmalloc|__rust_(alloc|dealloc|realloc)|__rdl_|alloc::alloc::|raw_vec|RawVec/],
  ['wasm: memcpy/memset/memcmp', /^(memcpy|memmove|memset|memcmp|bcmp)\b|compiler_builtins/],
  ['wasm: crypto (sha2/hmac/aes/hkdf)', /\b(sha2|hmac|aes|aes_gcm|hkdf|ghash|polyval|ctr|cipher|digest|universal_hash)::/],
  ['wasm: serde_json', /serde_json::/],
  ['wasm: serde (derived impls)', /\bserde::|__FieldVisitor|__Visitor/],
  ['wasm: core::fmt / to_string', /core::fmt|alloc::fmt|ToString|format!/],
  ['wasm: url/idna', /\b(url|idna|form_urlencoded|percent_encoding)::/],
  ['wasm: wasm_bindgen_futures', /wasm_bindgen_futures::/],
  ['wasm: wasm_bindgen', /wasm_bindgen::|__wbindgen|externref/],
  ['wasm: js_sys / web_sys', /\b(js_sys|web_sys)::/],
  ['wasm: worker:: (workers-rs)', /\bworker(_sys)?::/],
  ['wasm: the key guard (objects::key_guard, guard protocol)', /gatehouse_worker::objects::key_guard::|gatehouse_core::guard::|KeyGuardObject/],
  ['wasm: the event ledger (objects::event_ledger, ledger protocol)', /gatehouse_worker::objects::event_ledger::|gatehouse_core::ledger::|EventLedgerObject/],
  ['wasm: gatehouse_app', /gatehouse_app::/],
  ['wasm: gatehouse_core', /gatehouse_core::|gatehouse_wire::/],
  ['wasm: gatehouse_worker::adapters', /gatehouse_worker::adapters::/],
  ['wasm: gatehouse_worker (entry, http, other)', /gatehouse_worker::/],
  ['wasm: std/core/alloc (other)', /\b(core|alloc|std)::/],
];

/** The category of a sample's own frame. Native code and the JS glue count as logging or as the
 *  queue send when the nearest Rust frame below them is `console.log` or `Queue::send`. */
function category(frame, rustCaller) {
  const { functionName: name, url } = frame;
  if (name === '(idle)') return 'idle';
  if (name === '(garbage collector)') return 'GC';
  if (name === '(program)') return '(program)';
  if (/^(js-to-wasm|wasm-to-js)/.test(name)) return 'JS↔wasm boundary (js-to-wasm, wasm-to-js)';
  if (url.startsWith('wasm://')) return (RUST.find(([, re]) => re.test(name)) ?? ['wasm: other'])[0];
  if (/console/.test(rustCaller)) return 'console.log (glue + native + inspect)';
  if (/Queue::send/.test(rustCaller)) return 'queue send (glue + native)';
  if (!url) return /^(parse|stringify)$/.test(name) ? 'JSON.parse/stringify (native)' : 'runtime/native (Response, fetch, SQL exec, …)';
  if (/^(index|main)\.js$/.test(url)) return 'JS glue (wasm-bindgen, the bundle)';
  return `JS: ${url.replace(/^.*\//, '')}`;
}

/** Where the time under a frame goes, whatever its own category (a sample counts once). */
const CENTRES = [
  ['console.log of the request line (web_sys console)', /gen_console::console::log/],
  ['queue send (worker::Queue::send, send_batch)', /worker::queue::Queue::send/],
  ['Response construction (worker::Response → JS)', /worker::response::.*From<worker::response::Response/],
  ['serde_json (anywhere)', /serde_json::/],
  ['serde_wasm_bindgen (Rust ↔ JS values)', /serde_wasm_bindgen::/],
  ['crypto (sha2/hmac/aes/hkdf)', /\b(sha2|hmac|aes|aes_gcm|hkdf|ghash|polyval)::/],
  ['allocation (dlmalloc)', /dlmalloc|__rust_(alloc|dealloc|realloc)|__rdl_/],
  ['guard Durable Object code (gatehouse_worker::objects::key_guard)', /gatehouse_worker::objects::key_guard|KeyGuardObject/],
  ['DO SQLite (worker::sql::SqlStorage::exec)', /SqlStorage::exec/],
  ['D1 (cloudflare-internal:d1-api)', /d1-api/],
  ['GC', /^\(garbage collector\)$/],
];

// ---- Analysis ---------------------------------------------------------------------------------

const clean = (name) => name.replace(/::h[0-9a-f]{16}\b/g, '');

/** The sources of the isolate's scripts, by id: the bundle's minifier leaves the glue's import
 *  functions anonymous, but each follows its key (`__wbg_log_…: function(e) {`). */
const SOURCES = new Map();
const TEXTS = new Map();
async function loadSources(cdp) {
  await cdp.send('Debugger.enable');
  const bundles = () => cdp.events.filter((e) => e.method === 'Debugger.scriptParsed' && /(^|\/)(index|main)\.js$/.test(e.params.url));
  // wrangler's proxy sends the scripts after its answer.
  for (let i = 0; i < 50 && !bundles().length; i++) await new Promise((r) => setTimeout(r, 100));
  for (const { params } of bundles()) {
    const text = (await cdp.send('Debugger.getScriptSource', { scriptId: params.scriptId })).scriptSource;
    TEXTS.set(params.scriptId, text);
    SOURCES.set(params.scriptId, text.split('\n'));
  }
  await cdp.send('Debugger.disable');
}
function glueName(f) {
  const before = SOURCES.get(f.scriptId)?.[f.lineNumber]?.slice(0, f.columnNumber) ?? '';
  return before.match(/([\w$]+)\s*[:=]\s*(\/\*[^*]*\*\/\s*)?(__name\()?\s*(async\s*)?(function\s*)?$/)?.[1] ?? '(anonymous)';
}

function analyse(profile, requests) {
  const nodes = new Map(profile.nodes.map((n) => [n.id, n]));
  const parent = new Map();
  for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const { samples, timeDeltas } = profile;
  // A sample stands for the time until the next one.
  const dt = samples.map((_, i) => (i + 1 < timeDeltas.length ? timeDeltas[i + 1] : INTERVAL_US));
  const total = dt.reduce((a, b) => a + b, 0);
  const cats = new Map(), centres = new Map(), self = new Map(), inclusive = new Map(), crossings = new Map();
  const add = (m, k, v) => m.set(k, (m.get(k) ?? 0) + v);
  const kindOf = frameKinds();
  const fnKey = (f) => (f.url.startsWith('wasm://') ? clean(f.functionName)
    : `${f.functionName || (f.url ? glueName(f) : '(anonymous)')} [${f.url ? `${f.url.replace(/^.*\//, '')}:${f.lineNumber + 1}` : 'native'}]`);
  for (let i = 0; i < samples.length; i++) {
    const stack = [];
    for (let id = samples[i]; id !== undefined; id = parent.get(id)) stack.push(nodes.get(id).callFrame);
    const rust = stack.find((f) => f.url.startsWith('wasm://') && !/^(js-to-wasm|wasm-to-js)/.test(f.functionName));
    add(cats, category(stack[0], rust?.functionName ?? ''), dt[i]);
    add(self, fnKey(stack[0]), dt[i]);
    for (const k of new Set(stack.map(fnKey))) if (k !== '(root) [native]') add(inclusive, k, dt[i]);
    for (const [centre, re] of CENTRES) if (stack.some((f) => re.test(f.functionName) || re.test(f.url))) add(centres, centre, dt[i]);
    // From the top: JavaScript and native frames up to the first Rust frame are a crossing's, the
    // kind of the nearest glue function that is one.
    const rustAt = stack.findIndex((f) => f.url.startsWith('wasm://'));
    const kind = stack.slice(0, rustAt < 0 ? stack.length : rustAt).map(kindOf).find(Boolean);
    if (kind) add(crossings, kind, dt[i]);
  }
  return { total, requests, cats, centres, self, inclusive, crossings };
}

const pad = (v, n) => String(v).padEnd(n);
const lpad = (v, n) => String(v).padStart(n);

function table(title, map, { total, requests }, limit = Infinity) {
  console.log(`\n${title}\n${pad('', 62)}${lpad('% time', 8)}${lpad('µs/req', 9)}`);
  [...map].sort((a, b) => b[1] - a[1]).slice(0, limit).forEach(([k, us]) => {
    console.log(`${pad(k.length > 60 ? `${k.slice(0, 59)}…` : k, 62)}${lpad((100 * us / total).toFixed(1), 8)}${lpad((us / requests).toFixed(1), 9)}`);
  });
}

// ---- Crossings --------------------------------------------------------------------------------

/** What a call into the runtime (an import of the wasm, by its wasm-bindgen name) is for. */
const IMPORT_KINDS = [
  ['reading the request head', /^(requestHead|allHeaders|url|method|headers|body|cf)$/],
  ['building the response', /^respond$/],
  ['futures: promise, then, microtask', /^(queueMicrotask|then|resolve|new_typed|call|waitUntil)$/],
  ['timer (setTimeout)', /^(setTimeout|clearTimeout)$/],
  ['queue send', /^(send|sendBatch)$/],
  ['Durable Object (stub, RPC)', /^(ask|idFromName|get_stub|getByName|get|fetch)$/],
  ['KV, D1, SQLite, R2', /^(put|prepare|bind|run|all|first|batch|exec|toArray|results|list|delete|head|sql|storage)$/],
  ['console', /^(log|error|warn)$/],
];

/** A crossing's kind, from the name of the import or export it goes through. */
function importKind(name) {
  const base = name.replace(/^__wbg_/, '').replace(/_[0-9a-f]{16}$/, '');
  const found = IMPORT_KINDS.find(([, re]) => re.test(base));
  return [`wasm→JS: ${found ? found[0] : 'other'}`, base];
}
function exportKind(name) {
  if (/^(fetch|queue|scheduled)$/.test(name)) return ['JS→wasm: entering the handler', name];
  if (/invoke/.test(name)) return ['JS→wasm: a closure (a future woken, a callback)', name.replace(/__h[0-9a-f]{16}$/, '')];
  if (/^__wbindgen_(malloc|realloc|free)$|^__externref/.test(name)) return ['JS→wasm: memory for a copy (malloc, free, externref table)', name];
  return [`JS→wasm: ${/object_/.test(name) ? 'a Durable Object method' : 'other'}`, name];
}

/** A function of the bundle, by its name and text → its crossing kind, or undefined when it is
 *  plain JavaScript (for the sampled times: wasm-bindgen's wrappers call `<exports>.<name>(`). */
function crossing(name, text, exportsVar) {
  if (/^__wbg_|^__wbindgen_/.test(name)) return importKind(name);
  const call = text.match(new RegExp(`(?<![\\w$.])${exportsVar.replace('$', '\\$')}\\.([\\w$]+)\\(`))?.[1];
  return call && !/^__wbindgen_(malloc|realloc|free)$/.test(call) ? exportKind(call) : undefined;
}

/** The wasm's allocations so far (the profile build's `wasm-alloc` in Server-Timing). */
async function allocations() {
  const res = await fetch(`${process.env.GATEHOUSE_URL}/health`);
  await res.arrayBuffer();
  const found = /wasm-alloc;desc="(\d+) (\d+)"/.exec(res.headers.get('server-timing') ?? '');
  return found ? { count: Number(found[1]), bytes: Number(found[2]) } : undefined;
}

/** A second, shorter pass over a scenario: the profile build's counters before and after, per
 *  request — every call through an import or an export of the wasm and the bytes copied
 *  (scripts/profile-glue.mjs, answered on GET /__profile/crossings), the wasm's allocations
 *  (crates/gatehouse-worker/src/profile.rs, in Server-Timing). */
async function countCrossings(s) {
  const read = async () => (await fetch(`${process.env.GATEHOUSE_URL}/__profile/crossings`)).json().catch(() => null);
  const [before, alloc0] = [await read(), await allocations()];
  if (!before) throw new Error('the worker counts no crossings: is it the profile build (GATEHOUSE_PROFILE=1 scripts/build)?');
  const r = await drive(s, Math.min(SECONDS, 5));
  const [after, alloc1] = [await read(), await allocations()];
  const requests = r.requests.total;
  const kinds = new Map(), each = new Map();
  const add = (m, k, v) => m.set(k, (m.get(k) ?? 0) + v);
  for (const [side, kindOf] of [['imports', importKind], ['exports', exportKind]]) {
    for (const [name, n] of Object.entries(after[side])) {
      const calls = n - (before[side][name] ?? 0);
      if (!calls) continue;
      const [kind, short] = kindOf(name);
      add(kinds, kind, calls);
      add(each, `${short} (${kind.split(':')[0]})`, calls);
    }
  }
  const per = (n) => (n / requests).toFixed(2);
  console.log(`\ncrossings per request (counted over ${requests} requests; the Durable Objects' own included)`);
  let total = 0;
  for (const [k, n] of [...kinds].sort((a, b) => b[1] - a[1])) { console.log(`${pad(k, 62)}${lpad(per(n), 9)}`); total += n; }
  console.log(`${pad('all crossings', 62)}${lpad(per(total), 9)}`);
  console.log('\nthe calls behind them, per request');
  for (const [k, n] of [...each].sort((a, b) => b[1] - a[1]).slice(0, 25)) console.log(`${pad(k.length > 60 ? `${k.slice(0, 59)}…` : k, 62)}${lpad(per(n), 9)}`);
  const copied = {
    into_wasm: (after.bytesIn - before.bytesIn) / requests,
    strings_out: (after.stringBytesOut - before.stringBytesOut) / requests,
    bodies_out: (after.bodyBytesOut - before.bodyBytesOut) / requests,
  };
  console.log(`bytes copied per request: into the wasm ${copied.into_wasm.toFixed(0)}, strings out of it `
    + `${copied.strings_out.toFixed(0)}, response bodies out of it ${copied.bodies_out.toFixed(0)}`);
  const alloc = alloc0 && alloc1 ? { count: (alloc1.count - alloc0.count) / requests, bytes: (alloc1.bytes - alloc0.bytes) / requests } : undefined;
  if (alloc) console.log(`wasm allocations per request: ${alloc.count.toFixed(1)} (${alloc.bytes.toFixed(0)} bytes)`);
  return { crossings: total / requests, copied, alloc, kinds: Object.fromEntries([...kinds].map(([k, n]) => [k, n / requests])) };
}

/** A frame of the bundle → its crossing kind (undefined for plain JavaScript and other scripts). */
function frameKinds() {
  const [scriptId, text] = [...TEXTS][0] ?? [];
  if (!text) return () => undefined;
  const exportsVar = text.match(/([\w$]+)=([\w$]+)\.exports[;,]/)?.[1] ?? 'i';
  const lineStarts = [0];
  for (let i = text.indexOf('\n'); i >= 0; i = text.indexOf('\n', i + 1)) lineStarts.push(i + 1);
  const known = new Map();
  return (f) => {
    if (f.scriptId !== scriptId) return undefined;
    const key = `${f.lineNumber}:${f.columnNumber}`;
    if (!known.has(key)) {
      const start = lineStarts[f.lineNumber] + f.columnNumber;
      // The function's text: to its matching close brace, near enough for the patterns.
      known.set(key, crossing(f.functionName || glueName(f), text.slice(start, start + 800), exportsVar)?.[0]);
    }
    return known.get(key);
  };
}

// ---- Run --------------------------------------------------------------------------------------

const targets = await (await fetch(`http://127.0.0.1:${process.env.GATEHOUSE_INSPECTOR}/json`)).json();
console.log(`inspector targets: ${targets.map((t) => `${t.title} (${t.webSocketDebuggerUrl})`).join(', ')}`);
const cdp = await connect(targets[0].webSocketDebuggerUrl.replace('localhost', '127.0.0.1'));
await loadSources(cdp);
await cdp.send('Profiler.enable');
await cdp.send('Profiler.setSamplingInterval', { interval: INTERVAL_US });

const bench = await benchProject();
const all = scenarios(bench);
const summary = [];
for (const key of WANTED) {
  if (key === 'cold') {
    // Made now: their guards' first alarms come some seconds later and would land in another scenario.
    const make = async () => (await api('POST', '/public/v1/keys', { key: bench.owner.key, body: { type: 'server' } })).body.key;
    all.cold = coldScenario(await coldKeys(make, process.env.GATEHOUSE_URL, 200));
  }
  const s = all[key];
  if (!s) throw new Error(`unknown scenario ${key} (one of ${Object.keys(all).join(', ')})`);
  await drive(s, 2); // warm-up: the wasm tiers up before it is measured
  const cpu0 = PIDS.map(([, pid]) => cpuSeconds(pid));
  await cdp.send('Profiler.start');
  const r = await drive(s, SECONDS);
  const { profile } = await cdp.send('Profiler.stop');
  const cpu = PIDS.map(([, pid], i) => cpuSeconds(pid) - cpu0[i]);
  const file = `${STATE}/${key}.cpuprofile`;
  writeFileSync(file, JSON.stringify(profile));
  const requests = r.requests.total;
  const a = analyse(profile, requests);
  const busy = a.total - (a.cats.get('idle') ?? 0) - (a.cats.get('(program)') ?? 0);
  console.log(`\n==== ${s.name}: ${requests} requests in ${SECONDS} s (${(requests / SECONDS).toFixed(0)} req/s, `
    + `${r.non2xx + r.errors + r.timeouts} unexpected); profile ${file}`);
  console.log(`profiled ${(a.total / 1e6).toFixed(2)} s, ${profile.samples.length} samples; isolate busy (not idle, not (program)) `
    + `${(busy / requests).toFixed(0)} µs/req`);
  if (PIDS.length) console.log(`process CPU per request: ${PIDS.map(([name], i) => `${name} ${(1e6 * cpu[i] / requests).toFixed(0)} µs`).join(', ')}`);
  table('self time by category', a.cats, a);
  table('cost centres: time with such a frame anywhere on the stack (inclusive; they overlap)', a.centres, a);
  table('top 25 functions by self time', a.self, a, 25);
  table('top 15 functions by total (inclusive) time', a.inclusive, a, 15);
  table('time under each crossing kind (the glue frame nearest the top decides)', a.crossings, a);
  const counted = await countCrossings(s);
  summary.push({ key, requests, busy: busy / requests, cpu, ...counted, crossing_us: Object.fromEntries([...a.crossings].map(([k, us]) => [k, us / requests])) });
}

console.log(`\n${pad('scenario', 10)}${lpad('req', 8)}${lpad('isolate busy µs/req', 21)}${lpad('crossings', 11)}${lpad('allocs', 9)}${PIDS.map(([n]) => lpad(`${n} µs/req`, 18)).join('')}`);
for (const x of summary) {
  console.log(`${pad(x.key, 10)}${lpad(x.requests, 8)}${lpad(x.busy.toFixed(0), 21)}${lpad(x.crossings.toFixed(1), 11)}${lpad(x.alloc ? x.alloc.count.toFixed(0) : '-', 9)}`
    + `${x.cpu.map((c) => lpad((1e6 * c / x.requests).toFixed(0), 18)).join('')}`);
}
writeFileSync(`${STATE}/profile.json`, JSON.stringify(summary, null, 2));
cdp.close();
process.exit(0);
