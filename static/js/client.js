// Client: one client, connected or gone (/clients/NAME, and /clients/NAME/subs/ID with one of
// its subscriptions chosen). Every second: the client (GET /api/clients/{name}), its
// subscriptions (GET /api/subscriptions?client=NAME) and the log's durable end (GET
// /api/transaction_log, for the lag in messages); every 3 s its events (GET
// /api/events?client=NAME). The charts open with what the statistics database holds of
// their ten minutes (stored.js: the per-client series) and go on with the page's own points.
//
// A client that left answers 404: the page says "disconnected" and keeps the last facts it
// saw, or, opened after the client left, those its `disconnected` event carries.

import { TimeChart } from "./charts.js";
import { fetchStored, joinStored, metricSegment } from "./stored.js";
import {
  Alert, KeyedTable, Poller, allowAction, api, badge, disconnectClient, el, fmtBytes,
  fmtDateTime, fmtInt, fmtLag, fmtRate, setText,
} from "./ui.js";

const $id = (id) => document.getElementById(id);
const alert = new Alert($id("page-alert"));
const root = $id("client-page");
const name = root.dataset.client ?? "";
/** The charts' window, in seconds. */
const WINDOW = 600;
/** Points the page keeps per series (ten minutes at one a second). */
const MAX_POINTS = 600;
/** The trend arrow compares the lag now with the lag this many seconds ago (or the oldest
 * point the page has, when it has less). */
const TREND_SECONDS = 60;

const clientPath = `/clients/${encodeURIComponent(name)}`;
const clientSeries = `clients/${metricSegment(name)}`;

/** The client as last seen connected (null before), and whether it is connected now. */
let client = null;
let connected = false;
/** The previous reading of the client's counters, for rates. */
let previous = null;
/** The page's points of the client's rates: {time, in, out}. */
const points = [];
let storedRates = { points: [], interval: null };
/** sub_id -> the page's points of a subscription: {time, rate, lag_msgs, lag_s}. */
const subPoints = new Map();
/** sub_id -> {at, delivered}, for delivery rates. */
const subPrevious = new Map();
/** sub_id -> what the statistics database holds of its seconds behind. */
const subStored = new Map();
let subs = [];
let selected = root.dataset.sub || null;
/** The newest `disconnected` event of the client, once the events were read. */
let leftEvent = null;

const ratesChart = new TimeChart($id("chart-rates"), {
  series: [
    { label: "in", color: "--in", fill: true, fmt: (v) => `${fmtRate(v)}/s` },
    { label: "out", color: "--out", fmt: (v) => `${fmtRate(v)}/s` },
  ],
  yFormat: fmtRate,
  window: WINDOW,
});
const subRateChart = new TimeChart($id("chart-sub-rate"), {
  series: [{ label: "msgs/s", color: "--out", fill: true, fmt: (v) => `${fmtRate(v)}/s` }],
  yFormat: fmtRate,
  window: WINDOW,
  height: 180,
});
const subLagMsgsChart = new TimeChart($id("chart-sub-lag-msgs"), {
  series: [{ label: "lag (messages)", color: "--warn", fmt: fmtInt }],
  yFormat: fmtInt,
  window: WINDOW,
  height: 180,
});
const subLagChart = new TimeChart($id("chart-sub-lag-s"), {
  series: [{ label: "lag", color: "--p99", fmt: fmtLag, points: true }],
  yFormat: fmtLag,
  window: WINDOW,
  height: 180,
});

fetchStored({ in: `${clientSeries}/msgs_in_rate`, out: `${clientSeries}/msgs_out_rate` }, WINDOW)
  .then((answer) => {
    storedRates = answer;
    drawRates();
  });

function drawRates() {
  const pts = joinStored(storedRates, points);
  ratesChart.setData([pts.map((p) => p.time), pts.map((p) => p.in ?? null),
    pts.map((p) => p.out ?? null)]);
}

