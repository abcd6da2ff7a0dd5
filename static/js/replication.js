// Replication: the instance's destinations and incoming links (GET /api/replication every
// 2 s), with downgrade / upgrade / reconnect per destination (POST
// /api/replication/{dest}/...), the last validation failures with their fixes, the link
// events, and the history of messages and seconds behind of the chosen destination
// (GET /api/stats, the last hour).

import { TimeChart } from "./charts.js";
import {
  Alert, KeyedTable, Poller, allowAction, api, badge, busy, confirmDialog, el, fmtBehind,
  fmtCompact, fmtDateTime, fmtInt, fmtLag, fmtRate, setText,
} from "./ui.js";

const alert = new Alert(document.getElementById("page-alert"));
const $id = (id) => document.getElementById(id);

const ACTIONS = {
  downgrade: {
    title: "Downgrade",
    text: "persisted acks stop waiting for it at once; a failover to it may lose what it lacks",
    allowed: (d) => d.configured_sync_type === "sync" && d.effective_sync_type !== "async",
  },
  upgrade: {
    title: "Upgrade",
    text: "persisted acks wait for it again once it has caught up",
    allowed: (d) => d.configured_sync_type === "sync" && d.effective_sync_type === "async",
  },
  reconnect: {
    title: "Reconnect",
    text: "drops the link and dials it again from the first address",
    allowed: () => true,
  },
};

let chosen = null;
let charts = null;

async function act(button, verb, dest) {
  const spec = ACTIONS[verb];
  if (verb !== "reconnect") {
    const yes = await confirmDialog({
      title: `${spec.title} ${dest.name}?`,
      message: [`${spec.title}: ${spec.text}.`],
      confirm: spec.title,
      danger: verb === "downgrade",
    });
    if (!yes) return;
  }
  await busy(button, async () => {
    try {
      const result = await api(`/api/replication/${encodeURIComponent(dest.name)}/${verb}`,
        { method: "POST" });
      const now = result?.effective_sync_type ? ` (now ${result.effective_sync_type})` : "";
      alert.ok(`${dest.name}: ${verb} done${now}`);
    } catch (err) {
      alert.error(err, `${verb} ${dest.name}`);
    }
  });
  await poller.now();
}

function syncCell(td, d) {
  const key = `${d.configured_sync_type}|${d.effective_sync_type}`;
  if (td.dataset.key === key) return;
  td.dataset.key = key;
  td.replaceChildren(badge(d.effective_sync_type));
  if (d.effective_sync_type !== d.configured_sync_type) {
    td.append(el("span", { className: "muted", text: ` configured ${d.configured_sync_type}` }));
  }
}

function linkCell(td, status, address, error) {
  const key = `${status}|${address ?? ""}|${error ?? ""}`;
  if (td.dataset.key === key) return;
  td.dataset.key = key;
  td.replaceChildren(badge(status));
  if (address) td.append(" ", el("span", { className: "mono", text: address }));
  if (error) td.append(el("div", { className: "muted small", text: error }));
}

const DEST_CELLS = ["name", "sync", "link", "acked", "behind", "rate", "disconnects", "passthrough"];

const destinations = new KeyedTable($id("destinations-table").tBodies[0], {
  key: (d) => d.name,
  columns: DEST_CELLS.length + 1,
  empty: "This instance has no destination.",
  create: () => {
    const tr = el("tr", { className: "clickable" });
    for (const field of DEST_CELLS) {
      const num = ["acked", "behind", "rate", "disconnects"].includes(field);
      tr.append(el("td", { className: num ? "num" : "", dataset: { field } }));
    }
    const cell = el("td", { className: "nowrap" });
    for (const verb of Object.keys(ACTIONS)) {
      const button = el("button", {
        type: "button", className: `small${verb === "downgrade" ? " danger" : ""}`,
        text: ACTIONS[verb].title, dataset: { action: verb },
      });
      button.addEventListener("click", (ev) => {
        ev.stopPropagation();
        act(button, verb, tr._dest);
      });
      cell.append(button, " ");
    }
    tr.append(cell);
    tr.addEventListener("click", () => choose(tr._dest.name));
    return tr;
  },
  update: (tr, d) => {
    tr._dest = d;
    tr.classList.toggle("selected", d.name === chosen);
    const c = Object.fromEntries(DEST_CELLS.map((f, i) => [f, tr.cells[i]]));
    setText(c.name, `${d.name} @ ${d.group}`);
    syncCell(c.sync, d);
    // a link back over the connection the peer dialed (a passive destination, or one
    // connection per pair) shows where that connection comes from
    const where = d.via === "incoming" ? `over the connection from ${d.incoming_from}`
      : d.address && d.tls ? `wss://${d.address}` : d.address;
    linkCell(c.link, d.status, where, d.connected ? null : d.last_error);
    setText(c.acked, fmtInt(d.last_acked_position));
    setText(c.behind, fmtBehind(d.messages_behind, d.seconds_behind));
    setText(c.rate, fmtRate(d.msgs_per_sec_out));
    setText(c.disconnects, fmtInt(d.disconnects));
    setText(c.passthrough, d.passthrough.length ? d.passthrough.join(", ") : "published here only");
    // what this destination does not get (topics no block takes, filters, groups not
    // passed through): marked so an operator sees it before a failover does
    if (d.drops.summary.length) {
      c.passthrough.append(" ", el("span", { className: "badge drops", text: "drops",
        attrs: { title: d.drops.summary.join("\n") } }));
    }
    for (const button of tr.cells[DEST_CELLS.length].querySelectorAll("button")) {
      allowAction(button, ACTIONS[button.dataset.action].allowed(d));
    }
  },
});

