// Clients: the connected clients (GET /api/clients every second), their message rates
// (computed here from the counters' deltas) and a Disconnect button per client.

import {
  Alert, KeyedTable, Poller, TableSort, allowAction, api, disconnectClient, el, fmtBytes,
  fmtDateTime, fmtInt, fmtRate, setText,
} from "./ui.js";

const alert = new Alert(document.getElementById("page-alert"));
const table = document.getElementById("clients-table");
const filterInput = document.getElementById("filter");
let clients = [];
/** name -> {at, msgs_in, msgs_out} of the previous poll, for rates */
let previous = new Map();

const sort = new TableSort(table, { field: "name" }, () => render());

const CELLS = ["name", "user", "remote_addr", "connected_since", "in_rate", "out_rate", "msgs_in",
  "msgs_out", "bytes_in", "bytes_out", "queue_depth", "subscriptions", "last_persisted_seq"];
const NUMERIC = new Set(CELLS.slice(4));

function format(field, c) {
  switch (field) {
    case "connected_since": return fmtDateTime(c.connected_since);
    case "in_rate": case "out_rate": return c[field] === null ? "–" : fmtRate(c[field]);
    case "msgs_in": case "msgs_out": case "subscriptions": case "last_persisted_seq":
      return fmtInt(c[field]);
    case "bytes_in": case "bytes_out": case "queue_depth": return fmtBytes(c[field]);
    default: return c[field] ?? "–";
  }
}

async function disconnect(button, name) {
  if (await disconnectClient(button, name, alert)) await poller.now();
}

const rows = new KeyedTable(table.tBodies[0], {
  key: (c) => c.name,
  columns: CELLS.length + 1,
  empty: "No client is connected.",
  create: () => {
    const tr = el("tr");
    for (const field of CELLS) {
      tr.append(el("td", { className: NUMERIC.has(field) ? "num" : field === "name" ? "mono" : "",
        dataset: { field } }));
    }
    // the name opens the client's page
    tr.cells[0].append(el("a", { className: "client-link" }));
    const button = el("button", { type: "button", className: "small danger", text: "Disconnect",
      dataset: { action: "disconnect" } });
    allowAction(button);
    button.addEventListener("click", () => disconnect(button, tr.dataset.key));
    tr.append(el("td", {}, button));
    return tr;
  },
  update: (tr, c) => {
    const link = tr.cells[0].firstChild;
    link.href = `/clients/${encodeURIComponent(c.name)}`;
    setText(link, c.name);
    CELLS.forEach((field, i) => { if (i > 0) setText(tr.cells[i], format(field, c)); });
  },
});

function render() {
  const q = filterInput.value.trim().toLowerCase();
  const shown = q ? clients.filter((c) =>
    [c.name, c.user, c.remote_addr].some((v) => String(v ?? "").toLowerCase().includes(q)))
    : clients;
  rows.render(sort.sort(shown));
  setText(document.getElementById("count"),
    shown.length === clients.length ? `${clients.length}` : `${shown.length} of ${clients.length}`);
}

const poller = new Poller(async () => {
  try {
    const list = (await api("/api/clients")).clients;
    const now = performance.now();
    const next = new Map();
    for (const c of list) {
      const before = previous.get(c.name);
      const dt = before ? (now - before.at) / 1000 : 0;
      c.in_rate = before && dt > 0 ? Math.max(0, c.msgs_in - before.msgs_in) / dt : null;
      c.out_rate = before && dt > 0 ? Math.max(0, c.msgs_out - before.msgs_out) / dt : null;
      next.set(c.name, { at: now, msgs_in: c.msgs_in, msgs_out: c.msgs_out });
    }
    previous = next;
    clients = list;
    render();
    setText(document.getElementById("updated"), new Date().toISOString().slice(11, 19));
    alert.clear("poll");
  } catch (err) {
    alert.error(err, "refresh", "poll");
  }
}, 1000);

filterInput.addEventListener("input", render);
poller.start();
