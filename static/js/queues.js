// Queues: GET /api/queues every 2 s (depth, backlog, leases, ownership per instance), the
// depth and age of the selected queue as charts (opening with what the stats database holds
// of their ten minutes, stored.js), its first leases, and the proxied-transfer switch (an
// admin POST; the broker answers 409 while queues are not replicated, and the page shows
// that answer).

import { TimeChart } from "./charts.js";
import { fetchStored, joinStored, metricSegment } from "./stored.js";
import {
  Alert, KeyedTable, Poller, allowAction, api, busy, confirmDialog, el, fmtDuration, fmtInt, setText,
} from "./ui.js";

const alert = new Alert(document.getElementById("page-alert"));
const $id = (id) => document.getElementById(id);
/** Points kept per queue for the charts (10 minutes at one poll every 2 s). */
const MAX_POINTS = 300;
/** The charts' window, in seconds. */
const WINDOW = 600;
const history = new Map();
/** Per queue: what the stats database held of the window when it was first charted. */
const stored = new Map();
let selected = null;

/** The stats series of a queue's charts, by the polled field they continue. */
function storedSeries(name) {
  const base = `queues/${metricSegment(name)}`;
  return Object.fromEntries(["depth", "leased", "oldest_message_age", "oldest_undelivered_age",
    "oldest_lease_age"].map((field) => [field, `${base}/${field}`]));
}

/** The queue's stored points (none until the stats database answered, asked once per queue). */
function storedOf(name) {
  let entry = stored.get(name);
  if (entry === undefined) {
    entry = { points: [], interval: null };
    stored.set(name, entry);
    fetchStored(storedSeries(name), WINDOW).then((answer) => {
      stored.set(name, answer);
      if (name === selected) drawCharts(name);
    });
  }
  return entry;
}

/** `x` with at most `digits` decimals, trailing zeros dropped: 2.50 -> "2.5", 3.0 -> "3". */
function trimmed(x, digits) {
  return String(Number(x.toFixed(digits)));
}

/**
 * An age (seconds) with its unit, for the Age chart's axis and legend: "0 s", "0.25 s",
 * "12 s", "3 min", "1.5 h", "2 d". Ages of a second or less are the usual case, so the
 * fractions of a second stay; a larger age takes the unit that keeps the number short.
 */
function fmtAge(seconds) {
  if (seconds === null || seconds === undefined || Number.isNaN(seconds)) return "–";
  const s = Math.max(0, seconds);
  if (s < 60) return `${trimmed(s, s < 0.1 ? 3 : s < 1 ? 2 : 1)} s`;
  if (s < 3600) return `${trimmed(s / 60, 1)} min`;
  if (s < 2 * 86400) return `${trimmed(s / 3600, 1)} h`;
  return `${trimmed(s / 86400, 1)} d`;
}

const depthChart = new TimeChart($id("chart-depth"), {
  series: [
    { label: "depth", color: "--in", fill: true, fmt: fmtInt },
    { label: "leased", color: "--out", fmt: fmtInt },
  ],
  yFormat: fmtInt,
  window: WINDOW,
});
const ageChart = new TimeChart($id("chart-age"), {
  series: [
    { label: "oldest message", color: "--p99", fmt: fmtAge },
    { label: "oldest undelivered", color: "--warn", fmt: fmtAge },
    { label: "oldest lease", color: "--p50", fmt: fmtAge },
  ],
  yFormat: fmtAge,
  window: WINDOW,
});

async function switchTransfer(button, q) {
  const verb = q.proxied_transfer ? "disable" : "enable";
  const yes = await confirmDialog({
    title: `${verb === "enable" ? "Enable" : "Disable"} proxied transfer on ${q.name}?`,
    message: ["Proxied transfer lets this instance take over messages owned by an instance " +
      "that is offline; a message the owner delivered before it went down may be delivered twice."],
    confirm: verb === "enable" ? "Enable" : "Disable",
    danger: verb === "enable",
  });
  if (!yes) return;
  await busy(button, async () => {
    try {
      await api(`/api/queues/${encodeURIComponent(q.name)}/${verb}_proxied_transfer`, { method: "POST" });
      alert.ok(`proxied transfer ${verb}d on ${q.name}`);
    } catch (err) {
      alert.error(err, `${verb} proxied transfer on ${q.name}`);
    }
  });
  await poller.now();
}

const cells = ["name", "kind", "underlying_topic", "depth", "backlog", "leased", "consumers",
  "oldest_lease_age", "oldest_message_age", "oldest_undelivered_age", "owned", "transferred"];
const numeric = new Set(cells.slice(3));

