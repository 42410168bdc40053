// Webhooks: endpoints, their event types, test events, secret rotation, recovery and every delivery.
import { $, api, ask, button, cell, confirming, localOf, row, send, showError, showOnce, when } from './ui.js';

/** The built-in event types (SPEC §10, §22); an origin's own types come from the subscriptions. */
const BUILT_IN = ['contact.created', 'message.created', 'scenario.run.started', 'release_marker.created', 'usage.hourly', 'usage.adjustment'];

/**
 * Every type a subscription may take, offered in the forms: the built-in ones, then the origin's
 * types the project's subscriptions already name (`order.created` of proxy mode); any other is
 * typed into "Other types".
 */
function offerTypes(subscriptions) {
  const seen = new Set(subscriptions.flatMap((w) => w.events).filter((t) => t !== '*' && !BUILT_IN.includes(t)));
  const types = [...BUILT_IN, ...[...seen].sort()];
  const chosen = new Set(new FormData($('new-webhook')).getAll('events'));
  const boxes = types.map((type) => {
    const label = document.createElement('label');
    const box = document.createElement('input');
    Object.assign(box, { type: 'checkbox', name: 'events', value: type, checked: chosen.has(type) });
    label.append(box, ` ${type}${BUILT_IN.includes(type) ? '' : ' (origin)'}`);
    return label;
  });
  const fieldset = $('event-types');
  fieldset.replaceChildren(fieldset.querySelector('legend'), fieldset.querySelector('label'), ...boxes);
  const select = $('test-event-type');
  const picked = select.value;
  select.replaceChildren(...types.map((type) => new Option(type, type)));
  if (types.includes(picked)) select.value = picked;
}

$('new-webhook').addEventListener('submit', async (event) => {
  event.preventDefault();
  const form = new FormData($('new-webhook'));
  const other = String(form.get('other_events') ?? '').split(',').map((t) => t.trim()).filter(Boolean);
  try {
    const body = { url: form.get('url'), events: [...form.getAll('events'), ...other] };
    if (form.get('name')) body.name = form.get('name');
    const created = await send('/public/v1/webhooks', body);
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

export async function loadWebhooks() {
  const { data } = await api('/public/v1/webhooks');
  offerTypes(data);
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
    actions.append(' ', button('Rename', async () => {
      const name = await ask('Name of this endpoint (empty: none)', { type: 'text', value: w.name ?? '' });
      if (name === null) return;
      await send(`/public/v1/webhooks/${w.id}`, { name: name.trim() || null }, 'PATCH').catch(showError);
      await loadWebhooks().catch(showError);
    }));
    const tr = row(cell(w.name), cell(w.url ?? "gatehouse listen (cli)"), cell(w.events.join(', ')), cell(w.status), cell(when(w.previous_secret_expires_at)), actions);
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