// -- facts ------------------------------------------------------------------------------

const disconnectButton = $id("disconnect");
disconnectButton.title = "Close this client's connection now";

function fact(label, value, title = "") {
  return [el("dt", { text: label }), el("dd", { text: value, title: title || null, dataset: { fact: label } })];
}

function renderFacts() {
  const c = client ?? {};
  const left = leftEvent ?? {};
  const rows = [
    fact("user", c.user ?? "–"),
    fact("remote address", c.remote_addr ?? left.remote ?? "–"),
    fact("TLS", c.tls ?? (client ? "no (plain text)" : "–"), c.certificate ? `client certificate: ${c.certificate}` : ""),
    fact("version", c.version || "–"),
    fact("connected since", fmtDateTime(c.connected_since)),
    fact("messages in", fmtInt(c.msgs_in ?? left.msgs_in)),
    fact("messages out", fmtInt(c.msgs_out ?? left.msgs_out)),
    fact("bytes in", fmtBytes(c.bytes_in)),
    fact("bytes out", fmtBytes(c.bytes_out)),
    fact("queued to it", connected ? fmtBytes(c.queue_depth) : "–"),
    fact("last persisted seq", fmtInt(c.last_persisted_seq)),
  ];
  if (c.origin) rows.push(fact("web page", c.origin));
  if (!connected && leftEvent) {
    rows.push(fact("disconnected at", fmtDateTime(leftEvent.time)));
    rows.push(fact("reason", `${leftEvent.reason ?? "closed"} (${leftEvent.cause ?? "client"})`));
  }
  $id("facts").replaceChildren(...rows.flat());
  const state = $id("client-state");
  const word = connected ? "connected" : client || leftEvent ? "disconnected" : "not connected";
  if (state.dataset.state !== word) {
    state.dataset.state = word;
    state.replaceChildren(badge(word));
  }
  allowAction(disconnectButton, connected);
}

disconnectButton.addEventListener("click", async () => {
  if (!(await disconnectClient(disconnectButton, name, alert))) return;
  await poller.now();
  await eventsPoller.now();
});

// -- subscriptions ----------------------------------------------------------------------

/** Whether the subscription reads the log (a bookmark one, or a live one catching up):
 * only those can be behind, as for the broker's `seconds_behind`. */
const reads = (s) => (s.bookmark_kind && s.bookmark_kind !== "none") || s.state === "replaying";

/** Records of the log between the subscription's position and the durable end. */
function lagMessages(s, durable) {
  if (!reads(s) || durable === null || !s.position_seq) return 0;
  return Math.max(0, durable - s.position_seq);
}

/** "growing", "shrinking" or "steady" over the last minute of `pts` (null: too few). */
function trendOf(pts, field) {
  const now = pts.length ? pts[pts.length - 1] : null;
  if (now === null || now[field] === null || now[field] === undefined) return null;
  const since = now.time - TREND_SECONDS;
  const then = pts.find((p) => p.time >= since && p[field] !== null && p[field] !== undefined);
  if (!then || now.time - then.time < 2) return null;
  if (now[field] > then[field]) return "growing";
  if (now[field] < then[field]) return "shrinking";
  return "steady";
}

const ARROWS = { growing: "↑ growing", shrinking: "↓ shrinking", steady: "→ steady" };

/** The subscription's points: the stored seconds behind, then the page's own. */
function subSeries(subId) {
  return joinStored(subStored.get(subId) ?? { points: [], interval: null }, subPoints.get(subId) ?? []);
}

/** The lag's trend in messages; in seconds (stored points too) when that says nothing. */
function subTrend(subId) {
  const byMessages = trendOf(subPoints.get(subId) ?? [], "lag_msgs");
  if (byMessages !== null && byMessages !== "steady") return byMessages;
  return trendOf(subSeries(subId), "lag_s") ?? byMessages;
}

