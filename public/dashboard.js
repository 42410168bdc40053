// Gatehouse owner dashboard: plain DOM over the public API with the owner key from
// sessionStorage. Each tab is a module of views/; this one signs in and switches tabs.
import { $, api, session, showError } from './views/ui.js';
import { loadKeys } from './views/keys.js';
import { loadLog } from './views/log.js';
import { loadEvents } from './views/events.js';
import { loadWebhooks } from './views/webhooks.js';
import { loadOverview } from './views/overview.js';
import { loadUsage } from './views/usage.js';
import { loadIdentities } from './views/identities.js';

const STORAGE = 'gatehouse.ownerKey';
session.key = sessionStorage.getItem(STORAGE);

// ---- sign in -------------------------------------------------------------------------------
$('login').addEventListener('submit', async (event) => {
  event.preventDefault();
  session.key = $('owner-key').value.trim();
  $('login-error').textContent = '';
  try {
    await start();
    sessionStorage.setItem(STORAGE, session.key);
  } catch (e) {
    session.key = null;
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
const tabs = ['keys', 'log', 'events', 'webhooks', 'usage', 'identities', 'overview'];
const loaders = {
  keys: loadKeys, log: () => loadLog(true), events: () => loadEvents(true), webhooks: loadWebhooks,
  usage: loadUsage, identities: loadIdentities, overview: loadOverview,
};
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

if (session.key) start().catch(() => { sessionStorage.removeItem(STORAGE); sessionStorage.removeItem(`${STORAGE}.me`); session.key = null; });
