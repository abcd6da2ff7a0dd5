// History: series of the stats database (GET /api/stats/metrics) over a time range
// (GET /api/stats?metric=&t0=&t1=&step=, one request per series), overlaid on one chart,
// each in its own colour. The choice lives in the URL (`metric=a&metric=b`), so a view can
// be bookmarked or pasted to a colleague. Presets ("last 15m") follow the clock.

import { TimeChart } from "./charts.js";
import {
  Alert, api, el, fmtBytes, fmtCompact, fmtDateTime, fmtInt, fmtMs, fmtPercent, setText,
} from "./ui.js";

const alert = new Alert(document.getElementById("page-alert"));
const $id = (id) => document.getElementById(id);
const form = $id("history-form");
const metricInput = $id("metric");
const seriesList = $id("series-list");
const t0Input = $id("t0");
const t1Input = $id("t1");
const stepSelect = $id("step");
const presets = [...document.querySelectorAll("#presets button")];

let interval = 10;
let metrics = [];
/** seconds of the active preset (a range ending now), or null for a fixed range */
let preset = 3600;
let refreshTimer = null;
/** The series shown, in the order they were added (their colours follow it). */
let shown = [];
let chart = null;
/** The series the chart was built for (a different list builds a new one). */
let chartKey = null;
/** [t0, t1] of the last query: the chart shows the whole window asked for */
let shownRange = null;

/**
 * What the page opens on when the URL names no series: the instance's own message rates,
 * in and out (not the first series of the list, often a client's idle rate).
 */
const OPENING_SERIES = ["instance/msgs_in_rate", "instance/msgs_out_rate"];

/** Series colours, by position in the list (CSS variables, so they follow the theme). */
const COLOURS = ["--in", "--out", "--accent", "--p99", "--p50", "--err", "--muted", "--text"];

function colourOf(i) {
  return COLOURS[i % COLOURS.length];
}

function formatterFor(metric) {
  if (/bytes/.test(metric)) return fmtBytes;
  if (/_ms$|latency/.test(metric)) return fmtMs;
  if (/percent/.test(metric)) return fmtPercent;
  return fmtCompact;
}

/**
 * The From/To fields hold UTC in 24-hour form, "2024-05-01 12:00:00", as plain text: a
 * browser's own date-time input shows its locale (12-hour AM/PM in en-US) whatever the
 * page says. "2024-05-01T12:00" (the older URLs' form, no seconds) is read too.
 */
function toInput(epoch) {
  return new Date(epoch * 1000).toISOString().slice(0, 19).replace("T", " ");
}

/** A field's value as ISO-8601 UTC ("2024-05-01T12:00:00Z"), null when it is not a time. */
function isoOf(value) {
  const m = /^(\d{4}-\d{2}-\d{2})[ T](\d{2}:\d{2})(:\d{2})?$/.exec(value.trim());
  return m ? `${m[1]}T${m[2]}${m[3] ?? ":00"}Z` : null;
}

