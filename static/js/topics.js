// Topics: GET /api/topics every 3 s (every topic the user may read: kind, counts, rates,
// SOW records, queue depth, destinations) as a sortable, filterable table. A topic links
// to the Query page replaying it from the start of the log, a SOW topic also to its SOW
// page.

import {
  Alert, KeyedTable, Poller, TableSort, api, badge, el, fmtBytes, fmtInt, fmtRate, setText,
} from "./ui.js";

const alert = new Alert(document.getElementById("page-alert"));
const $id = (id) => document.getElementById(id);
const table = $id("topics-table");
const filterInput = $id("filter");
/** Milliseconds between two refreshes. */
const REFRESH = 3000;
let topics = [];

const CELLS = ["topic", "kind", "messages", "bytes", "messages_per_second", "bytes_per_second",
  "sow_records", "queue_depth", "destinations"];
const NUMERIC = new Set(CELLS.slice(2, 8));

const sort = new TableSort(table, { field: "topic" }, () => render());

/** The Query page replaying `topic` from the start of the log (bookmark EPOCH). */
function queryHref(topic) {
  return `/query?${new URLSearchParams({ topic, bookmark: "0" })}`;
}

function format(field, t) {
  const value = t[field];
  switch (field) {
    case "messages": return fmtInt(value);
    case "bytes": return fmtBytes(value);
    case "messages_per_second": return value === null ? "–" : fmtRate(value);
    case "bytes_per_second": return value === null ? "–" : `${fmtBytes(value)}/s`;
    case "sow_records": case "queue_depth": return value === null ? "–" : fmtInt(value);
    case "destinations": return value.length ? value.join(", ") : "–";
    default: return value ?? "–";
  }
}

const rows = new KeyedTable(table.tBodies[0], {
  key: (t) => t.topic,
  columns: CELLS.length + 1,
  empty: "No topic yet: nothing was published, and no SOW topic or queue is configured.",
  create(t) {
    const tr = el("tr", { className: "topic-row" });
    for (const field of CELLS) {
      tr.append(el("td", { className: NUMERIC.has(field) ? "num" : "mono", dataset: { field } }));
    }
    const name = tr.cells[0];
    name.replaceChildren(el("a", { className: "query-link", text: t.topic,
      attrs: { href: queryHref(t.topic), title: "replay this topic on the Query page" } }));
    tr.append(el("td", { className: "actions" },
      el("a", { className: "button small query", text: "query",
        attrs: { href: queryHref(t.topic) } }),
      " ",
      el("a", { className: "button small sow", text: "SOW",
        attrs: { href: `/sow?${new URLSearchParams({ topic: t.topic })}` } })));
    return tr;
  },
  update(tr, t) {
    tr.querySelector("a.sow").hidden = t.sow_records === null; // an event topic may be kept in a SOW too
    for (const td of tr.querySelectorAll("td[data-field]")) {
      const field = td.dataset.field;
      if (field === "topic") continue;
      if (field === "kind") {
        if (td.dataset.kind !== t.kind) {
          td.dataset.kind = t.kind;
          td.replaceChildren(badge(t.kind));
        }
      } else setText(td, format(field, t));
    }
  },
});

function matches(t, q) {
  return [t.topic, t.kind, ...t.destinations].some((v) => v.toLowerCase().includes(q));
}

function render() {
  const q = filterInput.value.trim().toLowerCase();
  const shown = q ? topics.filter((t) => matches(t, q)) : topics;
  rows.render(sort.sort(shown, (t, f) => (f === "destinations" ? t.destinations.join(",") : t[f])));
  setText($id("count"),
    shown.length === topics.length ? `${topics.length}` : `${shown.length} of ${topics.length}`);
}

const poller = new Poller(async () => {
  try {
    topics = (await api("/api/topics")).topics;
    render();
    setText($id("updated"), new Date().toISOString().slice(11, 19));
    alert.clear("poll");
  } catch (err) {
    alert.error(err, "refresh", "poll");
  }
}, REFRESH);

filterInput.addEventListener("input", render);
poller.start();
