// The overview: every key's traffic, errors and response times, by endpoint.
import { $, api, cell, row, showError } from './ui.js';
import { traffic } from './charts.js';

let overviewChart;
let overviewEndpoint = null;
$('overview-range').addEventListener('change', () => loadOverview().catch(showError));
$('overview-all').addEventListener('click', () => {
  overviewEndpoint = null;
  loadOverview().catch(showError);
});
export async function loadOverview() {
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

