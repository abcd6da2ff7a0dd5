// Subscriptions: every subscription of every client (GET /api/subscriptions every second),
// the messages each was delivered and their rate (computed here from the counters' deltas,
// as the Clients page does), Pause / Resume per bookmark subscription, and a multi-select "resume together" (one POST
// with {"sub_ids": [...]}, so the broker resumes them on one shared cursor).

import {
  Alert, KeyedTable, Poller, TableSort, allowAction, api, badge, busy, el, fmtInt, fmtLag, fmtRate,
  setText,
} from "./ui.js";

const alert = new Alert(document.getElementById("page-alert"));
const table = document.getElementById("subs-table");
const filterInput = document.getElementById("filter");
const selectAll = document.getElementById("select-all");
const pauseSelected = document.getElementById("pause-selected");
const resumeSelected = document.getElementById("resume-selected");
const clearSelection = document.getElementById("clear-selection");
const selectionLabel = document.getElementById("selection");

let subs = [];
let shown = [];
/** keys of the selected subscriptions (see keyOf) */
const selected = new Set();
/** key -> {at, delivered} of the previous poll, for rates */
let previous = new Map();

/** A row's key: `["client","sub_id"]` (JSON keeps any character of either part apart). */
const keyOf = (s) => JSON.stringify([s.client, s.sub_id]);
const isBookmark = (s) => s.bookmark_kind && s.bookmark_kind !== "none";
const subPath = (client, subId, action) =>
  `/api/subscriptions/${encodeURIComponent(client)}/${encodeURIComponent(subId)}/${action}`;

const sort = new TableSort(table, { field: "client" }, () => render());

/** Run one action: report `done` or the API's error (prefixed with `context`), refresh. */
async function act(button, context, done, fn) {
  await busy(button, async () => {
    try {
      await fn();
      alert.ok(done);
    } catch (err) {
      alert.error(err, context);
    }
  });
  // after busy() re-enabled the button, so the refresh sets each button's final state
  await poller.now();
}

function pause(button, s) {
  const name = `${s.client}/${s.sub_id}`;
  return act(button, `pause ${name}`, `${name} paused`,
    () => api(subPath(s.client, s.sub_id, "pause"), { method: "POST" }));
}

function resume(button, client, subIds) {
  const name = `${client}/${subIds.join(",")}`;
  const done = `${name} resumed${subIds.length > 1 ? " together" : ""}`;
  return act(button, `resume ${name}`, done,
    () => api(subPath(client, subIds[0], "resume"), { method: "POST", body: { sub_ids: subIds } }));
}

const CELLS = ["client", "sub_id", "topic", "filter", "bookmark_kind", "options", "state",
  "position", "rate", "delivered", "seconds_behind"];
const NUMERIC = new Set(["rate", "delivered", "seconds_behind"]);

const rows = new KeyedTable(table.tBodies[0], {
  key: keyOf,
  columns: CELLS.length + 2,
  empty: "No subscription.",
  create: (s) => {
    const tr = el("tr");
    const box = el("input", { type: "checkbox", attrs: { "aria-label": `select ${s.client} ${s.sub_id}` } });
    box.addEventListener("change", () => {
      if (box.checked) selected.add(tr.dataset.key);
      else selected.delete(tr.dataset.key);
      updateSelection();
    });
    tr.append(el("td", { className: "check" }, box));
    for (const field of CELLS) {
      const num = NUMERIC.has(field);
      tr.append(el("td", { className: num ? "num" : ["sub_id", "topic", "filter", "position",
        "options"].includes(field) ? "mono clip" : "", dataset: { field } }));
    }
    // the client opens its page; the sub id opens it with that subscription chosen
    const clientPath = `/clients/${encodeURIComponent(s.client)}`;
    tr.cells[1].append(el("a", { className: "client-link", href: clientPath, text: s.client }));
    tr.cells[2].append(el("a", { href: `${clientPath}/subs/${encodeURIComponent(s.sub_id)}`,
      text: s.sub_id }));
    const pauseBtn = el("button", { type: "button", className: "small", text: "Pause",
      dataset: { action: "pause" } });
    const resumeBtn = el("button", { type: "button", className: "small", text: "Resume",
      dataset: { action: "resume" } });
    pauseBtn.addEventListener("click", () => pause(pauseBtn, tr._sub));
    resumeBtn.addEventListener("click", () => resume(resumeBtn, tr._sub.client, [tr._sub.sub_id]));
    tr.append(el("td", { className: "nowrap" }, pauseBtn, " ", resumeBtn));
    return tr;
  },
  update: (tr, s) => {
    tr._sub = s;
    const bookmark = isBookmark(s);
    const box = tr.cells[0].firstChild;
    box.disabled = !bookmark;
    box.checked = selected.has(tr.dataset.key);
    CELLS.forEach((field, i) => {
      const td = tr.cells[i + 1];
      if (field === "state") {
        if (td.dataset.state !== s.state) {
          td.dataset.state = s.state;
          td.replaceChildren(badge(s.state));
        }
      } else if (field === "client" || field === "sub_id") {
        td.title = s[field];
      } else if (field === "delivered") setText(td, fmtInt(s.delivered));
      else if (field === "rate") setText(td, s.rate === null ? "–" : fmtRate(s.rate));
      else if (field === "seconds_behind") setText(td, bookmark ? fmtLag(s.seconds_behind) : "–");
      else if (field === "bookmark_kind") {
        setText(td, s.bookmark_kind ?? "none");
        td.title = s.bookmark ?? "";
      } else {
        setText(td, s[field] || (field === "filter" || field === "options" || field === "position" ? "" : "–"));
        td.title = s[field] ?? "";
      }
    });
    const [pauseBtn, resumeBtn] = tr.cells[CELLS.length + 1].querySelectorAll("button");
    allowAction(pauseBtn, bookmark && s.state !== "paused");
    allowAction(resumeBtn, bookmark && s.state === "paused");
  },
});

