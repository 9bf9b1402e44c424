"""The status page at ``/`` of a server's metrics port, and the ``/status.json`` it reads.

Read-only: one HTML page (no external resources) whose script asks ``/status.json``
every two seconds and shows, per table, its size, limits, rate limiter state and rates,
with a small chart of size and rates over the last five minutes. ``/status.json`` is
made from the same metric families as ``/metrics``, so both always agree.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from typing import Any

__all__ = ["PAGE", "status_json"]

_PREFIX = "reverb_py_table_"


def status_json(families: Iterable[Any]) -> bytes:
    """``{"time": unix seconds, "tables": {name: {field: value}}}`` from metric families
    (fields: the table metrics' names without ``reverb_py_table_`` and ``_total``;
    histograms give their ``_count`` and ``_sum``)."""
    tables: dict[str, dict[str, float]] = {}
    for family in families:
        for sample in family.samples:
            table = sample.labels.get("table")
            if table is None or not sample.name.startswith(_PREFIX):
                continue
            name = sample.name[len(_PREFIX) :]
            if name.endswith("_bucket") or name.endswith("_created"):
                continue
            if name.endswith("_total"):
                name = name[: -len("_total")]
            tables.setdefault(table, {})[name] = sample.value
    return json.dumps({"time": time.time(), "tables": tables}, sort_keys=True).encode()


PAGE = b"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>reverb_py status</title>
<style>
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.3em; margin: 0 0 .2em 0; }
#updated { color: #666; font-size: .85em; margin-bottom: 1em; }
table.t { border-collapse: collapse; margin-bottom: 1.5em; }
table.t th, table.t td { padding: .3em .8em; border-bottom: 1px solid #ddd; text-align: right; }
table.t th:first-child, table.t td:first-child { text-align: left; }
.card { display: inline-block; vertical-align: top; margin: 0 1.5em 1.5em 0; }
.card h2 { font-size: 1em; margin: 0 0 .3em 0; }
svg { background: #fafafa; border: 1px solid #ddd; }
.legend span { font-size: .8em; margin-right: 1em; }
.blocked { color: #b00; }
</style></head>
<body>
<h1>reverb_py</h1>
<div id="updated">waiting for the first update...</div>
<table class="t" id="tables"><thead><tr><th>table</th><th>size</th><th>max size</th>
<th>inserts/s</th><th>samples/s</th><th>waiting inserts</th><th>waiting samples</th>
<th>chunk MiB</th><th>evictions</th></tr></thead><tbody></tbody></table>
<div id="charts"></div>
<script>
"use strict";
const KEEP_SECONDS = 300, W = 360, H = 110;
const history = {};
function fmt(x, d) { return (x === undefined || x === null) ? "-" : x.toFixed(d); }
function rate(points, key) {
  if (points.length < 2) return 0;
  const a = points[points.length - 2], b = points[points.length - 1];
  const dt = b.time - a.time;
  return dt > 0 ? Math.max(0, (b[key] - a[key]) / dt) : 0;
}
function line(values, maxValue, color) {
  if (values.length < 2) return "";
  const pts = values.map((v, i) =>
    (i * W / (values.length - 1)).toFixed(1) + "," +
    (H - 4 - (maxValue > 0 ? v / maxValue : 0) * (H - 8)).toFixed(1)).join(" ");
  return '<polyline fill="none" stroke="' + color + '" stroke-width="1.5" points="' + pts + '"/>';
}
function render(status) {
  const names = Object.keys(status.tables).sort();
  const rows = [];
  const charts = [];
  for (const name of names) {
    const t = status.tables[name];
    const points = history[name] = (history[name] || []);
    points.push({time: status.time, size: t.size || 0, inserts: t.inserts || 0,
                 samples: t.samples || 0});
    while (points.length > 2 && status.time - points[0].time > KEEP_SECONDS) points.shift();
    const rates = points.map((p, i) => i === 0 ? {i: 0, s: 0} :
      {i: Math.max(0, (p.inserts - points[i - 1].inserts) / (p.time - points[i - 1].time)),
       s: Math.max(0, (p.samples - points[i - 1].samples) / (p.time - points[i - 1].time))});
    const esc = name.replace(/[&<>"]/g,
      c => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"}[c]));
    rows.push("<tr data-table=\\"" + esc + "\\"><td>" + esc + "</td><td class=\\"size\\">" +
      fmt(t.size, 0) + "</td><td>" + fmt(t.max_size, 0) + "</td><td>" +
      fmt(rate(points, "inserts"), 1) + "</td><td>" + fmt(rate(points, "samples"), 1) +
      "</td><td class=\\"" + (t.waiting_inserts ? "blocked" : "") + "\\">" +
      fmt(t.waiting_inserts, 0) + "</td><td class=\\"" +
      (t.waiting_sample_requests ? "blocked" : "") + "\\">" +
      fmt(t.waiting_sample_requests, 0) + "</td><td>" +
      fmt((t.chunk_bytes || 0) / 1048576, 2) + "</td><td>" + fmt(t.evictions, 0) + "</td></tr>");
    const maxSize = Math.max(1, t.max_size || 1, ...points.map(p => p.size));
    const maxRate = Math.max(1, ...rates.map(r => Math.max(r.i, r.s)));
    charts.push('<div class="card"><h2>' + esc + '</h2><svg width="' + W + '" height="' + H +
      '" viewBox="0 0 ' + W + " " + H + '">' +
      line(points.map(p => p.size), maxSize, "#1f77b4") +
      line(rates.map(r => r.i), maxRate, "#2ca02c") +
      line(rates.map(r => r.s), maxRate, "#d62728") +
      '</svg><div class="legend"><span style="color:#1f77b4">size</span>' +
      '<span style="color:#2ca02c">inserts/s</span>' +
      '<span style="color:#d62728">samples/s</span></div></div>');
  }
  document.querySelector("#tables tbody").innerHTML = rows.join("");
  document.getElementById("charts").innerHTML = charts.join("");
  document.getElementById("updated").textContent =
    names.length + " tables, updated " + new Date(status.time * 1000).toLocaleTimeString();
}
async function update() {
  try {
    const response = await fetch("status.json", {cache: "no-store"});
    render(await response.json());
  } catch (error) {
    document.getElementById("updated").textContent = "no answer from the server: " + error;
  }
}
update();
setInterval(update, 2000);
</script>
</body></html>
"""
