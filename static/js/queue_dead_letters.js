// One queue's dead letters (/queues/dead-letters?queue=NAME): the letters of its
// dead-letter topic that match the filter typed here (GET /api/queues/{name}/dead_letters,
// the first LIST of them in store order), and their redrive (POST
// /api/queues/{name}/redrive): one letter, the selected ones, or every letter the filter
// matches. A letter is chosen for a redrive by its original bookmark, so a redrive of one
// or a selection sends back exactly the rows ticked, however the topic changed since.
// Admin only; the user must be entitled to read the dead-letter topic (the broker answers
// 403 otherwise, shown here).

import {
  Alert, allowAction, api, busy, confirmDialog, el, fmtDateTime, fmtInt, setText,
} from "./ui.js";

const alert = new Alert(document.getElementById("page-alert"));
const $id = (id) => document.getElementById(id);
const queue = new URLSearchParams(location.search).get("queue") ?? "";
/** letters a listing shows */
const LIST = 200;
/** letters one redrive request sends back at most: the broker's limit, from the listing */
let redriveMax = 0;
const COLUMNS = 12;

const filterBox = $id("filter");
const showRedriven = $id("show-redriven");
const targetBox = $id("target");
const selectAll = $id("select-all");
const redriveSelected = $id("redrive-selected");
const redriveAll = $id("redrive-all");
filterBox.value = new URLSearchParams(location.search).get("filter") ?? "";

/** the letters shown, and the original bookmarks of those ticked */
let letters = [];
const selected = new Set();
/** the filter the letters shown were listed with (what "Redrive all matching" sends) */
let listedFilter = "";

setText($id("queue-name"), queue);
document.title = `Queue ${queue} · dead letters`;

/** A string literal of the filter language: single quotes, a quote doubled. */
function quoted(text) {
  return `'${text.replaceAll("'", "''")}'`;
}

/** The filter that matches exactly the letters of these original bookmarks. */
function bookmarksFilter(bookmarks) {
  return `/dead_letter/bookmark IN (${bookmarks.map(quoted).join(", ")})`;
}

function sentBackCell(letter) {
  const mark = letter.redriven;
  if (!mark) return el("td", { className: "muted sent-back", text: "–" });
  const by = mark.by ? ` by ${mark.by}` : "";
  return el("td", { className: "mono sent-back", text: `${mark.topic} ${mark.bookmark} at ${fmtDateTime(mark.at)}${by}` });
}

function row(letter) {
  const box = el("input", { type: "checkbox", attrs: { "aria-label": `select ${letter.bookmark}` } });
  box.checked = selected.has(letter.bookmark);
  box.disabled = letter.redriven !== null;
  box.addEventListener("change", () => {
    if (box.checked) selected.add(letter.bookmark);
    else selected.delete(letter.bookmark);
    showSelection();
  });
  const one = el("button", { type: "button", className: "small redrive-one", text: "Redrive" });
  allowAction(one, letter.redriven === null);
  one.addEventListener("click", () => redriveOne(one, letter));
  return el("tr", { dataset: { bookmark: letter.bookmark, reason: letter.reason } },
    el("td", { className: "check" }, box),
    el("td", { className: "mono", text: letter.bookmark }),
    el("td", { className: "mono", text: letter.topic }),
    el("td", { className: "reason", text: letter.reason.replaceAll("_", " ") }),
    el("td", { className: "num", text: fmtInt(letter.deliveries) }),
    el("td", { className: "num", text: fmtInt(letter.cancels) }),
    el("td", { className: "mono", text: letter.consumer ?? "–" }),
    el("td", { className: "mono", text: fmtDateTime(letter.dead_lettered) }),
    el("td", { className: "wrap detail", text: letter.detail ?? "" }),
    sentBackCell(letter),
    el("td", { className: "mono data", text: letter.data + (letter.truncated ? "…" : "") }),
    el("td", { className: "actions" }, one));
}

function showSelection() {
  const open = letters.filter((l) => l.redriven === null);
  const picked = open.filter((l) => selected.has(l.bookmark));
  setText($id("selection"), picked.length ? `${fmtInt(picked.length)} selected` : "none selected");
  allowAction(redriveSelected, picked.length > 0);
  allowAction(redriveAll, open.length > 0);
  selectAll.checked = open.length > 0 && picked.length === open.length;
  selectAll.indeterminate = picked.length > 0 && picked.length < open.length;
}

