// Events: the event log. The page arrives rendered by the server (so it reads without
// JavaScript); then the entries the live stream holds replace it, and new entries are
// added as they happen. Filters work on what the page holds (the newest entries).

import { live } from "./live.js";
import { badge, el, fmtInt, setText } from "./ui.js";

const LEVELS = { debug: 0, info: 1, warning: 2, error: 3 };
const BASE = new Set(["time", "level", "category", "event"]);
const $id = (id) => document.getElementById(id);
const tbody = $id("events-table").tBodies[0];
const levelSelect = $id("level");
const categorySelect = $id("category");
const search = $id("search");
const categories = new Set();

/** The entry's own fields as "key=value" words; a field without a value is left out. */
function details(entry) {
  return Object.entries(entry).filter(([k, v]) => !BASE.has(k) && v !== null && v !== undefined)
    .map(([k, v]) => `${k}=${typeof v === "object" && v !== null ? JSON.stringify(v) : v}`).join(" ");
}

function visible(entry) {
  if ((LEVELS[entry.level] ?? 1) < LEVELS[levelSelect.value]) return false;
  if (categorySelect.value && entry.category !== categorySelect.value) return false;
  const q = search.value.trim().toLowerCase();
  if (q && !`${entry.event} ${entry.category} ${details(entry)}`.toLowerCase().includes(q)) return false;
  return true;
}

function row(entry) {
  const time = String(entry.time ?? "");
  return el("tr", { className: `level-${entry.level}` },
    el("td", { className: "mono", text: `${time.slice(0, 10)} ${time.slice(11, 23)}` }),
    el("td", {}, badge(entry.level)),
    el("td", { text: entry.category }),
    el("td", { className: "mono", text: entry.event }),
    el("td", { className: "mono wrap", text: details(entry) }));
}

function noteCategories(entries) {
  let added = false;
  for (const e of entries) {
    if (e.category && !categories.has(e.category)) {
      categories.add(e.category);
      added = true;
    }
  }
  if (!added) return;
  const current = categorySelect.value;
  categorySelect.replaceChildren(el("option", { value: "", text: "all categories" }),
    ...[...categories].sort().map((c) => el("option", { value: c, text: c })));
  categorySelect.value = current;
}

function updateCount() {
  const shown = live.log.filter((i) => visible(i.entry)).length;
  setText($id("count"), `${fmtInt(shown)} of ${fmtInt(live.log.length)}`);
}

/** Rebuild the table from everything the stream holds. */
function render() {
  noteCategories(live.log.map((i) => i.entry));
  const rows = live.log.filter((i) => visible(i.entry)).reverse().map((i) => row(i.entry));
  tbody.replaceChildren(...(rows.length ? rows
    : [el("tr", { className: "empty" }, el("td", { attrs: { colspan: 5 }, text: "No event matches." }))]));
  updateCount();
}

/** Put new entries on top, highlighted. */
function prepend(fresh) {
  noteCategories(fresh.map((i) => i.entry));
  const shown = fresh.filter((i) => visible(i.entry));
  if (shown.length) tbody.querySelector("tr.empty")?.remove();
  for (const i of shown) {
    const tr = row(i.entry);
    tr.classList.add("flash");
    tbody.prepend(tr);
  }
  while (tbody.rows.length > live.log.length) tbody.lastElementChild.remove();
  updateCount();
}

let fromServer = true;
live.addEventListener("log", (e) => {
  // the first entries from the stream replace the server-rendered rows
  if (fromServer || e.detail.reset) render();
  else prepend(e.detail.fresh);
  fromServer = false;
});
live.addEventListener("state", (e) => setText($id("live-note"), e.detail === "open" ? "live" : e.detail));
for (const control of [levelSelect, categorySelect]) control.addEventListener("change", render);
search.addEventListener("input", () => {
  fromServer = false;
  render();
});
if (live.log.length) {
  fromServer = false;
  render();
}
live.start();
