// The traffic chart of the key stats and the overview (Chart.js, loaded by the page as a classic script).
/**
 * A stacked bar chart of requests per day (OK, 4xx, 5xx) with response-time percentiles as lines
 * on a second axis, from a stats answer; replaces `previous`.
 */
export function traffic(canvas, stats, previous, percentiles) {
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

