// The events the project's keys sent, live (like an event debugger; SPEC §24).
import { $, cell, liveTable, row, showError, when } from './ui.js';

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

export const loadEvents = liveTable({
  path: '/public/v1/events', params: eventParams, body: 'events', more: 'events-more', live: 'events-live',
  panel: 'panel-events', everyMs: 3000, id: (e) => e.event_id, at: (e) => e.received_at, row: eventRow,
});