const incoming = new KeyedTable($id("incoming-table").tBodies[0], {
  key: (i) => i.name,
  columns: 7,
  empty: "No instance replicates to this one now.",
  create: () => {
    const tr = el("tr");
    for (let i = 0; i < 7; i += 1) tr.append(el("td", { className: i >= 3 ? "num" : "" }));
    return tr;
  },
  update: (tr, i) => {
    const c = tr.cells;
    setText(c[0], `${i.name} @ ${i.group}`);
    linkCell(c[1], i.status, i.address, i.connected ? null : i.last_error);
    setText(c[2], [i.user ?? "–", i.tls, i.certificate_subject ? "certificate" : null]
      .filter(Boolean).join(" · "));
    setText(c[3], fmtInt(i.received_position));
    setText(c[4], fmtInt(i.last_acked_position));
    setText(c[5], fmtBehind(i.messages_behind));
    setText(c[6], fmtRate(i.msgs_per_sec_in));
  },
});

function renderFailures(dests) {
  const box = $id("failures");
  const failing = dests.filter((d) => d.validation_failures.length);
  box.replaceChildren(...failing.map((d) => el("section", { className: "panel warn" },
    el("header", {}, el("h2", { text: `Validation failed: ${d.name}` })),
    el("div", { className: "body" }, el("ul", {}, ...d.validation_failures.map(
      (f) => el("li", { className: "mono validation-failure", text: f }),
    ))))));
}

function renderEvents(info) {
  const rows = [];
  for (const d of info.destinations) for (const e of d.events) rows.push({ ...e, link: `→ ${d.name}` });
  for (const i of info.incoming) for (const e of i.events) rows.push({ ...e, link: `← ${i.name}` });
  rows.sort((a, b) => b.time - a.time);
  $id("events-table").tBodies[0].replaceChildren(...(rows.length ? rows.slice(0, 50).map((e) =>
    el("tr", {}, el("td", { className: "mono nowrap", text: fmtDateTime(e.time) }),
      el("td", { text: e.link }), el("td", {}, badge(e.event)),
      el("td", { className: "small", text: e.detail }))) : [el("tr", { className: "empty" },
    el("td", { text: "No link event yet.", attrs: { colspan: 4 } }))]));
}

function segment(name) {
  return encodeURIComponent(name);
}

async function loadHistory() {
  if (chosen === null) return;
  if (charts === null) {
    charts = {
      messages: new TimeChart($id("chart-messages"), {
        series: [{ label: "messages behind", color: "--accent", fill: true, fmt: fmtCompact }],
        yFormat: fmtCompact, height: 180, empty: "no samples yet",
      }),
      seconds: new TimeChart($id("chart-seconds"), {
        series: [{ label: "seconds behind", color: "--out", fill: true, fmt: fmtLag }],
        yFormat: fmtLag, height: 180, empty: "no samples yet",
      }),
    };
  }
  setText($id("chart-link"), chosen);
  for (const [key, metric] of [["messages", "messages_behind"], ["seconds", "seconds_behind"]]) {
    const path = `replication/out/${segment(chosen)}/${metric}`;
    try {
      const series = await api(`/api/stats?${new URLSearchParams({ metric: path })}`);
      charts[key].setData([series.points.map((p) => p[0]), series.points.map((p) => p[1])]);
    } catch (err) {
      if (err.status === 404) charts[key].setData([[], []]);  // not sampled yet
      else throw err;
    }
  }
}

function choose(name) {
  chosen = name;
  loadHistory().catch((err) => alert.error(err, "history", "history"));
  poller.now();
}

function render(info) {
  const dests = info.destinations;
  if (chosen === null && dests.length) choose(dests[0].name);
  destinations.render(dests);
  incoming.render(info.incoming);
  renderFailures(dests);
  renderEvents(info);
  const sync = dests.filter((d) => d.effective_sync_type === "sync").length;
  setText($id("summary"), `${info.name} @ ${info.group} · ${dests.length} destinations `
    + `(${sync} sync now) · ${info.incoming.length} incoming · horizon ${fmtInt(info.horizon)}`);
}

let ticks = 0;
const poller = new Poller(async () => {
  try {
    render(await api("/api/replication"));
    setText($id("updated"), new Date().toISOString().slice(11, 19));
    alert.clear("poll");
    ticks += 1;
    if (ticks % 5 === 0) await loadHistory();
  } catch (err) {
    if (err.status === 404) {
      setText($id("summary"), "replication is not configured on this instance");
      destinations.render([]);
      incoming.render([]);
      return;
    }
    alert.error(err, "refresh", "poll");
  }
}, 2000);
poller.start();