function fromInput(value) {
  const iso = isoOf(value);
  const t = iso === null ? NaN : Date.parse(iso);
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
  for (const metric of shown) params.append("metric", metric);
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
  shown = [...new Set(params.getAll("metric").map((m) => m.trim()).filter(Boolean))];
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

/** Points as [xs, ys], with a null where samples are missing (a visible gap). */
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

/**
 * Several series' columns on one time axis, as uPlot data. A series without a sample at
 * another's time gets `undefined` there, which uPlot draws across (a null is a gap).
 */
function aligned(all) {
  const xs = [...new Set(all.flatMap(([times]) => times))].sort((a, b) => a - b);
  const ys = all.map(([times, values]) => {
    const at = new Map(times.map((t, i) => [t, values[i]]));
    return xs.map((t) => (at.has(t) ? at.get(t) : undefined));
  });
  return [xs, ...ys];
}

function summaryRow(metric, points, fmt, i) {
  const values = points.map((p) => p[1]);
  const swatch = el("span", { text: "■ ", style: { color: `var(${colourOf(i)})` } });
  const cells = values.length === 0 ? [fmtInt(0), "–", "–", "–", "–", "–", "–"] : [
    fmtInt(values.length),
    fmt(values[values.length - 1]),
    fmt(Math.min(...values)),
    fmt(Math.max(...values)),
    fmt(values.reduce((a, b) => a + b, 0) / values.length),
    fmtDateTime(points[0][0]),
    fmtDateTime(points[points.length - 1][0]),
  ];
  return el("tr", { dataset: { metric } },
    el("td", { className: "mono" }, swatch, metric),
    ...cells.map((text, c) => el("td", { className: c < 5 ? "num" : "mono", text })));
}

/** The list of series above the chart: each with its colour and a button to remove it. */
function renderList() {
  seriesList.replaceChildren(...shown.map((metric, i) => el("span", {
    className: "series mono", dataset: { metric },
  },
  el("span", { text: "■ ", style: { color: `var(${colourOf(i)})` } }),
  metric,
  " ",
  el("button", { type: "button", className: "small remove", text: "×", title: `remove ${metric}`,
    attrs: { "aria-label": `remove ${metric}` }, onclick: () => removeSeries(metric) }))));
}

/** Add the series typed or picked (once), and show the list again. */
function addSeries() {
  const metric = metricInput.value.trim();
  if (metric && !shown.includes(metric)) shown.push(metric);
  metricInput.value = "";
  renderList();
  show();
}

function removeSeries(metric) {
  shown = shown.filter((m) => m !== metric);
  renderList();
  show();
}

function buildChart() {
  const key = JSON.stringify(shown);
  if (chart !== null && chartKey === key) return;
  chart?.destroy();
  $id("chart-history").replaceChildren();
  const fmts = shown.map(formatterFor);
  chart = new TimeChart($id("chart-history"), {
    series: shown.map((metric, i) => ({ label: metric, color: colourOf(i), fill: shown.length === 1,
      fmt: fmts[i] })),
    yFormat: fmts[0],
    height: 340,
    zeroBased: !shown.some((m) => /seq|time/.test(m)),
    empty: "no samples in this range",
    xRange: () => shownRange,
  });
  chartKey = key;
}

async function show() {
  clearTimeout(refreshTimer);
  if (preset !== null) applyPreset(preset);
  saveUrl();
  if (shown.length === 0) {
    chart?.destroy();
    chart = null;
    chartKey = null;
    $id("chart-history").replaceChildren();
    $id("summary").tBodies[0].replaceChildren();
    setText($id("points-label"), "add a series to chart it");
    return;
  }
  const t0 = fromInput(t0Input.value);
  const t1 = fromInput(t1Input.value);
  if (t0 === null || t1 === null) {
    alert.error({ error: "bad range", detail: "give From and To as YYYY-MM-DD HH:MM:SS (UTC)" });
    return;
  }
  if (t0 >= t1) {
    alert.error({ error: "bad range", detail: "From must be before To" });
    return;
  }
  const metricsShown = [...shown];
  const answers = await Promise.allSettled(metricsShown.map((metric) => {
    const params = new URLSearchParams({ metric, t0: isoOf(t0Input.value), t1: isoOf(t1Input.value) });
    if (stepSelect.value) params.set("step", stepSelect.value);
    return api(`/api/stats?${params}`);
  }));
  if (JSON.stringify(metricsShown) !== JSON.stringify(shown)) return; // the list changed meanwhile
  shownRange = [t0, t1];
  buildChart();
  const series = answers.map((a) => (a.status === "fulfilled" ? a.value : { points: [], step: null }));
  chart.setData(aligned(series.map((s) => columns(s.points, s.step))));
  const points = series.reduce((n, s) => n + s.points.length, 0);
  const step = series.find((s) => s.step)?.step;
  setText($id("points-label"), `${fmtInt(points)} points${step ? ` · step ${step} s` : " · raw"}`);
  setText($id("range-label"), `${fmtDateTime(t0)} → ${fmtDateTime(t1)} UTC`);
  $id("summary").tBodies[0].replaceChildren(...metricsShown.map((metric, i) =>
    summaryRow(metric, series[i].points, formatterFor(metric), i)));
  const failed = answers.findIndex((a) => a.status === "rejected");
  if (failed >= 0) alert.error(answers[failed].reason, metricsShown[failed]);
  else alert.clear();
  if (preset !== null) refreshTimer = setTimeout(show, Math.max(5, interval) * 1000);
}

async function loadMetrics() {
  try {
    const answer = await api("/api/stats/metrics");
    metrics = answer.metrics ?? [];
    interval = Number(answer.interval) || interval;
    $id("metric-list").replaceChildren(...metrics.map((m) => el("option", { value: m })));
    if (shown.length === 0) {
      shown = OPENING_SERIES.filter((m) => metrics.includes(m));
      renderList();
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
  if (metricInput.value.trim()) addSeries();
  else show();
});
$id("add-metric").addEventListener("click", addSeries);
metricInput.addEventListener("change", () => {
  if (metrics.includes(metricInput.value.trim())) addSeries();
});

loadUrl();
renderList();
await loadMetrics();
await show();