function cell(field, q) {
  switch (field) {
    case "oldest_lease_age": case "oldest_message_age": case "oldest_undelivered_age":
      return q[field] ? fmtDuration(q[field]) : "–";
    case "transferred": return `${fmtInt(q.transferred_in)} / ${fmtInt(q.transferred_out)}`;
    case "name": case "kind": case "underlying_topic": return q[field];
    default: return fmtInt(q[field]);
  }
}

const table = new KeyedTable($id("queues-table").tBodies[0], {
  key: (q) => q.name,
  columns: cells.length + 2,
  empty: "No queue is configured",
  create(q) {
    const tr = el("tr", { className: "queue-row", onclick: () => { selected = q.name; redraw(); } });
    for (const field of cells) {
      tr.append(el("td", { className: numeric.has(field) ? "num" : "mono", dataset: { field } }));
    }
    const browse = el("a", { className: "button small browse", text: "messages",
      onclick: (ev) => ev.stopPropagation() });
    const button = el("button", { type: "button", className: "small proxied-transfer" });
    allowAction(button);
    button.addEventListener("click", (ev) => {
      ev.stopPropagation();
      switchTransfer(button, tr.queue);
    });
    const dead = el("a", { className: "button small dead-letters", text: "dead letters",
      onclick: (ev) => ev.stopPropagation() });
    tr.append(el("td", { className: "actions" }, button), el("td", { className: "actions" }, browse, " ", dead));
    return tr;
  },
  update(tr, q) {
    tr.queue = q;
    tr.querySelector("a.browse").href = `/queues/messages?queue=${encodeURIComponent(q.name)}`;
    const dead = tr.querySelector("a.dead-letters");
    dead.hidden = !q.dead_letter_topic;
    dead.href = `/queues/dead-letters?queue=${encodeURIComponent(q.name)}`;
    dead.title = `${fmtInt(q.dead_lettered ?? 0)} published to ${q.dead_letter_topic} by this instance since it started`;
    tr.classList.toggle("stuck", Boolean(q.stuck));
    tr.dataset.stuck = q.stuck ? "1" : "0";
    for (const td of tr.querySelectorAll("td[data-field]")) setText(td, cell(td.dataset.field, q));
    const button = tr.querySelector("button.proxied-transfer");
    setText(button, q.proxied_transfer ? "on: disable" : "off: enable");
    tr.classList.toggle("selected", q.name === selected);
  },
});

function leasesOf(q) {
  const body = $id("leases-table").tBodies[0];
  body.replaceChildren(...(q?.leases ?? []).map((l) => el("tr", {},
    el("td", { className: "mono", text: l.bookmark }),
    el("td", { className: "mono", text: l.consumer ?? "–" }),
    el("td", { className: "num", text: fmtInt(l.deliveries) }),
    el("td", { className: "num", text: fmtDuration(Math.max(0, l.expires_in)) }))));
  if (!body.rows.length) body.append(el("tr", {}, el("td", { colSpan: 4, className: "muted", text: "no lease" })));
  setText($id("leases-of"), q ? q.name : "");
}

let lastQueues = [];

function drawCharts(name) {
  const pts = joinStored(storedOf(name), history.get(name) ?? []);
  const xs = pts.map((p) => p.time);
  const col = (field) => pts.map((p) => p[field] ?? null);
  depthChart.setData([xs, col("depth"), col("leased")]);
  ageChart.setData([xs, col("oldest_message_age"), col("oldest_undelivered_age"),
    col("oldest_lease_age")]);
}

function redraw() {
  const q = lastQueues.find((x) => x.name === selected) ?? lastQueues[0];
  if (!q) return;
  selected = q.name;
  drawCharts(q.name);
  for (const tr of $id("queues-table").tBodies[0].rows) tr.classList.toggle("selected", tr.queue?.name === selected);
  api(`/api/queues/${encodeURIComponent(q.name)}`).then(leasesOf, (err) => alert.error(err, "leases"));
}

const poller = new Poller(async () => {
  try {
    const { queues } = await api("/api/queues");
    const now = Date.now() / 1000;
    for (const q of queues) {
      const pts = history.get(q.name) ?? [];
      pts.push({ time: now, depth: q.depth, leased: q.leased, oldest_message_age: q.oldest_message_age,
        oldest_undelivered_age: q.oldest_undelivered_age, oldest_lease_age: q.oldest_lease_age });
      if (pts.length > MAX_POINTS) pts.shift();
      history.set(q.name, pts);
    }
    lastQueues = queues;
    table.render(queues);
    redraw();
    setText($id("updated"), `updated ${new Date().toISOString().slice(11, 19)} UTC`);
  } catch (err) {
    alert.error(err, "queues");
  }
}, 2000);
poller.start();
