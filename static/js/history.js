// History: any metric of the stats database (GET /api/stats/metrics) over a time range
// (GET /api/stats?metric=&t0=&t1=&step=), charted. The choice lives in the URL, so a view
// can be bookmarked or pasted to a colleague. Presets ("last 15m") follow the clock.

import { TimeChart } from "./charts.js";
import {
  Alert, api, el, fmtBytes, fmtCompact, fmtDateTime, fmtInt, fmtMs, fmtPercent, setText,
} from "./ui.js";

const alert = new Alert(document.getElementById("page-alert"));
const $id = (id) => document.getElementById(id);
const form = $id("history-form");
const metricInput = $id("metric");
const t0Input = $id("t0");
const t1Input = $id("t1");
const stepSelect = $id("step");
const presets = [...document.querySelectorAll("#presets button")];

let interval = 10;
let metrics = [];
/** seconds of the active preset (a range ending now), or null for a fixed range */
let preset = 3600;
let refreshTimer = null;
let chart = null;
let chartMetric = null;
/** [t0, t1] of the last query: the chart shows the whole window asked for */
let shownRange = null;

function formatterFor(metric) {
  if (/bytes/.test(metric)) return fmtBytes;
  if (/_ms$|latency/.test(metric)) return fmtMs;
  if (/percent/.test(metric)) return fmtPercent;
  return fmtCompact;
}

/** "2024-05-01T12:00:00" (a datetime-local value, read as UTC) <-> epoch seconds */
function toInput(epoch) {
  return new Date(epoch * 1000).toISOString().slice(0, 19);
}

function fromInput(value) {
  if (!value) return null;
  const full = value.length === 16 ? `${value}:00` : value;
  const t = Date.parse(`${full}Z`);
  return Number.isNaN(t) ? null : t / 1000;
}

function markPreset() {
  for (const b of presets) b.setAttribute("aria-pressed", String(Number(b.dataset.range) === preset));
}

function applyPreset(seconds) {
  preset = seconds;
  const now = Date.now() / 1000;
  t1Input.value = toInput(now);
  t0Input.value = toInput(now - seconds);
  markPreset();
}

function saveUrl() {
  const params = new URLSearchParams();
  params.set("metric", metricInput.value.trim());
  if (preset !== null) params.set("last", String(preset));
  else {
    params.set("t0", t0Input.value);
    params.set("t1", t1Input.value);
  }
  if (stepSelect.value) params.set("step", stepSelect.value);
  history.replaceState(null, "", `${location.pathname}?${params}`);
}

function loadUrl() {
  const params = new URLSearchParams(location.search);
  if (params.get("metric")) metricInput.value = params.get("metric");
  if (params.get("step")) stepSelect.value = params.get("step");
  if (params.get("t0") && params.get("t1")) {
    preset = null;
    t0Input.value = params.get("t0");
    t1Input.value = params.get("t1");
    markPreset();
  } else {
    applyPreset(Number(params.get("last")) || 3600);
  }
}

/** Points as uPlot columns, with a null where samples are missing (a visible gap). */
function columns(points, step) {
  const gap = 2.5 * Math.max(step || 0, interval);
  const xs = [];
  const ys = [];
  let last = null;
  for (const [t, v] of points) {
    if (last !== null && t - last > gap) {
      xs.push(last + gap / 2);
      ys.push(null);
    }
    xs.push(t);
    ys.push(v);
    last = t;
  }
  return [xs, ys];
}

function summarize(metric, points, fmt) {
  const values = points.map((p) => p[1]);
  const rows = values.length === 0 ? [["samples", "0"]] : [
    ["samples", fmtInt(values.length)],
    ["last", fmt(values[values.length - 1])],
    ["min", fmt(Math.min(...values))],
    ["max", fmt(Math.max(...values))],
    ["mean", fmt(values.reduce((a, b) => a + b, 0) / values.length)],
    ["first sample", `${fmtDateTime(points[0][0])} UTC`],
    ["last sample", `${fmtDateTime(points[points.length - 1][0])} UTC`],
  ];
  $id("summary").replaceChildren(el("dt", { text: "metric" }), el("dd", { text: metric }),
    ...rows.flatMap(([k, v]) => [el("dt", { text: k }), el("dd", { text: v })]));
}

async function show() {
  clearTimeout(refreshTimer);
  const metric = metricInput.value.trim();
  if (!metric) return;
  if (preset !== null) applyPreset(preset);
  const t0 = fromInput(t0Input.value);
  const t1 = fromInput(t1Input.value);
  if (t0 === null || t1 === null) {
    alert.error({ error: "bad range", detail: "give both From and To" });
    return;
  }
  if (t0 >= t1) {
    alert.error({ error: "bad range", detail: "From must be before To" });
    return;
  }
  saveUrl();
  const params = new URLSearchParams({ metric, t0: `${t0Input.value}Z`, t1: `${t1Input.value}Z` });
  if (stepSelect.value) params.set("step", stepSelect.value);
  try {
    const series = await api(`/api/stats?${params}`);
    shownRange = [t0, t1];
    const fmt = formatterFor(metric);
    if (chart === null || chartMetric !== metric) {
      chart?.destroy();
      $id("chart-history").replaceChildren();
      chart = new TimeChart($id("chart-history"), {
        series: [{ label: metric, color: "--accent", fill: true, fmt }],
        yFormat: fmt,
        height: 340,
        zeroBased: !/seq|time/.test(metric),
        empty: "no samples in this range",
        xRange: () => shownRange,
      });
      chartMetric = metric;
    }
    chart.setData(columns(series.points, series.step));
    setText($id("points-label"),
      `${fmtInt(series.points.length)} points${series.step ? ` · step ${series.step} s` : " · raw"}`);
    setText($id("range-label"), `${fmtDateTime(t0)} → ${fmtDateTime(t1)} UTC`);
    summarize(metric, series.points, fmt);
    alert.clear();
  } catch (err) {
    alert.error(err, metric);
  }
  if (preset !== null) refreshTimer = setTimeout(show, Math.max(5, interval) * 1000);
}

async function loadMetrics() {
  try {
    const answer = await api("/api/stats/metrics");
    metrics = answer.metrics ?? [];
    interval = Number(answer.interval) || interval;
    $id("metric-list").replaceChildren(...metrics.map((m) => el("option", { value: m })));
    if (!metricInput.value && metrics.length) {
      metricInput.value = metrics.find((m) => /msgs_in_rate$/.test(m))
        ?? metrics.find((m) => /msgs_in/.test(m)) ?? metrics[0];
    }
    if (metrics.length === 0) {
      alert.error({ error: "no data", detail: "the stats database has no series yet (the sampler writes one every interval)" });
    }
  } catch (err) {
    alert.error(err, "metrics");
  }
}

for (const b of presets) {
  b.addEventListener("click", () => {
    applyPreset(Number(b.dataset.range));
    show();
  });
}
for (const input of [t0Input, t1Input]) {
  input.addEventListener("change", () => {
    preset = null;
    markPreset();
  });
}
form.addEventListener("submit", (e) => {
  e.preventDefault();
  show();
});
metricInput.addEventListener("change", () => {
  if (metrics.includes(metricInput.value.trim())) show();
});

loadUrl();
await loadMetrics();
await show();
