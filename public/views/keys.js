// API keys: the list with each key's last day of use, create, edit, roll, revoke, and a key's 30 days.
import { $, api, ask, button, cell, confirming, isoOf, localOf, row, send, showError, showOnce, when } from './ui.js';
import { traffic } from './charts.js';

let chart;
/** Each key's name by id (prefix and name), as the last key list showed them: the log's detail names keys. */
export const keyNames = new Map();

export async function loadKeys() {
  // Two calls, whatever the number of keys: the list, and every key's last day of use from the
  // daily aggregates (never a log query per key).
  const [{ data }, used] = await Promise.all([api('/public/v1/keys?limit=200'), api('/public/v1/keys/last-used')]);
  const lastUse = new Map(used.data.map((u) => [u.key_id, u.last_used_on]));
  for (const k of data) keyNames.set(k.id, `${k.prefix}… ${k.name ?? ''}`.trim());
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

