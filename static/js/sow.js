// SOW: the topics of GET /api/sow (every 3 s; Compact is an admin POST), and a query grid
// kept live by a sow_and_subscribe this page makes itself through the browser client
// (static/spool-client.js) over the websocket, with the `oof` option: the snapshot fills
// the table in the order asked, a later change updates its row in place (a new key is
// added at the end), and a record that is deleted, expires or stops matching leaves it.
// Rows are keyed by topic + SOW key, the key column first, then the records' top-level
// fields; a click on a row shows the whole record as JSON (and a Delete button).

import { SpoolClient } from "../spool-client.js";
import {
  Alert, ApiError, KeyedTable, Poller, allowAction, api, busy, confirmDialog, el, fmtBytes, fmtInt,
  setText,
} from "./ui.js";

/** Field columns shown after the key (the rest is in the expanded JSON). */
const MAX_COLUMNS = 8;
/** Rows the grid holds at most (a live topic of 100,000 keys would freeze the tab); keys
 * beyond are counted as not shown. */
const MAX_ROWS = 10000;
/** Column name of a record whose body is not a JSON object. */
const BODY = "(body)";

const alert = new Alert(document.getElementById("page-alert"));
const $id = (id) => document.getElementById(id);
const form = $id("sow-form");
const startBtn = $id("start");
const stopBtn = $id("stop");
const recordsTable = $id("records-table");
const headRow = recordsTable.tHead.rows[0];
const tbody = recordsTable.tBodies[0];

// -- topics ------------------------------------------------------------------------------

const topicCells = ["topic", "durability", "key", "records", "bytes", "subscribers", "file"];
const numericCells = new Set(["records", "bytes", "subscribers", "file"]);

function topicCell(field, t) {
  switch (field) {
    case "key": return t.key_paths.length ? t.key_paths.join(", ") : "k or a digest of the body";
    case "records": case "subscribers": return fmtInt(t[field]);
    case "bytes": return fmtBytes(t.bytes);
    case "file": return t.file_bytes === null ? "–" : fmtBytes(t.file_bytes);
    default: return t[field];
  }
}

async function compact(button, topic) {
  const yes = await confirmDialog({
    title: `Compact ${topic}?`,
    message: ["The broker rewrites this topic's SOW file with one entry per record.",
      "Queries and publishing go on meanwhile; the old file is kept if the rewrite fails."],
    confirm: "Compact",
  });
  if (!yes) return;
  await busy(button, async () => {
    try {
      const r = await api(`/api/sow/${encodeURIComponent(topic)}/compact`, { method: "POST" });
      alert.ok(`${topic} compacted: ${fmtBytes(r.before_bytes)} → ${fmtBytes(r.after_bytes)}`);
    } catch (err) {
      alert.error(err, `compact ${topic}`);
    }
  });
  await poller.now();
}

const topicsTable = new KeyedTable($id("topics-table").tBodies[0], {
  key: (t) => t.topic,
  columns: 9,
  empty: "No SOW topic holds records yet",
  create(t) {
    const tr = el("tr", { className: "sow-topic" });
    for (const field of topicCells) {
      tr.append(el("td", { className: numericCells.has(field) ? "num" : "mono", dataset: { field } }));
    }
    tr.append(el("td", { className: "mono", dataset: { field: "last_compaction" } }));
    const query = el("button", { type: "button", className: "small", text: "Query",
      onclick: () => {
        $id("topic").value = t.topic;
        start();
      } });
    const actions = el("td", { className: "actions" }, query);
    if (t.durability === "persistent") {
      const button = el("button", { type: "button", className: "small", text: "Compact",
        dataset: { action: "compact" } });
      allowAction(button);
      button.addEventListener("click", () => compact(button, t.topic));
      actions.append(button);
    }
    tr.append(actions);
    return tr;
  },
  update(tr, t) {
    for (const field of topicCells) {
      setText(tr.querySelector(`[data-field="${field}"]`), topicCell(field, t));
    }
    setText(tr.querySelector('[data-field="last_compaction"]'), t.last_compaction ?? "–");
  },
});

async function refreshTopics() {
  try {
    const { topics } = await api("/api/sow");
    topicsTable.render(topics);
    $id("sow-topics").replaceChildren(...topics.map((t) => el("option", { value: t.topic })));
    setText($id("updated"), `updated ${new Date().toISOString().slice(11, 19)} UTC`);
    alert.clear("topics");
  } catch (err) {
    if (err instanceof ApiError && err.status === 404) {
      // an instance without SOW/Topic rules: say so in the table, stop asking
      topicsTable.emptyRow.firstChild.textContent = err.detail;
      topicsTable.render([]);
      poller.stop();
      return;
    }
    alert.error(err, "SOW topics", "topics");
  }
}

