// Identities (SPEC §20): one customer's keys sharing limits and a monthly quota. The list with
// each identity's keys, create one, and change its limits.
import { $, api, button, cell, row, send, showError } from './ui.js';

const WINDOWS = ['per_second', 'per_minute', 'per_hour', 'per_day', 'monthly_quota'];
let editing = null;

/** The limits of the form's fields that are filled in (`null`: none of its own). */
function limitsOf(form) {
  const limits = {};
  for (const name of WINDOWS) if (form.get(name)) limits[name] = Number(form.get(name));
  return Object.keys(limits).length ? limits : null;
}

const shownLimits = (limits) => (limits
  ? WINDOWS.filter((w) => limits[w] != null).map((w) => `${limits[w]} ${w.replace('per_', '/ ').replace('monthly_quota', 'a month')}`).join(', ')
  : 'the plan\'s');

export async function loadIdentities() {
  const [{ data }, keys] = await Promise.all([api('/public/v1/identities?limit=200'), api('/public/v1/keys?limit=200')]);
  const keysOf = (id) => keys.data.filter((k) => k.identity_id === id && k.status !== 'revoked');
  $('identities').replaceChildren(...data.map((identity) => {
    const actions = cell('');
    actions.append(button('Edit limits', () => edit(identity)));
    const theirs = keysOf(identity.id).map((k) => `${k.prefix}… ${k.name ?? ''}`.trim()).join(', ');
    const tr = row(cell(identity.external_id), cell(identity.id), cell(shownLimits(identity.limits)),
      cell(theirs || 'none'), cell(JSON.stringify(identity.meta ?? {})), actions);
    tr.dataset.externalId = identity.external_id;
    tr.dataset.keys = String(keysOf(identity.id).length);
    return tr;
  }));
}

$('new-identity').addEventListener('submit', async (event) => {
  event.preventDefault();
  const form = new FormData($('new-identity'));
  const body = { external_id: form.get('external_id') };
  const limits = limitsOf(form);
  if (limits) body.limits = limits;
  try {
    await send('/public/v1/identities', body);
    $('new-identity').reset();
    showError(null);
  } catch (e) { showError(e); }
  await loadIdentities().catch(showError);
});

function edit(identity) {
  editing = identity;
  const form = $('edit-identity');
  $('edit-identity-name').textContent = identity.external_id;
  for (const name of WINDOWS) form.elements[name].value = identity.limits?.[name] ?? '';
  form.hidden = false;
  form.elements.per_minute.focus();
}
$('edit-identity-cancel').addEventListener('click', () => { $('edit-identity').hidden = true; editing = null; });
$('edit-identity').addEventListener('submit', async (event) => {
  event.preventDefault();
  try {
    await send(`/public/v1/identities/${editing.id}`, { limits: limitsOf(new FormData($('edit-identity'))) }, 'PATCH');
    $('edit-identity').hidden = true;
    showError(null);
  } catch (e) { showError(e); }
  await loadIdentities().catch(showError);
});
