// The request log: filters, a live tail, and a row's full detail.
import { $, api, bothZones, button, cell, liveTable, row, showError, statusClass, when } from './ui.js';
import { keyNames } from './keys.js';

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

export const loadLog = liveTable({
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

/**
 * Every field of a log row: its time in UTC and the browser's zone side by side, and the key's name
 * beside its id (from the key list the sign-in loaded).
 */
function showDetail(r) {
  const fields = $('detail-fields');
  fields.replaceChildren();
  for (const [name, value] of Object.entries(r)) {
    const dt = document.createElement('dt');
    dt.textContent = name;
    const dd = document.createElement('dd');
    if (name === 'ts') {
      dd.textContent = bothZones(value);
    } else if (name === 'key_id' && value) {
      const known = keyNames.get(value);
      dd.textContent = known ? `${value} (${known})` : value;
    } else if (name === 'original_request_id' && value) {
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