const poller = new Poller(refreshTopics, 3000);

// -- the query grid ----------------------------------------------------------------------

let client = null;
let generation = 0;
/** field names shown after the key, in the order first seen */
let columns = [];
/** `${topic}\0${key}` -> {id, topic, key, text, doc, tr, detail} */
const records = new Map();
let ops = [];
let frame = null;
let updates = 0;
let removed = 0;
/** ids of records not shown because the grid was full */
const hidden = new Set();

function wsUrl() {
  return `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/amps/json`;
}

function setState(state, text = state) {
  const node = $id("s-state");
  node.className = `state-${state}`;
  setText(node, text);
}

function parse(text) {
  try {
    const doc = JSON.parse(text);
    return doc !== null && typeof doc === "object" && !Array.isArray(doc) ? doc : null;
  } catch {
    return null;
  }
}

function fieldsOf(rec) {
  return rec.doc === null ? [BODY] : Object.keys(rec.doc);
}

function cellText(rec, field) {
  if (field === BODY) return rec.doc === null ? rec.text : "";
  const value = rec.doc?.[field];
  if (value === undefined) return "";
  if (value === null) return "null";
  return typeof value === "object" ? JSON.stringify(value) : String(value);
}

/** Adds the record's fields to the columns (up to MAX_COLUMNS); true when they grew. */
function learnColumns(rec) {
  let grew = false;
  for (const field of fieldsOf(rec)) {
    if (columns.length >= MAX_COLUMNS) break;
    if (!columns.includes(field)) {
      columns.push(field);
      grew = true;
    }
  }
  return grew;
}

function renderHead() {
  headRow.replaceChildren(
    el("th", { text: "key" }),
    ...columns.map((c) => el("th", { className: "mono", text: c })),
    el("th", { text: "topic" }),
  );
  for (const rec of records.values()) {
    fillRow(rec);
    if (rec.detail) rec.detail.cells[0].colSpan = columns.length + 2;
  }
}

function fillRow(rec) {
  rec.tr.replaceChildren(
    el("td", { className: "mono sow-key", text: rec.key ?? "–" }),
    ...columns.map((c) => el("td", { className: "mono", text: cellText(rec, c) })),
    el("td", { className: "mono", text: rec.topic }),
  );
}

function pretty(rec) {
  return rec.doc === null ? rec.text : JSON.stringify(rec.doc, null, 2);
}

async function deleteRecord(button, rec) {
  const yes = await confirmDialog({
    title: `Delete ${rec.key} from ${rec.topic}?`,
    message: ["The broker removes this record from the SOW (logged as a SOW delete).",
      "Subscribers that asked for oof are told."],
    confirm: "Delete",
    danger: true,
  });
  if (!yes || client === null) return;
  await busy(button, async () => {
    try {
      const n = await client.sowDelete(rec.topic, { keys: [rec.key] });
      alert.ok(`${n} record${n === 1 ? "" : "s"} deleted from ${rec.topic}`);
    } catch (err) {
      alert.error(err, `delete ${rec.key}`);
    }
  });
}

function toggleDetail(rec) {
  if (rec.detail) {
    rec.detail.remove();
    rec.detail = null;
    return;
  }
  const button = el("button", { type: "button", className: "small danger", text: "Delete record",
    dataset: { action: "delete" } });
  button.addEventListener("click", () => deleteRecord(button, rec));
  rec.detail = el("tr", { className: "detail" },
    el("td", { attrs: { colspan: String(columns.length + 2) } },
      el("pre", { className: "json", text: pretty(rec) }),
      rec.key === undefined ? null : button));
  rec.tr.after(rec.detail);
}

function flash(tr) {
  tr.classList.remove("flash");
  void tr.offsetWidth; // restart the animation
  tr.classList.add("flash");
}