const SUB_CELLS = ["sub_id", "topic", "filter", "options", "state", "delivered", "rate", "lag_msgs",
  "seconds_behind", "trend"];
const SUB_NUMERIC = new Set(["delivered", "rate", "lag_msgs", "seconds_behind"]);

const subTable = new KeyedTable($id("client-subs-table").tBodies[0], {
  key: (s) => s.sub_id,
  columns: SUB_CELLS.length,
  empty: "No subscription.",
  create: (s) => {
    const tr = el("tr", { className: "sub-row", onclick: () => select(s.sub_id) });
    for (const field of SUB_CELLS) {
      tr.append(el("td", { className: SUB_NUMERIC.has(field) ? "num"
        : ["topic", "filter", "options"].includes(field) ? "mono clip" : "mono", dataset: { field } }));
    }
    const link = el("a", { href: `${clientPath}/subs/${encodeURIComponent(s.sub_id)}`, text: s.sub_id,
      onclick: (ev) => {
        ev.preventDefault();
        select(s.sub_id);
      } });
    tr.cells[0].append(link);
    return tr;
  },
  update: (tr, s) => {
    SUB_CELLS.forEach((field, i) => {
      const td = tr.cells[i];
      if (field === "sub_id") return;
      if (field === "state") {
        if (td.dataset.state !== s.state) {
          td.dataset.state = s.state;
          td.replaceChildren(badge(s.state));
        }
      } else if (field === "delivered") setText(td, fmtInt(s.delivered));
      else if (field === "rate") setText(td, s.rate === null ? "–" : fmtRate(s.rate));
      else if (field === "lag_msgs") setText(td, reads(s) ? fmtInt(s.lag_msgs) : "–");
      else if (field === "seconds_behind") setText(td, reads(s) ? fmtLag(s.seconds_behind) : "–");
      else if (field === "trend") {
        const trend = reads(s) ? subTrend(s.sub_id) : null;
        td.dataset.trend = trend ?? "";
        setText(td, trend ? ARROWS[trend] : "–");
      } else {
        setText(td, s[field] || "");
        td.title = s[field] ?? "";
      }
    });
    tr.classList.toggle("selected", s.sub_id === selected);
  },
});

function storedSub(subId) {
  if (subStored.has(subId)) return;
  subStored.set(subId, { points: [], interval: null });
  const metric = `subscriptions/${metricSegment(name)}/${metricSegment(subId)}/seconds_behind`;
  fetchStored({ lag_s: metric }, WINDOW).then((answer) => {
    subStored.set(subId, answer);
    if (subId === selected) drawSub();
  });
}

function select(subId) {
  selected = subId;
  const path = `${clientPath}/subs/${encodeURIComponent(subId)}`;
  if (window.location.pathname !== path) window.history.replaceState(null, "", path);
  storedSub(subId);
  subTable.render(subs);
  drawSub();
}

function drawSub() {
  const panel = $id("sub-detail");
  if (selected === null) {
    panel.hidden = true;
    return;
  }
  panel.hidden = false;
  setText($id("sub-detail-id"), selected);
  const live = subs.find((s) => s.sub_id === selected);
  setText($id("sub-detail-note"), live ? `${live.topic} · ${live.state}`
    : "not open now: the stored lag and the page's points");
  const pts = subSeries(selected);
  const xs = pts.map((p) => p.time);
  subRateChart.setData([xs, pts.map((p) => p.rate ?? null)]);
  subLagMsgsChart.setData([xs, pts.map((p) => p.lag_msgs ?? null)]);
  subLagChart.setData([xs, pts.map((p) => p.lag_s ?? null)]);
}

// -- polling ----------------------------------------------------------------------------

/** The log's durable end (null without a transaction log, or when it cannot be read). */
async function durableSeq() {
  try {
    return (await api("/api/transaction_log")).totals.durable_seq;
  } catch (err) {
    if (err?.status === 404) return null;
    throw err;
  }
}

