// The page `tessera experiment serve` serves: experiments, a chosen one's trials and their
// training and validation curves (Chart.js from Debian's libjs-chart.js, served by the same
// server), ASHA's rungs drawn as dashed lines. It refreshes every 5 seconds. Its script and
// style are files of their own, so the page runs under a Content-Security-Policy that allows
// no inline code.
#include "tessera/experiment/experiment_serve.h"

namespace tessera::experiment {

const char* experiment_page() {
  return R"HTML(<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Tessera experiments</title>
<script src="/static/chart.min.js"></script>
<link rel="stylesheet" href="/static/experiment.css"></head>
<body>
<h1>Tessera experiments</h1>
<table id="experiments"><thead><tr><th>id</th><th>name</th><th>state</th><th>trials</th></tr>
</thead><tbody></tbody></table>
<p id="message" role="alert"></p>
<h2 id="title"></h2>
<table id="trials"><thead><tr><th>trial</th><th>id</th><th>state</th><th>batches</th>
<th>restarts</th><th id="metric">best</th><th>hyperparameters</th></tr></thead><tbody></tbody></table>
<div class="charts"><div class="chart"><canvas id="training"></canvas></div>
<div class="chart"><canvas id="validation"></canvas></div></div>
<script src="/static/experiment.js"></script></body></html>
)HTML";
}

const char* experiment_page_css() {
  return R"CSS(body { font: 14px system-ui, sans-serif; margin: 1.5em; color: #222; }
table { border-collapse: collapse; margin-bottom: 1em; }
td, th { padding: 3px 10px; border-bottom: 1px solid #ddd; text-align: left; }
tr.experiment { cursor: pointer; } tr.selected { background: #eef4ff; }
.charts { display: flex; flex-wrap: wrap; gap: 1em; }
.chart { width: 560px; height: 340px; }
code { font-size: 12px; }
#message { color: #a40000; font-weight: 600; }
)CSS";
}

const char* experiment_page_js() {
  return R"JS(let selected = null, charts = {};
const colors = ['#1f77b4','#ff7f0e','#2ca02c','#d62728','#9467bd','#8c564b','#e377c2','#7f7f7f',
                '#bcbd22','#17becf'];
function cell(row, text) { const td = document.createElement('td'); td.textContent = text; row.appendChild(td); }
// Dashed vertical lines at ASHA's rungs.
const rungLines = { id: 'rungs', afterDatasetsDraw(chart, args, opts) {
  const x = chart.scales.x, y = chart.scales.y, ctx = chart.ctx;
  ctx.save(); ctx.setLineDash([4, 4]); ctx.strokeStyle = '#999';
  for (const r of opts.rungs || []) {
    const px = x.getPixelForValue(r);
    ctx.beginPath(); ctx.moveTo(px, y.top); ctx.lineTo(px, y.bottom); ctx.stroke();
    const label = 'rung ' + r, w = ctx.measureText(label).width;
    ctx.fillStyle = '#666'; ctx.fillText(label, px + 3 + w > x.right ? px - w - 3 : px + 3, y.top + 10);
  }
  ctx.restore();
}};
function drawChart(id, title, series, rungs) {
  const datasets = series.map((s, i) => ({ label: 'trial ' + s.trial, data: s.points.map(p => ({x: p[0], y: p[1]})),
    borderColor: colors[i % colors.length], backgroundColor: colors[i % colors.length],
    pointRadius: 1.5, borderWidth: 1.5, showLine: true }));
  if (charts[id]) charts[id].destroy();
  charts[id] = new Chart(document.getElementById(id), { type: 'scatter', data: { datasets },
    options: { animation: false, maintainAspectRatio: false,
      plugins: { title: { display: true, text: title }, rungs: { rungs } },
      scales: { x: { min: 0, title: { display: true, text: 'batches' } } } }, plugins: [rungLines] });
}
// A message instead of a blank page: a stale link (#experiment=99), a store that cannot be read.
function say(text) { document.getElementById('message').textContent = text; }
async function showExperiment(id) {
  selected = id;
  const r = await fetch('/api/experiments/' + id), d = await r.json();
  if (!r.ok) {
    say(d.error || ('experiment ' + id + ': HTTP ' + r.status));
    document.getElementById('title').textContent = '';
    document.querySelector('#trials tbody').innerHTML = '';
    for (const c of Object.values(charts)) c.destroy();
    charts = {}; selected = null;
    document.body.dataset.charts = 'none';
    return;
  }
  say('');
  document.getElementById('title').textContent = 'Experiment ' + d.id + ' (' + d.name + '): ' +
    d.state + ', searcher ' + d.searcher.name + ' on ' + d.searcher.metric;
  document.getElementById('metric').textContent = 'best ' + d.searcher.metric;
  const body = document.querySelector('#trials tbody'); body.innerHTML = '';
  for (const t of d.trials) {
    const row = document.createElement('tr'); row.className = 'trial';
    const best = t.best_validation[d.searcher.metric];
    for (const v of [t.request_id, t.id, t.state, t.batches, t.restarts,
                     best === undefined ? '-' : best.toFixed(4), JSON.stringify(t.hparams)]) cell(row, v);
    body.appendChild(row);
  }
  drawChart('training', d.training_metric + ' (training)', d.curves.map(c => ({trial: c.trial, points: c.training})), d.rungs);
  drawChart('validation', d.searcher.metric + ' (validation)', d.curves.map(c => ({trial: c.trial, points: c.validation})), d.rungs);
  for (const row of document.querySelectorAll('tr.experiment'))
    row.classList.toggle('selected', row.dataset.id == id);
  document.body.dataset.charts = 'rendered';
}
async function refresh() {
  const r = await fetch('/api/experiments'), list = await r.json();
  if (!r.ok) { say(list.error || ('HTTP ' + r.status)); return; }
  const body = document.querySelector('#experiments tbody'); body.innerHTML = '';
  for (const e of list.experiments) {
    const row = document.createElement('tr'); row.className = 'experiment'; row.dataset.id = e.id;
    for (const v of [e.id, e.name, e.state, e.error ? 'unreadable: ' + e.error : e.trials]) cell(row, v);
    row.onclick = () => { location.hash = 'experiment=' + e.id; showExperiment(e.id); };
    body.appendChild(row);
  }
  const m = location.hash.match(/experiment=(\d+)/);
  const id = selected || (m ? Number(m[1]) : (list.experiments.length ? list.experiments[list.experiments.length - 1].id : null));
  if (id !== null) await showExperiment(id);
  else if (!list.experiments.length) say('No experiments in this store yet: tessera experiment create EXP.yaml');
}
refresh(); setInterval(refresh, 5000);
)JS";
}

}  // namespace tessera::experiment