function selectedSubs() {
  return subs.filter((s) => selected.has(keyOf(s)));
}

function updateSelection() {
  const picked = selectedSubs();
  const clients = new Set(picked.map((s) => s.client));
  setText(selectionLabel, picked.length ? `${picked.length} selected` : "none selected");
  clearSelection.disabled = picked.length === 0;
  resumeSelected.title = clients.size > 1
    ? "Resume together works on the subscriptions of one client: select one client's only"
    : "Resume the selected subscriptions of one client together, on one shared cursor";
  allowAction(pauseSelected, picked.length > 0);
  allowAction(resumeSelected, picked.length > 0 && clients.size === 1);
  const selectable = shown.filter(isBookmark);
  selectAll.checked = selectable.length > 0 && selectable.every((s) => selected.has(keyOf(s)));
  selectAll.indeterminate = !selectAll.checked && selectable.some((s) => selected.has(keyOf(s)));
}

function render() {
  const q = filterInput.value.trim().toLowerCase();
  shown = q ? subs.filter((s) => [s.client, s.sub_id, s.topic, s.state, s.filter]
    .some((v) => String(v ?? "").toLowerCase().includes(q))) : subs;
  rows.render(sort.sort(shown));
  setText(document.getElementById("count"),
    shown.length === subs.length ? `${subs.length}` : `${shown.length} of ${subs.length}`);
  updateSelection();
}

const poller = new Poller(async () => {
  try {
    subs = (await api("/api/subscriptions")).subscriptions;
    const now = performance.now();
    const next = new Map();
    for (const s of subs) {
      const key = keyOf(s);
      const before = previous.get(key);
      const dt = before ? (now - before.at) / 1000 : 0;
      // a replace restarts the count: a drop is no negative rate
      s.rate = before && dt > 0 ? Math.max(0, s.delivered - before.delivered) / dt : null;
      next.set(key, { at: now, delivered: s.delivered });
    }
    previous = next;
    const present = new Set(subs.map(keyOf));
    for (const key of [...selected]) if (!present.has(key)) selected.delete(key);
    render();
    setText(document.getElementById("updated"), new Date().toISOString().slice(11, 19));
    alert.clear("poll");
  } catch (err) {
    alert.error(err, "refresh", "poll");
  }
}, 1000);

selectAll.addEventListener("change", () => {
  for (const s of shown.filter(isBookmark)) {
    if (selectAll.checked) selected.add(keyOf(s));
    else selected.delete(keyOf(s));
  }
  render();
});

pauseSelected.addEventListener("click", () => busy(pauseSelected, async () => {
  const picked = selectedSubs();
  const failures = [];
  for (const s of picked) {
    try {
      await api(subPath(s.client, s.sub_id, "pause"), { method: "POST" });
    } catch (err) {
      failures.push([s, err]);
    }
  }
  if (failures.length) {
    const [s, err] = failures[0];
    alert.error(err, `pause ${s.client}/${s.sub_id}${failures.length > 1 ? ` (and ${failures.length - 1} more)` : ""}`);
  } else alert.ok(`${picked.length} paused`);
}).then(() => poller.now()));

resumeSelected.addEventListener("click", () => {
  const picked = selectedSubs();
  if (picked.length === 0) return;
  resume(resumeSelected, picked[0].client, picked.map((s) => s.sub_id));
});

clearSelection.addEventListener("click", () => {
  selected.clear();
  render();
});

filterInput.addEventListener("input", render);
poller.start();
