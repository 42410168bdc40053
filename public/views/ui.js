// The dashboard's shared parts: the API call under the owner key, DOM helpers that never parse
// text as HTML, the page's own ask and confirm, times shown in UTC and the browser's zone, and a
// live paged table.
export const $ = (id) => document.getElementById(id);
/** The signed-in owner key (sessionStorage keeps it for the tab's life, never localStorage). */
export const session = { key: null };

/**
 * A call to the API; throws an Error with the API's message on a non-2xx answer. A read (no
 * `method`) is counted under the dashboard's own budget (Gatehouse-Budget: dashboard), never in the
 * owner key's API window; a change (POST, PATCH, DELETE) counts in the window like any other call.
 */
export async function api(path, options = {}) {
  const budget = options.method === undefined ? { 'gatehouse-budget': 'dashboard' } : {};
  const headers = { authorization: `Bearer ${session.key}`, ...budget, ...(options.headers ?? {}) };
  const res = await fetch(path, { ...options, headers });
  const body = await res.json().catch(() => ({}));
  if (!res.ok) {
    const e = new Error(body.error?.message ?? `HTTP ${res.status}`);
    e.status = res.status;
    throw e;
  }
  return body;
}

/** A table cell or row from text only: nothing from the API is ever parsed as HTML. */
export function cell(text, className) {
  const td = document.createElement('td');
  td.textContent = text ?? '—';
  if (className) td.className = className;
  return td;
}
export function row(...cells) {
  const tr = document.createElement('tr');
  tr.append(...cells);
  return tr;
}
export function button(label, onClick) {
  const b = document.createElement('button');
  b.type = 'button';
  b.textContent = label;
  b.addEventListener('click', onClick);
  return b;
}
/** A time in the browser's zone. */
export const when = (iso) => (iso ? new Date(iso).toLocaleString() : '—');
/** A time as UTC and in the browser's zone, side by side (a log row's detail). */
export const bothZones = (iso) => (iso ? `${iso} (UTC) · ${new Date(iso).toLocaleString()} (${Intl.DateTimeFormat().resolvedOptions().timeZone})` : '—');

/** A new key or signing secret, shown once in the page until dismissed (never stored). */
export function showOnce(title, secret, note) {
  $('shown-title').textContent = title;
  $('shown-secret').textContent = secret;
  $('shown-note').textContent = note ?? '';
  $('shown-once').hidden = false;
}
$('shown-dismiss').addEventListener('click', () => {
  $('shown-secret').textContent = '';
  $('shown-once').hidden = true;
});

/**
 * Asks for one value in the page's own form (never a `prompt()` box): resolves with what was
 * entered, or null when cancelled. `type` is an <input> type; a datetime-local answers RFC 3339.
 */
export function ask(label, { type = 'number', value = '', min, max } = {}) {
  const form = $('ask');
  const input = $('ask-input');
  $('ask-label').textContent = label;
  input.type = type;
  input.value = value;
  if (min !== undefined) input.min = String(min); else input.removeAttribute('min');
  if (max !== undefined) input.max = String(max); else input.removeAttribute('max');
  form.hidden = false;
  input.focus();
  return new Promise((resolve) => {
    const done = (answer) => {
      form.hidden = true;
      form.onsubmit = null;
      $('ask-cancel').onclick = null;
      resolve(answer);
    };
    form.onsubmit = (event) => {
      event.preventDefault();
      done(type === 'datetime-local' ? isoOf(input.value) : input.value);
    };
    $('ask-cancel').onclick = () => done(null);
  });
}

/** A button that acts on its second click only (the first asks to confirm), instead of confirm(). */
export function confirming(label, confirmLabel, onConfirm) {
  const b = button(label, async () => {
    if (b.dataset.armed !== 'true') {
      b.dataset.armed = 'true';
      b.textContent = confirmLabel;
      return;
    }
    await onConfirm();
  });
  return b;
}

/** A JSON POST (or PATCH) to the API. */
export const send = (path, body, method = 'POST') =>
  api(path, { method, headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
export const statusClass = (status) => `status-${String(status)[0]}`;
export function showError(e) {
  $('app-error').textContent = e ? `${e.message}` : '';
}

/** An <input type=datetime-local> value as RFC 3339 (local time, as the owner typed it). */
export const isoOf = (local) => (local ? new Date(local).toISOString() : null);
/** RFC 3339 as an <input type=datetime-local> value, in local time. */
export function localOf(iso) {
  if (!iso) return '';
  const d = new Date(iso);
  return new Date(d.getTime() - d.getTimezoneOffset() * 60_000).toISOString().slice(0, 16);
}

// ---- live, paged tables (the request log, the events) --------------------------------------
/**
 * A table of a list route's answers, newest first: `load(true)` shows its first page, `load(false)`
 * adds the next below; with the `live` box checked, every `everyMs` the items from the newest shown
 * on go on top. Each item is shown once (`id`); `at` is its time, `row` its table row.
 */
export function liveTable({ path, params, body, more, live, panel, everyMs, id, at, row: toRow }) {
  let cursor = null;
  let shown = new Set();
  const rows = (data) => data.filter((item) => !shown.has(id(item))).map((item) => {
    shown.add(id(item));
    const tr = toRow(item);
    tr.dataset.at = at(item);
    return tr;
  });
  async function load(fresh) {
    const query = params();
    if (!fresh && cursor) query.set('cursor', cursor);
    const page = await api(`${path}?${query}`);
    cursor = page.next_cursor;
    if (fresh) shown = new Set();
    if (fresh) $(body).replaceChildren(...rows(page.data)); else $(body).append(...rows(page.data));
    $(more).hidden = !cursor;
  }
  async function tail() {
    if ($(panel).hidden) return;
    const query = params();
    const newest = $(body).querySelector('tr')?.dataset.at;
    if (newest) query.set('from', newest);
    $(body).prepend(...rows((await api(`${path}?${query}`)).data));
  }
  let timer = null;
  $(more).addEventListener('click', () => load(false).catch(showError));
  $(live).addEventListener('change', () => {
    clearInterval(timer);
    timer = $(live).checked ? setInterval(() => tail().catch(showError), everyMs) : null;
  });
  return load;
}


// Narrow screens (≤ 640 px, dashboard.css) show each table row as a card: every cell is labelled
// with its column's heading, copied here as rows arrive.
new MutationObserver((changes) => {
  for (const { target } of changes) {
    if (target.tagName !== 'TBODY') continue;
    const headings = [...(target.closest('table')?.querySelectorAll('thead th') ?? [])].map((th) => th.textContent);
    for (const tr of target.children) {
      [...tr.children].forEach((td, i) => { if (headings[i]) td.dataset.label = headings[i]; });
    }
  }
}).observe(document.body, { childList: true, subtree: true });