/** Apply what arrived since the last animation frame, in order. */
function applyOps() {
  frame = null;
  const batch = ops;
  ops = [];
  let grew = false;
  tbody.querySelector("tr.empty")?.remove();
  for (const op of batch) {
    if (op.kind === "snapshot") {
      setText($id("s-snapshot"), "complete");
      continue;
    }
    const old = records.get(op.id);
    if (op.kind === "remove") {
      hidden.delete(op.id);
      if (old === undefined) continue;
      old.tr.remove();
      old.detail?.remove();
      records.delete(op.id);
      removed += 1;
      continue;
    }
    const doc = parse(op.text);
    if (old !== undefined) {
      old.text = op.text;
      old.doc = doc;
      grew = learnColumns(old) || grew;
      fillRow(old);
      if (old.detail) old.detail.querySelector("pre").textContent = pretty(old);
      flash(old.tr);
      continue;
    }
    if (records.size >= MAX_ROWS) {
      hidden.add(op.id);
      continue;
    }
    const rec = { id: op.id, topic: op.topic, key: op.key, text: op.text, doc, detail: null };
    rec.tr = el("tr", { className: "record", dataset: { key: op.key ?? "", topic: op.topic } });
    rec.tr.addEventListener("click", () => toggleDetail(rec));
    grew = learnColumns(rec) || grew;
    fillRow(rec);
    records.set(op.id, rec);
    tbody.append(rec.tr);
    if (!op.snapshot) flash(rec.tr);
  }
  if (grew) renderHead();
  if (records.size === 0) {
    tbody.replaceChildren(el("tr", { className: "empty" },
      el("td", { attrs: { colspan: String(columns.length + 2) }, text: "No record matches" })));
  }
  setText($id("s-records"), fmtInt(records.size));
  setText($id("s-updates"), fmtInt(updates));
  setText($id("s-removed"), fmtInt(removed));
  setText($id("s-hidden"), fmtInt(hidden.size));
}

function push(op) {
  ops.push(op);
  if (frame === null) frame = requestAnimationFrame(applyOps);
}

function onMessage(m) {
  const topic = m.topic;
  const key = m.sowKey;
  const id = `${topic}\u0000${key}`;
  const command = m.command;
  if (command === "oof") {
    push({ kind: "remove", id });
    return;
  }
  if (command === "publish") updates += 1;
  // copy the text out of the frame: it is all the grid keeps
  push({ kind: "put", id, topic, key, text: m.data, snapshot: command === "sow" });
}

function running(on) {
  startBtn.disabled = on;
  stopBtn.disabled = !on;
  for (const input of form.querySelectorAll("input")) input.disabled = on;
}

function randomId() {
  const b = new Uint8Array(3);
  crypto.getRandomValues(b);
  return Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
}

function resetGrid() {
  records.clear();
  hidden.clear();
  columns = [];
  ops = [];
  updates = 0;
  removed = 0;
  renderHead();
  tbody.replaceChildren(el("tr", { className: "empty" },
    el("td", { attrs: { colspan: "2" }, text: "Querying…" })));
  for (const id of ["s-records", "s-updates", "s-removed", "s-hidden"]) setText($id(id), "0");
  setText($id("s-snapshot"), "–");
  setText($id("s-subid"), "–");
}

async function start() {
  const topic = $id("topic").value.trim();
  if (!topic) return;
  close();
  alert.clear();
  resetGrid();
  const gen = ++generation;
  const current = () => gen === generation;
  const topN = Number($id("top-n").value);
  const instance = $id("instance-name")?.textContent?.trim() ?? "spool";
  const c = new SpoolClient(wsUrl(), {
    name: `dashboard-sow-${randomId()}`,
    userId: $id("ws-user")?.value || undefined,
    password: $id("ws-password")?.value || undefined,
    heartbeat: 10,
  });
  client = c;
  c.on("disconnect", ({ error }) => {
    if (!current()) return;
    alert.error(error, `connection to ${instance}`);
    stop("failed");
  });
  c.on("error", (err) => alert.error(err));
  running(true);
  setState("running", "connecting");
  try {
    await c.connect();
    const subId = await c.sowAndSubscribe(topic, {
      filter: $id("filter").value.trim() || undefined,
      orderby: $id("orderby").value.trim() || undefined,
      topN: Number.isInteger(topN) && topN > 0 ? topN : undefined,
      options: "oof",
      onSnapshot: () => current() && push({ kind: "snapshot" }),
      onError: (err) => {
        if (!current()) return;
        alert.error(err, "subscription");
        stop("failed");
      },
    }, (m) => current() && onMessage(m));
    if (!current()) return;
    setText($id("s-subid"), subId);
    setState("running", "live");
  } catch (err) {
    if (!current()) return;
    alert.error(err, `query ${topic}`);
    stop("failed");
  }
}

function close() {
  const c = client;
  client = null;
  generation += 1;
  c?.close();
}

function stop(state = "stopped") {
  close();
  running(false);
  setState(state, state);
}

form.addEventListener("submit", (e) => {
  e.preventDefault();
  start();
});
// the button starts disabled, so the browser cannot submit the form itself (a GET with
// the password in the URL) before this script handles it
startBtn.disabled = false;
stopBtn.addEventListener("click", () => stop());
window.addEventListener("pagehide", () => close());

const params = new URLSearchParams(location.search);
for (const field of ["topic", "filter", "orderby"]) {
  if (params.get(field)) $id(field).value = params.get(field);
}
poller.start();