async function readClient() {
  try {
    return await api(`/api/clients/${encodeURIComponent(name)}`);
  } catch (err) {
    if (err?.status === 404) return null;
    throw err;
  }
}

function push(list, point) {
  list.push(point);
  if (list.length > MAX_POINTS) list.shift();
}

const poller = new Poller(async () => {
  try {
    const [now, listed, durable] = await Promise.all([readClient(),
      api(`/api/subscriptions?${new URLSearchParams({ client: name })}`), durableSeq()]);
    const at = performance.now();
    const time = Date.now() / 1000;
    connected = now !== null;
    if (now !== null) {
      if (previous !== null && at > previous.at) {
        const dt = (at - previous.at) / 1000;
        push(points, { time, in: Math.max(0, now.msgs_in - previous.msgs_in) / dt,
          out: Math.max(0, now.msgs_out - previous.msgs_out) / dt });
      }
      previous = { at, msgs_in: now.msgs_in, msgs_out: now.msgs_out };
      client = now;
    } else previous = null;
    subs = listed.subscriptions;
    for (const s of subs) {
      const before = subPrevious.get(s.sub_id);
      const dt = before ? (at - before.at) / 1000 : 0;
      // a replace restarts the count: a drop is no negative rate
      s.rate = before && dt > 0 ? Math.max(0, s.delivered - before.delivered) / dt : null;
      s.lag_msgs = lagMessages(s, durable);
      subPrevious.set(s.sub_id, { at, delivered: s.delivered });
      const list = subPoints.get(s.sub_id) ?? [];
      push(list, { time, rate: s.rate, lag_msgs: reads(s) ? s.lag_msgs : 0,
        lag_s: reads(s) ? s.seconds_behind : 0 });
      subPoints.set(s.sub_id, list);
    }
    renderFacts();
    subTable.render(subs);
    drawRates();
    if (selected !== null) {
      storedSub(selected);
      drawSub();
    }
    setText($id("updated"), `updated ${new Date().toISOString().slice(11, 19)} UTC`);
    alert.clear("poll");
  } catch (err) {
    alert.error(err, "refresh", "poll");
  }
}, 1000);

// -- events -----------------------------------------------------------------------------

const BASE = new Set(["time", "level", "category", "event", "client"]);

function details(entry) {
  return Object.entries(entry).filter(([k, v]) => !BASE.has(k) && v !== null && v !== undefined)
    .map(([k, v]) => `${k}=${typeof v === "object" ? JSON.stringify(v) : v}`).join(" ");
}

const eventsPoller = new Poller(async () => {
  try {
    const { events } = await api(`/api/events?${new URLSearchParams({ client: name, limit: "50" })}`);
    const newest = [...events].reverse();
    const left = newest.find((e) => e.event === "disconnected") ?? null;
    const logon = newest.find((e) => e.event === "logon") ?? null;
    // the client left after its last logon: its last facts are those of that disconnect
    leftEvent = left !== null && (logon === null || String(left.time) >= String(logon.time)) ? left : null;
    const body = $id("client-events-table").tBodies[0];
    body.replaceChildren(...newest.map((e) => {
      const time = String(e.time ?? "");
      return el("tr", { className: `level-${e.level}` },
        el("td", { className: "mono nowrap", text: `${time.slice(0, 10)} ${time.slice(11, 23)}` }),
        el("td", {}, badge(e.level)),
        el("td", { className: "mono", text: `${e.category}/${e.event}` }),
        el("td", { className: "mono wrap", text: details(e) }));
    }));
    if (!newest.length) {
      body.append(el("tr", { className: "empty" },
        el("td", { text: "No event names this client.", attrs: { colspan: 4 } })));
    }
    if (!connected) renderFacts();
    alert.clear("events");
  } catch (err) {
    alert.error(err, "events", "events");
  }
}, 3000);

if (selected !== null) storedSub(selected);
drawSub();
renderFacts();
poller.start();
eventsPoller.start();