async function load() {
  if (!queue) {
    alert.error(new Error("no queue given (open this page from the Queues page)"), "letters");
    return;
  }
  const filter = filterBox.value.trim();
  const params = new URLSearchParams({ limit: String(LIST), redriven: String(showRedriven.checked) });
  if (filter) params.set("filter", filter);
  try {
    const page = await api(`/api/queues/${encodeURIComponent(queue)}/dead_letters?${params}`);
    letters = page.letters;
    redriveMax = page.redrive_max;
    listedFilter = filter;
    setText($id("dead-topic"), `→ ${page.dead_letter_topic}`);
    const shown = new Set(letters.map((l) => l.bookmark));
    for (const bookmark of [...selected]) if (!shown.has(bookmark)) selected.delete(bookmark);
    const body = $id("letters-table").tBodies[0];
    body.replaceChildren(...letters.map(row));
    if (!body.rows.length) {
      body.append(el("tr", {}, el("td", { colSpan: COLUMNS, className: "muted", text: "no dead letter" })));
    }
    const more = letters.length >= LIST ? ` (the first ${fmtInt(LIST)})` : "";
    setText($id("page-info"), `${fmtInt(letters.length)} shown${more}`);
    alert.clear("letters");
  } catch (err) {
    letters = [];
    $id("letters-table").tBodies[0].replaceChildren();
    alert.error(err, `dead letters of ${queue}`, "letters");
  }
  showSelection();
}

/** POST one redrive; the target box, when filled, sends every letter to that topic. */
function redrive(filter, limit) {
  const body = { limit };
  if (filter) body.filter = filter;
  const target = targetBox.value.trim();
  if (target) body.target = target;
  return api(`/api/queues/${encodeURIComponent(queue)}/redrive`, { method: "POST", body });
}

function where() {
  const target = targetBox.value.trim();
  return target ? `to ${target}` : "to their original topics";
}

async function redriveOne(button, letter) {
  await busy(button, async () => {
    try {
      const done = await redrive(bookmarksFilter([letter.bookmark]), 1);
      alert.ok(done.redriven ? `${letter.bookmark} sent back ${where()}` : `${letter.bookmark} was sent back already`);
    } catch (err) {
      alert.error(err, `redrive of ${letter.bookmark}`);
    }
  });
  await load();
}

redriveSelected.addEventListener("click", async () => {
  const picked = letters.filter((l) => l.redriven === null && selected.has(l.bookmark)).map((l) => l.bookmark);
  if (!picked.length) return;
  const yes = await confirmDialog({
    title: `Redrive ${fmtInt(picked.length)} dead letter(s) of ${queue}?`,
    message: [`Each message is published again ${where()}, with its first bookmark as correlation id.`],
    confirm: "Redrive",
  });
  if (!yes) return;
  await busy(redriveSelected, async () => {
    try {
      const done = await redrive(bookmarksFilter(picked), picked.length);
      selected.clear();
      alert.ok(`${fmtInt(done.redriven)} sent back ${where()}`);
    } catch (err) {
      alert.error(err, `redrive of ${picked.length} dead letter(s)`);
    }
  });
  await load();
});

redriveAll.addEventListener("click", async () => {
  const filter = listedFilter;
  const yes = await confirmDialog({
    title: `Redrive every dead letter of ${queue}${filter ? " that matches the filter" : ""}?`,
    message: [filter ? `Filter: ${filter}` : "No filter: every letter not sent back yet.",
      `Each message is published again ${where()}, with its first bookmark as correlation id.`],
    confirm: "Redrive all",
    danger: true,
  });
  if (!yes) return;
  await busy(redriveAll, async () => {
    let total = 0;
    try {
      // a redrive sends back at most redriveMax letters and passes over those it marked,
      // so asking again until a request sends back fewer covers every match
      for (;;) {
        const done = await redrive(filter, redriveMax);
        total += done.redriven;
        if (done.redriven < redriveMax) break;
      }
      selected.clear();
      alert.ok(`${fmtInt(total)} sent back ${where()}`);
    } catch (err) {
      alert.error(err, `redrive of ${queue}'s dead letters (${fmtInt(total)} sent back before)`);
    }
  });
  await load();
});

selectAll.addEventListener("change", () => {
  for (const letter of letters) {
    if (letter.redriven !== null) continue;
    if (selectAll.checked) selected.add(letter.bookmark);
    else selected.delete(letter.bookmark);
  }
  for (const box of $id("letters-table").tBodies[0].querySelectorAll("td.check input")) {
    if (!box.disabled) box.checked = selectAll.checked;
  }
  showSelection();
});

$id("apply").addEventListener("click", () => load());
filterBox.addEventListener("keydown", (ev) => { if (ev.key === "Enter") load(); });
showRedriven.addEventListener("change", () => load());
$id("refresh").addEventListener("click", () => load());
load();
