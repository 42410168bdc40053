#!/usr/bin/env node
// Checks every relative link and image in the documentation: README.md, docs/**/*.md and
// crates/*/README.md. A link resolves when its file (or folder) exists relative to the linking
// file, inside the repository; a `#fragment` into a Markdown file (or `#fragment` alone, into the
// linking file) must name a heading there by its GitHub slug. http(s): and mailto: links are not
// checked. Exits 1 listing every broken link as `file:line → target`, 0 printing the count.
//
//   node scripts/check-links.mjs
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');

/** The Markdown files to check, as paths relative to the repository. */
function documents() {
  const found = [];
  if (existsSync(join(root, 'README.md'))) found.push('README.md');
  const walk = (dir) => {
    for (const entry of readdirSync(join(root, dir), { withFileTypes: true })) {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) walk(path);
      else if (entry.name.endsWith('.md')) found.push(path);
    }
  };
  if (existsSync(join(root, 'docs'))) walk('docs');
  if (existsSync(join(root, 'crates'))) {
    for (const crate of readdirSync(join(root, 'crates'), { withFileTypes: true })) {
      const readme = join('crates', crate.name, 'README.md');
      if (crate.isDirectory() && existsSync(join(root, readme))) found.push(readme);
    }
  }
  return found.sort();
}

/** The lines of `text` with fenced code blocks blanked (line numbers kept). */
function withoutFences(text) {
  const lines = text.split('\n');
  let fence = null;
  return lines.map((line) => {
    const open = line.match(/^ {0,3}(`{3,}|~{3,})/);
    if (fence) {
      if (open && open[1][0] === fence[0] && open[1].length >= fence.length && line.trim() === open[1]) fence = null;
      return '';
    }
    if (open) {
      fence = open[1];
      return '';
    }
    return line;
  });
}

/** `line` with its inline code spans blanked (so a link written as code is not a link). */
function withoutCodeSpans(line) {
  return line.replace(/(`+)[\s\S]*?\1/g, (span) => ' '.repeat(span.length));
}

/** GitHub's anchor for a heading's text (github-slugger), before duplicates are numbered. */
function slug(heading) {
  const text = heading
    .replace(/!?\[([^\]]*)\]\([^)]*\)/g, '$1') // a link or image: its text
    .replace(/<[^>]+>/g, '') // inline HTML
    .replace(/`/g, '')
    .replace(/\*+/g, '')
    .trim()
    .toLowerCase();
  return text.replace(/[^\p{L}\p{M}\p{N}\p{Pc} -]/gu, '').replace(/ /g, '-');
}

const anchorCache = new Map();

/** Every anchor a Markdown file offers: its headings' slugs (numbered when repeated) and explicit
 *  `<a id>`/`<a name>` anchors. */
function anchors(file) {
  if (anchorCache.has(file)) return anchorCache.get(file);
  const lines = withoutFences(readFileSync(file, 'utf8'));
  const seen = new Map();
  const found = new Set();
  const add = (base) => {
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    found.add(n === 0 ? base : `${base}-${n}`);
  };
  lines.forEach((line, i) => {
    const atx = line.match(/^ {0,3}#{1,6}\s+(.*?)(?:\s+#+)?\s*$/);
    if (atx) add(slug(atx[1]));
    else if (/^ {0,3}(=+|-+)\s*$/.test(line) && i > 0 && /\S/.test(lines[i - 1]) && !/^\s*([|>*+-]|\d+\.)/.test(lines[i - 1])) {
      add(slug(lines[i - 1]));
    }
    for (const m of line.matchAll(/<a\s+(?:[^>]*\s)?(?:id|name)="([^"]+)"/g)) found.add(m[1]);
  });
  anchorCache.set(file, found);
  return found;
}

/** Every link and image target of a file, with its line number. */
function links(file) {
  const out = [];
  const lines = withoutFences(readFileSync(file, 'utf8'));
  lines.forEach((raw, i) => {
    const line = withoutCodeSpans(raw);
    const inline = /!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*(<[^>]*>|[^\s)]+)(?:\s+(?:"[^"]*"|'[^']*'))?\s*\)/g;
    for (const m of line.matchAll(inline)) out.push({ line: i + 1, target: m[1].replace(/^<|>$/g, '') });
    const definition = line.match(/^ {0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)/);
    if (definition) out.push({ line: i + 1, target: definition[1].replace(/^<|>$/g, '') });
  });
  return out;
}

/** Why `target`, linked from `file`, does not resolve; null when it does. */
function broken(file, target) {
  if (/^(https?:|mailto:)/i.test(target)) return null;
  if (/^[a-z][a-z0-9+.-]*:/i.test(target)) return 'not a relative link';
  const hash = target.indexOf('#');
  const pathPart = hash < 0 ? target : target.slice(0, hash);
  const fragment = hash < 0 ? null : decodeURIComponent(target.slice(hash + 1));
  let path;
  try {
    path = decodeURIComponent(pathPart.split('?')[0]);
  } catch {
    return 'malformed percent-encoding';
  }
  if (path.startsWith('/')) return 'absolute path (use a path relative to the linking file)';
  const resolved = path === '' ? resolve(root, file) : resolve(root, dirname(file), path);
  const inside = relative(root, resolved);
  if (inside.startsWith('..') || inside.split(sep)[0] === '..') return 'outside the repository';
  if (!existsSync(resolved)) return 'no such file';
  if (fragment !== null && fragment !== '') {
    if (statSync(resolved).isDirectory() || !resolved.endsWith('.md')) return null;
    if (!anchors(resolved).has(fragment)) return `no heading #${fragment}`;
  }
  return null;
}

const problems = [];
let checked = 0;
for (const file of documents()) {
  for (const { line, target } of links(join(root, file))) {
    if (/^(https?:|mailto:)/i.test(target)) continue;
    checked += 1;
    const why = broken(file, target);
    if (why) problems.push(`${file}:${line} → ${target} (${why})`);
  }
}

if (problems.length > 0) {
  console.error(`${problems.length} broken link(s):`);
  for (const p of problems) console.error(`  ${p}`);
  process.exit(1);
}
console.log(`documentation links: ${checked} relative link(s) checked, all resolve`);
