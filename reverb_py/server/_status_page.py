"""The status page at ``/`` of a server's metrics port, and the ``/status.json`` it reads.

Read-only: one HTML page (no external resources) whose script asks ``/status.json``
every two seconds. It answers "why is my learner (or actor) stalled?": per table, which
side of the rate limiter waits, for how long, how many calls wait and why (the cursor
against ``min_diff`` / ``max_diff``, the size against ``min_size_to_sample``), the age of
sampled items, evictions, and charts of size and rates over the last five minutes with
their scales; for the server, its version, uptime, token and TLS, the last checkpoint,
the process, and the calls by method. ``/status.json`` is made from the same metric
families as ``/metrics``, so both always agree.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable
from typing import Any

__all__ = ["PAGE", "status_json"]

_PREFIX = "reverb_py_"
_TABLE_PREFIX = "reverb_py_table_"
_RPC_PREFIX = "reverb_py_rpc_"
_PROCESS_PREFIXES = ("process_", "python_info")


def _number(value: float) -> float | str | None:
    """``value`` as JSON can carry it: infinities as ``"+Inf"`` / ``"-Inf"`` (as
    Prometheus writes them), NaN as null."""
    if math.isnan(value):
        return None
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return value


def status_json(families: Iterable[Any]) -> bytes:
    """The page's data, from metric families.

    ``{"time": unix seconds, "server": {...}, "rpc": {method: {...}}, "tables": {name:
    {...}}}``. Fields are the metrics' names without ``reverb_py_table_`` /
    ``reverb_py_rpc_`` / ``reverb_py_`` and ``_total``, followed by the values of their
    other labels (``rate_limiter_blocked_sample``, ``errors_NOT_FOUND``); histograms give
    ``_count``, ``_sum`` and ``_bucket`` (``[[le, cumulative count], ...]``); ``*_info``
    series give their labels.
    """
    server: dict[str, Any] = {}
    rpc: dict[str, dict[str, Any]] = {}
    tables: dict[str, dict[str, Any]] = {}
    for family in families:
        for sample in family.samples:
            name: str = sample.name
            labels = dict(sample.labels)
            if name.endswith("_created"):
                continue
            target: dict[str, Any]
            if name.startswith(_TABLE_PREFIX) and "table" in labels:
                target = tables.setdefault(labels.pop("table"), {})
                field = name[len(_TABLE_PREFIX) :]
            elif name.startswith(_RPC_PREFIX) and "method" in labels:
                target = rpc.setdefault(labels.pop("method"), {})
                field = name[len(_RPC_PREFIX) :]
            elif name.startswith(_PREFIX):
                target = server
                field = name[len(_PREFIX) :]
            elif name.startswith(_PROCESS_PREFIXES):
                target = server
                field = name
            else:
                continue
            if field.endswith("_info"):
                target[field] = labels
                continue
            if field.endswith("_bucket"):
                target.setdefault(field, []).append([labels["le"], sample.value])
                continue
            if field.endswith("_total"):
                field = field[: -len("_total")]
            for key in sorted(labels):
                field += "_" + labels[key]
            target[field] = _number(sample.value)
    status = {"time": time.time(), "server": server, "rpc": rpc, "tables": tables}
    return json.dumps(status, sort_keys=True, allow_nan=False).encode()


_HTML = r"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>reverb_py status</title>
<style>
body { font-family: system-ui, sans-serif; margin: 1.2em 1.5em; color: #222; }
h1 { font-size: 1.35em; margin: 0 0 .15em 0; }
h2 { font-size: 1.05em; margin: 1.1em 0 .4em 0; }
#updated { color: #555; font-size: .85em; margin-bottom: .6em; }
#error { color: #b00; font-weight: bold; }
.facts { display: flex; flex-wrap: wrap; gap: .4em 2.2em; font-size: .9em; }
.facts div span { color: #666; margin-right: .4em; }
table.t { border-collapse: collapse; font-size: .88em; }
table.t th, table.t td { padding: .22em .7em; border-bottom: 1px solid #e2e2e2;
  text-align: right; }
table.t th { color: #555; font-weight: 600; }
table.t th:first-child, table.t td:first-child { text-align: left; }
.card { display: inline-block; vertical-align: top; border: 1px solid #ddd;
  border-radius: 6px; padding: .7em .9em; margin: 0 1em 1em 0; width: 880px; }
table.facts-table { width: 400px; }
table.facts-table td:first-child { white-space: nowrap; }
.card h3 { font-size: 1.05em; margin: 0 0 .3em 0; }
.badge { display: inline-block; font-size: .8em; font-weight: 600; border-radius: 4px;
  padding: .1em .5em; margin-left: .6em; color: #fff; vertical-align: middle; }
.ok { background: #2e7d32; } .idle { background: #757575; }
.blocked { background: #c62828; } .warn { background: #ef6c00; }
.why { font-size: .9em; margin: .25em 0 .5em 0; }
.why.stall { color: #b71c1c; }
.row { display: flex; gap: 1.2em; align-items: flex-start; flex-wrap: wrap; }
svg { background: #fbfbfb; border: 1px solid #e0e0e0; }
svg text { font-size: 10px; fill: #555; font-family: system-ui, sans-serif; }
.legend span { font-size: .8em; margin-right: 1em; }
.bad { color: #b00; font-weight: 600; }
</style></head>
<body>
<h1 id="title">reverb_py</h1>
<div id="updated">waiting for the first update...</div>
<div id="error"></div>
<div class="facts" id="server"></div>
<h2>Tables</h2>
<div id="tables"></div>
<h2>Calls</h2>
<table class="t" id="rpc"><thead><tr><th>method</th><th>calls</th><th>calls/s</th>
<th>errors</th><th>mean duration</th><th>open now</th></tr></thead><tbody></tbody></table>
<script>
"use strict";
const KEEP_SECONDS = 300, W = 360, H = 120, PAD_L = 44, PAD_B = 16, PAD_T = 8;
const history = {};
let previous = null;

function num(x) {
  if (x === "+Inf") return Infinity;
  if (x === "-Inf") return -Infinity;
  return (x === undefined || x === null) ? undefined : x;
}
// A rate limiter's bound: Reverb's "no bound" is the largest double.
function limit(x) {
  x = num(x);
  return (x !== undefined && Math.abs(x) >= 1e300) ? (x > 0 ? Infinity : -Infinity) : x;
}
function esc(s) {
  return String(s).replace(/[&<>"]/g,
    c => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"}[c]));
}
function fmt(x, d) {
  x = num(x);
  if (x === undefined) return "-";
  if (x === Infinity) return "\u221e";
  if (x === -Infinity) return "-\u221e";
  return x.toFixed(d);
}
// A number as a person writes it: integers without decimals.
function plain(x) {
  x = num(x);
  return (x === undefined || !isFinite(x) || Number.isInteger(x)) ? fmt(x, 0) : fmt(x, 2);
}
function short(x) {
  x = num(x);
  if (x === undefined) return "-";
  if (!isFinite(x)) return fmt(x, 0);
  const a = Math.abs(x);
  if (a >= 1e9) return (x / 1e9).toFixed(1) + "G";
  if (a >= 1e6) return (x / 1e6).toFixed(1) + "M";
  if (a >= 1e4) return (x / 1e3).toFixed(1) + "k";
  if (a >= 100 || Number.isInteger(x)) return x.toFixed(0);
  return x.toFixed(a >= 10 ? 1 : 2);
}
function duration(s) {
  s = num(s);
  if (s === undefined || !isFinite(s)) return "-";
  if (s === 0) return "0 s";
  if (s < 1e-3) return (s * 1e6).toFixed(0) + " \u00b5s";
  if (s < 1) return (s * 1e3).toFixed(s < 0.01 ? 2 : 1) + " ms";
  if (s < 90) return s.toFixed(1) + " s";
  if (s < 5400) return (s / 60).toFixed(1) + " min";
  if (s < 172800) return (s / 3600).toFixed(1) + " h";
  return (s / 86400).toFixed(1) + " d";
}
function bytes(b) {
  b = num(b);
  if (b === undefined) return "-";
  if (b >= 1 << 30) return (b / (1 << 30)).toFixed(2) + " GiB";
  if (b >= 1 << 20) return (b / (1 << 20)).toFixed(1) + " MiB";
  if (b >= 1024) return (b / 1024).toFixed(1) + " KiB";
  return b.toFixed(0) + " B";
}
function perSecond(now, before, key, dt) {
  if (!before || !(dt > 0) || now[key] === undefined || before[key] === undefined) return 0;
  return Math.max(0, (now[key] - before[key]) / dt);
}
// The bucket bound under which a fraction q of the observations fell (from cumulative
// [le, count] pairs, optionally less an earlier copy of them).
function quantile(buckets, earlier, q) {
  if (!buckets || !buckets.length) return undefined;
  const counts = buckets.map((b, i) => b[1] - (earlier && earlier[i] ? earlier[i][1] : 0));
  const total = counts[counts.length - 1];
  if (!(total > 0)) return undefined;
  for (let i = 0; i < buckets.length; i++) {
    if (counts[i] >= q * total) return num(buckets[i][0]) === Infinity ? Infinity :
      parseFloat(buckets[i][0]);
  }
  return Infinity;
}
function bound(x) { return x === Infinity ? "> last bucket" : "\u2264 " + duration(x); }

// A chart with a y scale (0 .. max, three ticks) and a time axis (-5 min .. now).
function chart(series, maxValue, now, unit, extra) {
  const w = W - PAD_L - 6, h = H - PAD_B - PAD_T;
  const y = v => PAD_T + h - (maxValue > 0 ? Math.min(v, maxValue) / maxValue : 0) * h;
  const x = t => PAD_L + w * (1 - Math.min(KEEP_SECONDS, Math.max(0, now - t)) / KEEP_SECONDS);
  let svg = '<svg width="' + W + '" height="' + H + '" viewBox="0 0 ' + W + " " + H + '">';
  for (const f of [0, 0.5, 1]) {
    const v = maxValue * f, yy = y(v).toFixed(1);
    svg += '<line x1="' + PAD_L + '" x2="' + (W - 6) + '" y1="' + yy + '" y2="' + yy +
      '" stroke="#e6e6e6"/><text x="' + (PAD_L - 4) + '" y="' + (+yy + 3) +
      '" text-anchor="end">' + short(v) + unit + "</text>";
  }
  for (const [t, label] of [[KEEP_SECONDS, "-5 min"], [KEEP_SECONDS / 2, "-2.5 min"],
                            [0, "now"]]) {
    const xx = x(now - t);
    svg += '<text x="' + xx.toFixed(1) + '" y="' + (H - 3) + '" text-anchor="' +
      (t === 0 ? "end" : t === KEEP_SECONDS ? "start" : "middle") + '">' + label + "</text>";
  }
  if (extra !== undefined && maxValue > 0) {
    const yy = y(extra.value).toFixed(1);
    svg += '<line x1="' + PAD_L + '" x2="' + (W - 6) + '" y1="' + yy + '" y2="' + yy +
      '" stroke="' + extra.color + '" stroke-dasharray="4 3"/>';
  }
  for (const s of series) {
    if (s.points.length < 2) continue;
    const pts = s.points.map(p => x(p[0]).toFixed(1) + "," + y(p[1]).toFixed(1)).join(" ");
    svg += '<polyline fill="none" stroke="' + s.color + '" stroke-width="1.5" points="' +
      pts + '"/>';
  }
  return svg + "</svg>";
}

// The rate limiter's cursor between min_diff and max_diff, on a line.
function cursorGauge(t) {
  const lo = limit(t.rate_limiter_min_diff), hi = limit(t.rate_limiter_max_diff);
  const c = num(t.rate_limiter_cursor), spi = num(t.rate_limiter_samples_per_insert) || 1;
  const finite = [lo, hi, c].filter(v => v !== undefined && isFinite(v));
  let a = Math.min(...finite), b = Math.max(...finite);
  const span = Math.max(b - a, 2 * spi, 1);
  a -= span * 0.15; b += span * 0.15;
  const w = 380, x0 = 10, px = v => x0 + (v === -Infinity ? 0 : v === Infinity ? w :
    (v - a) / (b - a) * w);
  let svg = '<svg class="gauge" width="' + (w + 20) + '" height="58" viewBox="0 0 ' +
    (w + 20) + ' 58">';
  svg += '<rect x="' + px(lo).toFixed(1) + '" y="20" width="' +
    Math.max(1, px(hi) - px(lo)).toFixed(1) + '" height="10" fill="#c8e6c9"/>';
  svg += '<line x1="' + x0 + '" x2="' + (x0 + w) + '" y1="25" y2="25" stroke="#999"/>';
  for (const [v, label, anchor] of [[lo, "min_diff", "start"], [hi, "max_diff", "end"]]) {
    const xx = px(v).toFixed(1);
    svg += '<line x1="' + xx + '" x2="' + xx + '" y1="16" y2="34" stroke="#2e7d32" ' +
      'stroke-width="2"/><text x="' + xx + '" y="46" text-anchor="' + anchor + '">' +
      label + " " + plain(v) + "</text>";
  }
  const cx = px(c).toFixed(1);
  svg += '<circle cx="' + cx + '" cy="25" r="5" fill="#1565c0"/><text x="' + cx +
    '" y="11" text-anchor="middle">cursor ' + plain(c) + "</text>";
  return svg + "</svg>";
}

// Which side waits, since when, and why, in words.
function diagnose(t) {
  const size = num(t.size) || 0, minSize = num(t.rate_limiter_min_size_to_sample) || 0;
  const c = num(t.rate_limiter_cursor), spi = num(t.rate_limiter_samples_per_insert);
  const lo = limit(t.rate_limiter_min_diff), hi = limit(t.rate_limiter_max_diff);
  const wi = num(t.waiting_inserts) || 0, ws = num(t.waiting_sample_requests) || 0;
  const lines = [];
  let badge = ["ok", "flowing"];
  let sampleWhy, insertWhy;
  if (size < minSize) {
    sampleWhy = "the table holds " + size + " items, fewer than min_size_to_sample " +
      minSize + ": sampling needs " + (minSize - size) + " more inserts";
  } else if (c - 1 < lo) {
    sampleWhy = "a sample would take the cursor from " + plain(c) + " below min_diff " +
      plain(lo) + ": sampling needs inserts (each adds samples_per_insert " + plain(spi) + ")";
  }
  if (size + 1 > minSize && c + spi > hi) {
    insertWhy = "an insert would take the cursor from " + plain(c) + " above max_diff " +
      plain(hi) + ": inserting needs samples (each subtracts 1)";
  }
  if (ws > 0) {
    badge = ["blocked", "samples blocked " + duration(t.rate_limiter_blocked_for_seconds_sample)];
    lines.push('<div class="why stall">' + ws + " sample request" + (ws > 1 ? "s" : "") +
      " waiting for " + duration(t.rate_limiter_blocked_for_seconds_sample) + ": " +
      esc(sampleWhy || "the rate limiter held them") + ".</div>");
  }
  if (wi > 0) {
    if (ws === 0) badge = ["blocked", "inserts blocked " +
      duration(t.rate_limiter_blocked_for_seconds_insert)];
    lines.push('<div class="why stall">' + wi + " insert" + (wi > 1 ? "s" : "") +
      " waiting for " + duration(t.rate_limiter_blocked_for_seconds_insert) + ": " +
      esc(insertWhy || "the rate limiter held them") + ".</div>");
  }
  if (!ws && !wi) {
    if (!num(t.rate_limiter_allows_sample) && sampleWhy) {
      badge = ["idle", "a sample would wait"];
      lines.push('<div class="why">Nobody waits; a sample would: ' + esc(sampleWhy) + ".</div>");
    } else if (!num(t.rate_limiter_allows_insert) && insertWhy) {
      badge = ["warn", "an insert would wait"];
      lines.push('<div class="why">Nobody waits; an insert would: ' + esc(insertWhy) + ".</div>");
    } else {
      lines.push('<div class="why">Nobody waits for the rate limiter.</div>');
    }
  }
  return {badge, html: lines.join("")};
}

function renderServer(status, dt) {
  const s = status.server, build = s.build_info || {}, auth = s.server_auth_info || {};
  const before = previous ? previous.server : null;
  document.getElementById("title").textContent = "reverb_py " + (build.version || "");
  const facts = [];
  const fact = (label, value, cls) => facts.push("<div><span>" + label + "</span> " +
    (cls ? '<b class="' + cls + '">' : "<b>") + value + "</b></div>");
  fact("implementation", esc(build.implementation || "-"));
  fact("uptime", duration(status.time - num(s.server_start_time_seconds)));
  fact("token", esc(auth.token || "-"));
  fact("TLS", esc(auth.tls || "-"));
  const last = num(s.checkpoint_last_success_timestamp_seconds);
  fact("last checkpoint", last === undefined ? "none yet" :
    duration(status.time - last) + " ago, " + bytes(s.checkpoint_size_bytes) + ", " +
    short(s.checkpoint_items) + " items, took " + duration(s.checkpoint_last_duration_seconds));
  fact("checkpoint failures", short(s.checkpoint_failures || 0),
    s.checkpoint_failures ? "bad" : "");
  fact("chunks held", bytes(s.chunk_bytes));
  if (s.process_resident_memory_bytes !== undefined) {
    fact("memory", bytes(s.process_resident_memory_bytes));
    fact("CPU", (100 * perSecond(s, before, "process_cpu_seconds", dt)).toFixed(0) + " %");
  }
  document.getElementById("server").innerHTML = facts.join("");
}

function renderRpc(status, dt) {
  const rows = [];
  const open = status.server;
  for (const method of Object.keys(status.rpc).sort()) {
    const r = status.rpc[method], p = previous && previous.rpc[method];
    if (!r.calls) continue;
    const errors = Object.keys(r).filter(k => k.startsWith("errors_"))
      .map(k => k.slice(7) + " " + r[k]);
    const count = r.duration_seconds_count || 0;
    const recent = p ? count - (p.duration_seconds_count || 0) : 0;
    const mean = recent > 0 ? (r.duration_seconds_sum - p.duration_seconds_sum) / recent :
      (count > 0 ? r.duration_seconds_sum / count : undefined);
    const streams = open["open_streams_" + method];
    rows.push("<tr><td>" + esc(method) + "</td><td>" + short(r.calls) + "</td><td>" +
      short(perSecond(r, p, "calls", dt)) + '</td><td class="' + (errors.length ? "bad" : "") +
      '">' + (errors.length ? esc(errors.join(", ")) : "0") + "</td><td>" + duration(mean) +
      "</td><td>" + (streams === undefined ? "" : short(streams)) + "</td></tr>");
  }
  document.querySelector("#rpc tbody").innerHTML = rows.join("");
}

function renderTables(status, dt) {
  const names = Object.keys(status.tables).sort();
  const cards = [];
  for (const name of names) {
    const t = status.tables[name], p = previous && previous.tables[name];
    const points = history[name] = (history[name] || []);
    const ins = perSecond(t, p, "inserts", dt), smp = perSecond(t, p, "samples", dt);
    points.push({time: status.time, size: t.size || 0, ins: ins, smp: smp});
    while (points.length > 2 && status.time - points[0].time > KEEP_SECONDS) points.shift();
    const ageCount = t.sampled_item_age_seconds_count || 0;
    const recentAges = p ? ageCount - (p.sampled_item_age_seconds_count || 0) : 0;
    const meanAge = recentAges > 0 ?
      (t.sampled_item_age_seconds_sum - p.sampled_item_age_seconds_sum) / recentAges :
      (ageCount > 0 ? t.sampled_item_age_seconds_sum / ageCount : undefined);
    const ageEarlier = recentAges > 0 ? p.sampled_item_age_seconds_bucket : null;
    const p50 = quantile(t.sampled_item_age_seconds_bucket, ageEarlier, 0.5);
    const p90 = quantile(t.sampled_item_age_seconds_bucket, ageEarlier, 0.9);
    const d = diagnose(t);
    const e = esc(name);
    const facts = [
      ["size", short(t.size) + " / " + short(t.max_size)],
      ["min_size_to_sample", short(t.rate_limiter_min_size_to_sample)],
      ["samples_per_insert", plain(t.rate_limiter_samples_per_insert)],
      ["waiting inserts", short(t.waiting_inserts), t.waiting_inserts ? "bad" : ""],
      ["waiting sample requests", short(t.waiting_sample_requests),
       t.waiting_sample_requests ? "bad" : ""],
      ["inserts/s", short(ins)],
      ["samples/s", short(smp)],
      ["evictions", short(t.evictions) + " (" + short(perSecond(t, p, "evictions", dt)) + "/s)"],
      ["sampled item age", ageCount ? "mean " + duration(meanAge) + ", p50 " + bound(p50) +
        ", p90 " + bound(p90) : "nothing sampled yet"],
      ["inserts waited in all", duration(t.rate_limiter_blocked_seconds_insert)],
      ["samples waited in all", duration(t.rate_limiter_blocked_seconds_sample)],
      ["chunks", bytes(t.chunk_bytes) + (t.max_chunk_bytes ? " / " + bytes(t.max_chunk_bytes) :
        "")],
    ];
    const maxSize = Math.max(1, num(t.max_size) || 1, ...points.map(q => q.size));
    const maxRate = Math.max(1, ...points.map(q => Math.max(q.ins, q.smp))) * 1.1;
    cards.push('<div class="card" data-table="' + e + '"><h3>' + e + '<span class="badge ' +
      d.badge[0] + '">' + esc(d.badge[1]) + "</span></h3>" + d.html +
      '<div class="row"><div>' + cursorGauge(t) +
      '<table class="t facts-table"><tbody>' + facts.map(f => "<tr><td>" + f[0] +
        '</td><td class="' + (f[2] || "") + '" data-field="' + f[0] + '">' + f[1] +
        "</td></tr>").join("") + "</tbody></table></div>" +
      "<div>" + chart([{points: points.map(q => [q.time, q.size]), color: "#1f77b4"}],
        Math.max(maxSize, num(t.max_size) || 0), status.time, "",
        {value: num(t.max_size), color: "#9ecae1"}) +
      '<div class="legend"><span style="color:#1f77b4">size</span>' +
      '<span style="color:#9ecae1">- - max_size</span></div>' +
      chart([{points: points.map(q => [q.time, q.ins]), color: "#2ca02c"},
             {points: points.map(q => [q.time, q.smp]), color: "#d62728"}],
        maxRate, status.time, "/s") +
      '<div class="legend"><span style="color:#2ca02c">inserts/s</span>' +
      '<span style="color:#d62728">samples/s</span></div></div></div></div>');
  }
  document.getElementById("tables").innerHTML = cards.join("");
  return names.length;
}

function render(status) {
  const dt = previous ? status.time - previous.time : 0;
  renderServer(status, dt);
  const count = renderTables(status, dt);
  renderRpc(status, dt);
  previous = status;
  document.getElementById("error").textContent = "";
  document.getElementById("updated").textContent =
    count + " tables, updated " + new Date(status.time * 1000).toLocaleTimeString();
}
async function update() {
  try {
    // Relative to the page, without the user and password a URL may carry (fetch
    // refuses those; the browser sends the credentials it was given for the page).
    const url = new URL("status.json", location.origin + location.pathname);
    const response = await fetch(url, {cache: "no-store"});
    if (response.status === 401) {
      document.getElementById("error").textContent =
        "the server needs its token (basic authentication, the token as the password)";
      return;
    }
    render(await response.json());
  } catch (error) {
    document.getElementById("error").textContent = "no answer from the server: " + error;
  }
}
update();
setInterval(update, 2000);
</script>
</body></html>
"""

PAGE = _HTML.encode()
