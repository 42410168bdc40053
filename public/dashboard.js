// Gatehouse owner dashboard: plain DOM over the public API with the owner key from sessionStorage.
const STORAGE = 'gatehouse.ownerKey';
const $ = (id) => document.getElementById(id);
let key = sessionStorage.getItem(STORAGE);
let chart;

/**
 * A call to the API; throws an Error with the API's message on a non-2xx answer. A read (no
 * `method`) is counted under the dashboard's own budget (Gatehouse-Budget: dashboard), never in the
 * owner key's API window; a change (POST, PATCH, DELETE) counts in the window like any other call.
 */
async function api(path, options = {}) {
  const budget = options.method === undefined ? { 'gatehouse-budget': 'dashboard' } : {};
  const headers = { authorization: `Bearer ${key}`, ...budget, ...(options.headers ?? {}) };
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
function cell(text, className) {
  const td = document.createElement('td');
  td.textContent = text ?? '—';
  if (className) td.className = className;
  return td;
}
function row(...cells) {
  const tr = document.createElement('tr');
  tr.append(...cells);
  return tr;
}
function button(label, onClick) {
  const b = document.createElement('button');
  b.type = 'button';
  b.textContent = label;
  b.addEventListener('click', onClick);
  return b;
}
const when = (iso) => (iso ? new Date(iso).toLocaleString() : '—');

/** A new key or signing secret, shown once in the page until dismissed (never stored). */
function showOnce(title, secret, note) {
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
function ask(label, { type = 'number', value = '', min, max } = {}) {
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
function confirming(label, confirmLabel, onConfirm) {
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
const send = (path, body, method = 'POST') =>
  api(path, { method, headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
const statusClass = (status) => `status-${String(status)[0]}`;
function showError(e) {
  $('app-error').textContent = e ? `${e.message}` : '';
}

// ---- sign in -------------------------------------------------------------------------------
$('login').addEventListener('submit', async (event) => {
  event.preventDefault();
  key = $('owner-key').value.trim();
  $('login-error').textContent = '';
  try {
    await start();
    sessionStorage.setItem(STORAGE, key);
  } catch (e) {
    key = null;
    $('login-error').textContent = e.status === 401
      ? 'That key is not valid (unknown or revoked).'
      : e.status === 403 ? 'That key is not an owner key: use the project owner key.' : e.message;
  }
});
$('logout').addEventListener('click', () => {
  sessionStorage.removeItem(STORAGE);
  sessionStorage.removeItem(`${STORAGE}.me`);
  location.reload();
});

/**
 * Signs in: `/me` once per session (it describes the key's API window and quota, so it is asked
 * under them; kept in sessionStorage beside the key, a reload does not ask again), then the key list
 * under the dashboard budget — an owner-only read, refused for other key types.
 */
async function start() {
  const kept = sessionStorage.getItem(`${STORAGE}.me`);
  const me = kept ? JSON.parse(kept) : await api('/public/v1/me', { method: 'GET' }).then(({ project_id, prefix }) => ({ project_id, prefix }));
  await loadKeys();
  sessionStorage.setItem(`${STORAGE}.me`, JSON.stringify(me));
  $('project').textContent = `Project ${me.project_id} · key ${me.prefix}`;
  $('login').hidden = true;
  $('app').hidden = false;
  $('logout').hidden = false;
}

// ---- tabs ----------------------------------------------------------------------------------
const tabs = ['keys', 'log', 'events', 'webhooks', 'overview'];
const loaders = { keys: loadKeys, log: () => loadLog(true), events: () => loadEvents(true), webhooks: loadWebhooks, overview: loadOverview };
for (const name of tabs) {
  $(`tab-${name}`).addEventListener('click', () => {
    for (const other of tabs) {
      $(`tab-${other}`).setAttribute('aria-selected', String(other === name));
      $(`panel-${other}`).hidden = other !== name;
    }
    showError(null);
    loaders[name]().catch(showError);
  });
}

// ---- API keys ------------------------------------------------------------------------------
/** An <input type=datetime-local> value as RFC 3339 (local time, as the owner typed it). */
const isoOf = (local) => (local ? new Date(local).toISOString() : null);
/** RFC 3339 as an <input type=datetime-local> value, in local time. */
function localOf(iso) {
  if (!iso) return '';
  const d = new Date(iso);
  return new Date(d.getTime() - d.getTimezoneOffset() * 60_000).toISOString().slice(0, 16);
}

async function loadKeys() {
  // Two calls, whatever the number of keys: the list, and every key's last day of use from the
  // daily aggregates (never a log query per key).
  const [{ data }, used] = await Promise.all([api('/public/v1/keys?limit=200'), api('/public/v1/keys/last-used')]);
  const lastUse = new Map(used.data.map((u) => [u.key_id, u.last_used_on]));
  const keyFilter = $('log-key');
  const chosen = keyFilter.value;
  keyFilter.replaceChildren(new Option('any', ''), ...data.map((k) => new Option(`${k.prefix}… ${k.name ?? ''}`, k.id)));
  keyFilter.value = chosen;
  $('keys').replaceChildren(...data.map((k) => {
    const actions = cell('');
    actions.append(button('Stats', () => loadStats(k).catch(showError)));
    if (k.status === 'active' || k.status === 'expiring') actions.append(' ', button('Edit', () => editKey(k)));
    if ((k.status === 'active' || k.status === 'expiring') && !k.rolled_to) {
      actions.append(' ', button('Roll', async () => {
        const grace = await ask(`Roll ${k.prefix}…: seconds the old key keeps working (0–86400)`, { value: '3600', min: 0, max: 86400 });
        if (grace === null) return;
        try {
          const rolled = await send(`/public/v1/keys/${k.id}/roll`, { grace_seconds: Number(grace) });
          const graceEnd = new Date(Date.now() + Number(grace) * 1000).toISOString();
          showOnce(`New key ${rolled.prefix}… (replaces ${k.prefix}…)`, rolled.key, `The old key works until about ${when(graceEnd)}.`);
        } catch (e) { showError(e); }
        await loadKeys().catch(showError);
      }));
    }
    if (k.status === 'active' || k.status === 'expiring') {
      actions.append(' ', confirming('Revoke', 'Confirm revoke (fails at once)', async () => {
        await api(`/public/v1/keys/${k.id}`, { method: 'DELETE' }).catch(showError);
        await loadKeys().catch(showError);
      }));
    }
    const tr = row(cell(k.prefix), cell(k.type), cell(k.name), cell(k.plan), cell(k.rate_limit_per_minute ?? 'plan'),
      cell(k.status), cell(when(k.expires_at)), cell(lastUse.get(k.id) ?? '—'), actions);
    tr.dataset.prefix = k.prefix;
    tr.dataset.status = k.status;
    return tr;
  }));
}

$('new-key').addEventListener('submit', async (event) => {
  event.preventDefault();
  const form = new FormData($('new-key'));
  const body = { type: form.get('type') };
  if (form.get('name')) body.name = form.get('name');
  if (form.get('rate_limit_per_minute')) body.rate_limit_per_minute = Number(form.get('rate_limit_per_minute'));
  if (form.get('expires_at')) body.expires_at = isoOf(form.get('expires_at'));
  try {
    const created = await send('/public/v1/keys', body);
    showOnce(`New ${created.type} key ${created.prefix}…`, created.key, 'It is not shown again: the gateway keeps only its hash.');
    $('new-key').reset();
    showError(null);
  } catch (e) { showError(e); }
  await loadKeys().catch(showError);
});

let editing = null;
function editKey(k) {
  editing = k;
  const form = $('edit-key');
  $('edit-prefix').textContent = `${k.prefix}…`;
  form.elements.name.value = k.name ?? '';
  form.elements.rate_limit_per_minute.value = k.rate_limit_per_minute ?? '';
  form.elements.expires_at.value = localOf(k.expires_at);
  form.hidden = false;
  form.elements.name.focus();
}
$('edit-cancel').addEventListener('click', () => { $('edit-key').hidden = true; editing = null; });
$('edit-key').addEventListener('submit', async (event) => {
  event.preventDefault();
  const form = $('edit-key').elements;
  const changes = {
    name: form.name.value.trim() || null,
    rate_limit_per_minute: form.rate_limit_per_minute.value ? Number(form.rate_limit_per_minute.value) : null,
    expires_at: isoOf(form.expires_at.value),
  };
  try {
    await send(`/public/v1/keys/${editing.id}`, changes, 'PATCH');
    $('edit-key').hidden = true;
    showError(null);
  } catch (e) { showError(e); }
  await loadKeys().catch(showError);
});

async function loadStats(k) {
  const stats = await api(`/public/v1/keys/${k.id}/stats?days=30`);
  $('key-stats').hidden = false;
  $('stats-prefix').textContent = k.prefix;
  $('stats-total').textContent = String(stats.total);
  $('stats-errors').textContent = `${(stats.error_share * 100).toFixed(1)} %`;
  $('stats-endpoints').replaceChildren(...stats.top_endpoints.map((e) =>
    row(cell(e.method), cell(e.route), cell(e.total), cell(e.errors), cell(e.p95_ms))));
  chart = traffic($('stats-chart'), stats, chart, ['p95_ms']);
}

/**
 * A stacked bar chart of requests per day (OK, 4xx, 5xx) with response-time percentiles as lines
 * on a second axis, from a stats answer; replaces `previous`.
 */
function traffic(canvas, stats, previous, percentiles) {
  const colours = { p50_ms: '#57606a', p95_ms: '#8250df', p99_ms: '#bf3989' };
  const data = {
    labels: stats.daily.map((d) => d.date.slice(5)),
    datasets: [
      { label: 'OK', data: stats.daily.map((d) => d.total - d['4xx'] - d['5xx']), backgroundColor: '#2da44e', stack: 'requests' },
      { label: '4xx', data: stats.daily.map((d) => d['4xx']), backgroundColor: '#d4a72c', stack: 'requests' },
      { label: '5xx', data: stats.daily.map((d) => d['5xx']), backgroundColor: '#cf222e', stack: 'requests' },
      ...percentiles.map((p) => ({
        type: 'line', label: `${p.slice(0, 3)} ms`, data: stats.daily.map((d) => d[p]), borderColor: colours[p],
        backgroundColor: colours[p], yAxisID: 'ms', spanGaps: true,
      })),
    ],
  };
  previous?.destroy();
  const made = new Chart(canvas, {
    type: 'bar',
    data,
    options: {
      animation: false, maintainAspectRatio: false,
      scales: {
        x: { stacked: true },
        y: { stacked: true, beginAtZero: true, title: { display: true, text: 'requests' } },
        ms: { position: 'right', type: 'logarithmic', title: { display: true, text: 'ms' }, grid: { drawOnChartArea: false } },
      },
    },
  });
  canvas.dataset.total = String(stats.total);
  return made;
}

// ---- overview ------------------------------------------------------------------------------
let overviewChart;
let overviewEndpoint = null;
$('overview-range').addEventListener('change', () => loadOverview().catch(showError));
$('overview-all').addEventListener('click', () => {
  overviewEndpoint = null;
  loadOverview().catch(showError);
});
async function loadOverview() {
  const params = new URLSearchParams({ days: new FormData($('overview-range')).get('days') });
  if (overviewEndpoint) params.set('endpoint', overviewEndpoint);
  const stats = await api(`/public/v1/stats?${params}`);
  $('overview-endpoint').textContent = stats.endpoint ?? 'every one';
  $('overview-all').hidden = !stats.endpoint;
  $('overview-total').textContent = String(stats.total);
  $('overview-errors').textContent = `${(stats.error_share * 100).toFixed(1)} %`;
  const ms = (v) => (v === null ? '—' : String(v));
  $('overview-latency').textContent = `${ms(stats.latency.p50_ms)} / ${ms(stats.latency.p95_ms)} / ${ms(stats.latency.p99_ms)} ms`;
  $('overview-endpoints').replaceChildren(...stats.top_endpoints.map((e) => {
    const tr = row(cell(e.method), cell(e.route), cell(e.total), cell(e.errors), cell(e.p50_ms), cell(e.p95_ms), cell(e.p99_ms));
    tr.className = 'clickable';
    tr.tabIndex = 0;
    tr.dataset.endpoint = `${e.method} ${e.route}`;
    const choose = () => {
      overviewEndpoint = tr.dataset.endpoint;
      loadOverview().catch(showError);
    };
    tr.addEventListener('click', choose);
    tr.addEventListener('keydown', (event) => { if (event.key === 'Enter') choose(); });
    return tr;
  }));
  overviewChart = traffic($('overview-chart'), stats, overviewChart, ['p50_ms', 'p95_ms', 'p99_ms']);
}

// ---- live, paged tables (the request log, the events) --------------------------------------
/**
 * A table of a list route's answers, newest first: `load(true)` shows its first page, `load(false)`
 * adds the next below; with the `live` box checked, every `everyMs` the items from the newest shown
 * on go on top. Each item is shown once (`id`); `at` is its time, `row` its table row.
 */
function liveTable({ path, params, body, more, live, panel, everyMs, id, at, row: toRow }) {
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

// ---- request log ---------------------------------------------------------------------------
$('log-filters').addEventListener('submit', (event) => {
  event.preventDefault();
  loadLog(true).catch(showError);
});
$('detail-close').addEventListener('click', () => $('log-detail').close());

/** The log query of the filter form; its time range becomes `from`. */
function logParams() {
  const params = new URLSearchParams();
  for (const [name, value] of new FormData($('log-filters'))) {
    if (!value) continue;
    if (name === 'range') params.set('from', new Date(Date.now() - Number(value) * 1000).toISOString());
    else params.set(name, value);
  }
  // The dashboard's own reads stay out of the log unless asked for.
  if (!$('log-dashboard').checked) params.set('dashboard', 'false');
  params.set('limit', '50');
  return params;
}

const loadLog = liveTable({
  path: '/public/v1/logs', params: logParams, body: 'log', more: 'log-more', live: 'log-live', panel: 'panel-log',
  everyMs: 5000, id: (r) => r.request_id, at: (r) => r.ts, row: logRow,
});

function logRow(r) {
  const tr = row(cell(when(r.ts)), cell(r.method), cell(r.path), cell(r.status, statusClass(r.status)),
    cell(r.key_prefix), cell(r.response_time_ms));
  tr.className = 'clickable';
  tr.tabIndex = 0;
  tr.dataset.requestId = r.request_id;
  tr.dataset.status = r.status;
  tr.dataset.ts = r.ts;
  tr.addEventListener('click', () => showDetail(r));
  tr.addEventListener('keydown', (e) => { if (e.key === 'Enter') showDetail(r); });
  return tr;
}

function showDetail(r) {
  const fields = $('detail-fields');
  fields.replaceChildren();
  for (const [name, value] of Object.entries(r)) {
    const dt = document.createElement('dt');
    dt.textContent = name;
    const dd = document.createElement('dd');
    if (name === 'original_request_id' && value) {
      dd.append(button(`${value} (the original)`, async () => {
        const original = await api(`/public/v1/logs/${encodeURIComponent(value)}`).catch(showError);
        if (original) showDetail(original);
      }));
    } else {
      dd.textContent = value === null ? '—' : String(value);
    }
    fields.append(dt, dd);
  }
  if (!$('log-detail').open) $('log-detail').showModal();
}

// ---- events (a live view of what the project's keys sent, like an event debugger) -----------
$('event-filters').addEventListener('submit', (event) => {
  event.preventDefault();
  loadEvents(true).catch(showError);
});

function eventParams() {
  const params = new URLSearchParams({ limit: '50' });
  for (const [name, value] of new FormData($('event-filters'))) if (value) params.set(name, value);
  return params;
}

function eventRow(e) {
  const properties = document.createElement('details');
  const summary = document.createElement('summary');
  summary.textContent = Object.keys(e.properties ?? {}).join(', ') || '{}';
  const pre = document.createElement('pre');
  pre.textContent = JSON.stringify({ event_id: e.event_id, timestamp: e.timestamp, properties: e.properties }, null, 2);
  properties.append(summary, pre);
  const propertiesCell = cell('');
  propertiesCell.append(properties);
  const tr = row(cell(when(e.received_at)), cell(e.event), cell(e.user_id), cell(e.anonymous_id), cell(e.key_type), propertiesCell);
  tr.dataset.eventId = e.event_id;
  return tr;
}

const loadEvents = liveTable({
  path: '/public/v1/events', params: eventParams, body: 'events', more: 'events-more', live: 'events-live',
  panel: 'panel-events', everyMs: 3000, id: (e) => e.event_id, at: (e) => e.received_at, row: eventRow,
});

// ---- webhooks ------------------------------------------------------------------------------
$('new-webhook').addEventListener('submit', async (event) => {
  event.preventDefault();
  const form = new FormData($('new-webhook'));
  try {
    const created = await send('/public/v1/webhooks', { url: form.get('url'), events: form.getAll('events') });
    showOnce(`Signing secret of ${created.url}`, created.secret, 'Verify every delivery with it; it is not shown again.');
    $('new-webhook').reset();
    showError(null);
  } catch (e) { showError(e); }
  await loadWebhooks().catch(showError);
});
$('test-event').addEventListener('submit', async (event) => {
  event.preventDefault();
  const type = new FormData($('test-event')).get('type');
  try {
    const sent = await send('/public/v1/webhooks/trigger', { type });
    $('webhook-note').textContent = `Sample ${sent.type} sent: ${sent.deliveries} ${sent.deliveries === 1 ? 'delivery' : 'deliveries'}.`;
    showError(null);
  } catch (e) { showError(e); }
});

async function loadWebhooks() {
  const { data } = await api('/public/v1/webhooks');
  $('webhooks').replaceChildren(...data.map((w) => {
    const actions = cell('');
    actions.append(button('Deliveries', () => loadDeliveries(w).catch(showError)));
    const remove = confirming('Delete', 'Confirm delete', async () => {
      await api(`/public/v1/webhooks/${w.id}`, { method: 'DELETE' }).catch(showError);
      $('deliveries-box').hidden = true;
      await loadWebhooks().catch(showError);
    });
    actions.append(' ', remove);
    actions.append(' ', button('Rotate secret', async () => {
      const grace = await ask('Seconds the old secret keeps signing beside the new one (0–604800)', { value: '86400', min: 0, max: 604800 });
      if (grace === null) return;
      try {
        const rotated = await send(`/public/v1/webhooks/${w.id}/rotate-secret`, { grace_seconds: Number(grace) });
        // A v1a subscription's private key never leaves the gateway: its receivers need the new public key.
        const shown = rotated.secret ? 'signing secret' : 'public key (v1a)';
        showOnce(`New ${shown} of ${w.url ?? "gatehouse listen"}`, rotated.secret ?? rotated.public_key,
          `Until ${when(rotated.previous_secret_expires_at)} every delivery carries both signatures (new first).`);
      } catch (e) { showError(e); }
      await loadWebhooks().catch(showError);
    }));
    if (w.status === 'disabled') {
      actions.append(' ', button('Re-enable', async () => {
        await send(`/public/v1/webhooks/${w.id}`, { status: 'active' }, 'PATCH').catch(showError);
        await loadWebhooks().catch(showError);
      }));
    }
    actions.append(' ', button('Recover', async () => {
      const since = await ask('Queue again every failed delivery created since', {
        type: 'datetime-local', value: localOf(new Date(Date.now() - 86_400_000).toISOString()),
      });
      if (since === null) return;
      try {
        const { requeued } = await send(`/public/v1/webhooks/${w.id}/recover`, { since });
        $('app-error').textContent = '';
        $('webhook-note').textContent = `${requeued} failed ${requeued === 1 ? 'delivery' : 'deliveries'} queued again.`;
        setTimeout(() => loadDeliveries(w).catch(showError), 1500);
      } catch (e) { showError(e); }
    }));
    const tr = row(cell(w.url ?? "gatehouse listen (cli)"), cell(w.events.join(', ')), cell(w.status), cell(when(w.previous_secret_expires_at)), actions);
    tr.dataset.id = w.id;
    tr.dataset.status = w.status;
    return tr;
  }));
}

async function loadDeliveries(w) {
  const { data } = await api(`/public/v1/webhooks/${w.id}/deliveries?limit=50`);
  $('deliveries-box').hidden = false;
  $('deliveries-url').textContent = w.url ?? "gatehouse listen (cli)";
  $('deliveries').replaceChildren(...data.map((d) => {
    const attempts = document.createElement('ol');
    attempts.className = 'attempts';
    for (const a of d.attempts) {
      const li = document.createElement('li');
      li.textContent = `${when(a.started_at)} — ${a.response_code ?? 'no answer'} in ${a.duration_ms} ms${a.error ? ` — ${a.error}` : ''}`;
      if (a.response_body) {
        const body = document.createElement('code');
        body.className = 'response-body';
        body.textContent = ` ${a.response_body.slice(0, 200)}`;
        li.append(body);
      }
      attempts.append(li);
    }
    const payload = document.createElement('details');
    payload.className = 'payload';
    const summary = document.createElement('summary');
    summary.textContent = 'Payload';
    const pre = document.createElement('pre');
    pre.textContent = JSON.stringify(d.payload, null, 2);
    payload.append(summary, pre);
    const attemptsCell = cell('');
    attemptsCell.append(attempts, payload);
    const actions = cell('');
    // A failed or pending delivery is tried again now; a delivered one is sent once more.
    actions.append(button(d.status === 'delivered' ? 'Resend' : 'Retry now', async () => {
      await api(`/public/v1/webhooks/deliveries/${d.id}/retry`, { method: 'POST' }).catch(showError);
      setTimeout(() => loadDeliveries(w).catch(showError), 1500);
    }));
    const tr = row(cell(d.id), cell(d.event), cell(d.status), attemptsCell, cell(when(d.scheduled_at)), actions);
    tr.dataset.status = d.status;
    tr.dataset.attempts = String(d.attempts.length);
    return tr;
  }));
}

if (key) start().catch(() => { sessionStorage.removeItem(STORAGE); sessionStorage.removeItem(`${STORAGE}.me`); key = null; });
