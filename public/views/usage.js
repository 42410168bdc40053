// Usage for billing (SPEC §22): the numbers of GET /public/v1/usage — billable requests by key,
// identity or UTC day over the chosen range — with each key and identity named as the other tabs
// name them, and the export runs of the range (GET /public/v1/usage/runs), each object readable.
import { $, api, button, cell, row, session, showError, when } from './ui.js';

$('usage-range').addEventListener('change', () => loadUsage().catch(showError));

/** The names the table shows for key and identity ids (two list reads, under the dashboard budget). */
async function names() {
  const [keys, identities] = await Promise.all([
    api('/public/v1/keys?limit=200'), api('/public/v1/identities?limit=200'),
  ]);
  return {
    key: new Map(keys.data.map((k) => [k.id, `${k.prefix}… ${k.name ?? ''}`.trim()])),
    identity: new Map(identities.data.map((i) => [i.id, i.external_id])),
  };
}

export async function loadUsage() {
  const form = new FormData($('usage-range'));
  const groupBy = form.get('group_by');
  const days = Number(form.get('days'));
  // Whole UTC days, today included: the periods that start in them.
  const today = new Date();
  today.setUTCHours(0, 0, 0, 0);
  const from = new Date(today.getTime() - (days - 1) * 86_400_000).toISOString();
  const params = new URLSearchParams({ group_by: groupBy, from, limit: '1000' });
  const [usage, named, runs] = await Promise.all([
    api(`/public/v1/usage?${params}`), names(), api(`/public/v1/usage/runs?from=${encodeURIComponent(from)}`),
  ]);
  $('usage-total').textContent = String(usage.total);
  $('usage-since').textContent = usage.from;
  $('usage-period').textContent = `${usage.period_seconds / 60} min`;
  $('usage-group').textContent = { key: 'Key', identity: 'Identity', day: 'Day (UTC)' }[groupBy];
  const label = (g) => {
    if (groupBy === 'key') return named.key.get(g.key_id) ?? g.key_id;
    if (groupBy === 'identity') return g.identity_id === null ? 'no identity' : named.identity.get(g.identity_id) ?? g.identity_id;
    return g.day;
  };
  const id = (g) => g.key_id ?? g.identity_id ?? '';
  $('usage').replaceChildren(...usage.data.map((g) => {
    const tr = row(cell(label(g)), cell(id(g)), cell(g.requests));
    tr.dataset.requests = String(g.requests);
    return tr;
  }));
  $('usage-more').hidden = !usage.has_more;
  $('usage-runs').replaceChildren(...runs.data.map((r) => {
    const object = cell('');
    object.append(button(r.object.split('/').pop(), () => open(r.object).catch(showError)));
    const tr = row(cell(r.period_start), cell(r.kind === 'export' ? 'export' : `adjustment ${r.seq}`), cell(r.records),
      cell(r.requests), cell(when(r.made_at)), cell(r.sent_at ? when(r.sent_at) : 'not yet'), object);
    tr.dataset.kind = r.kind;
    return tr;
  }));
}

/**
 * Downloads an export's NDJSON (its CloudEvents records), read with the owner key: a download,
 * not a look, so it counts in the key's API window as any other call (not the dashboard budget).
 */
async function open(object) {
  const res = await fetch(`/public/v1/usage/file?key=${encodeURIComponent(object)}`, {
    headers: { authorization: `Bearer ${session.key}` },
  });
  if (!res.ok) throw new Error(`HTTP ${res.status}`);
  const link = document.createElement('a');
  link.href = URL.createObjectURL(new Blob([await res.text()], { type: 'application/x-ndjson' }));
  link.download = object.split('/').pop();
  link.click();
  URL.revokeObjectURL(link.href);
}
