// The profile build's crossing counter (scripts/build with GATEHOUSE_PROFILE=1; never deployed):
// rewrites build/index.js so that every function the wasm imports from JavaScript and every
// function it exports to JavaScript is called through a counter, kept in
// `globalThis.__profileCrossings`, which the worker answers as JSON on `GET /__profile/crossings`
// (in JavaScript: that request crosses nothing; workerd's inspector has no execution context to
// evaluate in, so scripts/profile.mjs asks over HTTP). Also counted:
// bytes written into the wasm memory by JavaScript (the sizes it asks `__wbindgen_malloc` and
// `__wbindgen_realloc` for), strings decoded out of it (TextDecoder) and response bodies handed
// out of it (`respond`'s body length).
// Usage: node scripts/profile-glue.mjs build/index.js
import { readFileSync, writeFileSync } from 'node:fs';

const file = process.argv[2];
let text = readFileSync(file, 'utf8');
const MARK = '/* profile: crossings counted */';
if (text.startsWith(MARK)) process.exit(0);

const PRELUDE = `${MARK}
const __profile = globalThis.__profileCrossings = { imports: {}, exports: {}, bytesIn: 0, stringBytesOut: 0, bodyBytesOut: 0 };
{
  const decode = TextDecoder.prototype.decode;
  TextDecoder.prototype.decode = function (v, o) { __profile.stringBytesOut += v ? v.byteLength : 0; return decode.call(this, v, o); };
}
function __profileImports(imports) {
  const counted = {};
  for (const [key, module] of Object.entries(imports)) {
    counted[key] = {};
    for (const [name, f] of Object.entries(module)) {
      if (typeof f !== 'function') { counted[key][name] = f; continue; }
      const body = /^__wbg_respond_/.test(name) ? 4 : -1;
      counted[key][name] = function (...args) {
        __profile.imports[name] = (__profile.imports[name] ?? 0) + 1;
        if (body >= 0 && !args[5]) __profile.bodyBytesOut += args[body] >>> 0;
        return f.apply(this, args);
      };
    }
  }
  return counted;
}
function __profileExports(exports) {
  const counted = {};
  for (const [name, f] of Object.entries(exports)) {
    if (typeof f !== 'function') { counted[name] = f; continue; }
    const size = name === '__wbindgen_malloc' ? 0 : name === '__wbindgen_realloc' ? 2 : -1;
    counted[name] = function (...args) {
      __profile.exports[name] = (__profile.exports[name] ?? 0) + 1;
      if (size >= 0) __profile.bytesIn += (args[size] >>> 0) - (size === 2 ? args[1] >>> 0 : 0);
      return f.apply(this, args);
    };
  }
  return counted;
}
`;

const INSTANCE = /([\w$]+)=new WebAssembly\.Instance\(([\w$]+),([\w$]+)\(\)\),([\w$]+)=\1\.exports/g;
let found = 0;
text = text.replace(INSTANCE, (_, inst, module, imports, exports) => {
  found++;
  return `${inst}=new WebAssembly.Instance(${module},__profileImports(${imports}())),${exports}=__profileExports(${inst}.exports)`;
});
if (!found) throw new Error(`${file}: no wasm instantiation found to count (wasm-bindgen's output changed?)`);
// The counters' route, on the default export's fetch.
const EXPORT = /export\{([^}]*\b([\w$]+) as default[^}]*)\}/;
const exported = EXPORT.exec(text);
if (!exported) throw new Error(`${file}: no default export found`);
text = text.replace(EXPORT, (all) => `{const p=${exported[2]}.prototype,f=p.fetch;p.fetch=function(r){`
  + `return r.url.endsWith('/__profile/crossings')?new Response(JSON.stringify(__profile)):f.apply(this,arguments)}}${all}`);
// After the imports: a module's import declarations stay first.
const lastImport = [...text.matchAll(/import\s*(?:[\w${},\s*]+from\s*)?"[^"]+";/g)].pop();
const at = lastImport ? lastImport.index + lastImport[0].length : 0;
writeFileSync(file, `${MARK}\n${text.slice(0, at)}\n${PRELUDE}\n${text.slice(at)}`);
console.log(`counting the crossings of ${found} wasm instantiation(s) in ${file}`);
