// Query: a subscription made by this page itself, through the browser Spool client
// (static/spool-client.js) over the websocket. Messages stream into the table (newest
// first, the last N kept); failure acks show their reason inline. The URL's query string
// fills the form (topic, filter, bookmark); with a bookmark the query starts at once.
// "Replay from here" starts a new query after a row's bookmark; a row's Re-publish button
// opens the Publish page (static/js/publish.js) in a new tab with the message; the export
// buttons download the rows shown as JSON lines or CSV.

import { SpoolClient } from "../spool-client.js";
import { Alert, el, fmtInt, fmtRate, setText } from "./ui.js";

const alert = new Alert(document.getElementById("page-alert"));
const $id = (id) => document.getElementById(id);
const form = $id("query-form");
const startBtn = $id("start");
const stopBtn = $id("stop");
const tbody = $id("messages-table").tBodies[0];
const bookmarkKind = $id("bookmark-kind");
const bookmarkField = $id("bookmark-field");
const decoder = new TextDecoder("utf-8", { fatal: false });
/** Where the Publish page takes the message to re-publish from (the same name there). */
const REPUBLISH_KEY = "spool.republish";
/** The message each table row shows (what the exports read). */
const shownMessage = new WeakMap();

let client = null;
let count = 0;
let pending = [];
let frame = null;
let rateBase = { at: performance.now(), count: 0 };
let rateTimer = null;

function wsUrl() {
  return `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/amps/json`;
}

/** The status line's state, and after it why (a failure's reason, "replay complete"). */
function setState(state, text = state, detail = "") {
  const node = $id("q-state");
  node.className = `state-${state}`;
  setText(node, text);
  setText($id("q-detail"), detail);
}

/**
 * Whether the replay asked for has an end: a range (`[start:end]`, `(start:end)`, ...) or
 * `top_n`. Its completed ack is that end (nothing is delivered after it); an open-ended
 * replay's completed ack is the live point, and live messages follow.
 */
function hasEnd(bookmark, options) {
  return /^[[(]/.test(bookmark) || options.some((o) => o.startsWith("top_n="));
}

function maxRows() {
  return Math.max(10, Math.min(100000, Number($id("max-rows").value) || 1000));
}

function row(m) {
  const body = el("td", { className: "body-cell", text: m.body, title: "click to expand" });
  body.addEventListener("click", () => body.classList.toggle("expanded"));
  const tr = el("tr", {},
    el("td", { className: "num", text: fmtInt(m.n) }),
    el("td", { className: "mono", text: m.bookmark ?? "–" }),
    el("td", { className: "mono", text: m.timestamp ? formatTs(m.timestamp) : "–" }),
    el("td", { className: "mono", text: m.topic }),
    body,
    el("td", { className: "actions" },
      replayButton(m),
      el("button", { type: "button", className: "small", text: "Re-publish",
        title: "open the Publish page with this message (a new message, with a new bookmark)",
        dataset: { action: "republish" }, onclick: () => republish(m) })));
  shownMessage.set(tr, m);
  return tr;
}

/**
 * Open the Publish page with this message in the form. It goes through sessionStorage,
 * which a tab opened from this one starts with a copy of (nothing in the URL or on the
 * server); without a new tab (a blocked pop-up) this tab goes to the Publish page.
 */
function republish(m) {
  const { topic, body, sowKey, correlationId, bookmark } = m;
  sessionStorage.setItem(REPUBLISH_KEY, JSON.stringify({ topic, body, sowKey, correlationId, bookmark }));
  const url = "/publish?republish=1";
  if (window.open(url, "_blank") === null) location.assign(url);
}

/** "Replay from here": a new query of the same topic and filter after `m`'s bookmark. */
function replayButton(m) {
  return el("button", { type: "button", className: "small replay", text: "Replay from here",
    disabled: !m.bookmark, title: m.bookmark ? `replay after ${m.bookmark}` : "no bookmark",
    onclick: () => replayFrom(m.bookmark) });
}

function replayFrom(bookmark) {
  if (client !== null) stop();
  clearRows();
  bookmarkKind.value = "custom";
  bookmarkField.hidden = false;
  $id("bookmark").value = bookmark;
  start();
}

/**
 * The `ts` header as "2024-05-01 12:00:00.123456": from ISO-8601 UTC
 * ("2024-05-01T12:00:00.123456Z") or the compact bookmark form ("20240501T120000.123456Z").
 */
function formatTs(ts) {
  const m = /^(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})(\.\d+)?Z?$/.exec(ts);
  if (m) return `${m[1]}-${m[2]}-${m[3]} ${m[4]}:${m[5]}:${m[6]}${m[7] ?? ""}`;
  return String(ts).replace("T", " ").replace(/(Z|[+-]00:?00)$/, "");
}

/** Move buffered messages into the table once per animation frame, not once per message. */
function flushRows() {
  frame = null;
  const limit = maxRows();
  const batch = pending.length > limit ? pending.slice(-limit) : pending;
  pending = [];
  tbody.querySelector("tr.empty")?.remove();
  const fragment = document.createDocumentFragment();
  for (let i = batch.length - 1; i >= 0; i--) fragment.append(row(batch[i]));
  tbody.prepend(fragment);
  while (tbody.rows.length > limit) tbody.lastElementChild.remove();
  setText($id("q-count"), fmtInt(count));
  setText($id("q-shown"), fmtInt(tbody.rows.length));
  const last = batch[batch.length - 1];
  if (last?.bookmark) setText($id("q-bookmark"), last.bookmark);
}

function onMessage(message) {
  count += 1;
  pending.push({
    n: count,
    bookmark: message.bookmark,
    timestamp: message.timestamp,
    topic: message.topic,
    sowKey: message.sowKey ?? null,
    correlationId: message.correlationId ?? null,
    // copy out of the frame: the text is all the table (and a re-publish) needs
    body: decoder.decode(message.body),
  });
  if (pending.length > maxRows()) pending.splice(0, pending.length - maxRows());
  if (frame === null) frame = requestAnimationFrame(flushRows);
}

function updateRate() {
  const now = performance.now();
  const dt = (now - rateBase.at) / 1000;
  if (dt > 0) setText($id("q-rate"), fmtRate((count - rateBase.count) / dt));
  rateBase = { at: now, count };
}

function running(on) {
  startBtn.disabled = on;
  stopBtn.disabled = !on;
  for (const input of form.querySelectorAll("input, select")) input.disabled = on;
  clearInterval(rateTimer);
  if (on) rateTimer = setInterval(updateRate, 1000);
}

function randomId() {
  const b = new Uint8Array(3);
  crypto.getRandomValues(b);
  return Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
}

async function start() {
  alert.clear();
  const topic = $id("topic").value.trim();
  if (!topic) return;
  const kind = bookmarkKind.value;
  const bookmark = kind === "custom" ? $id("bookmark").value.trim() : kind;
  const options = $id("options").value.split(",").map((o) => o.trim()).filter(Boolean);
  if ($id("opt-timestamp").checked && !options.includes("timestamp")) options.push("timestamp");
  const instance = $id("instance-name")?.textContent?.trim() ?? "spool";
  client = new SpoolClient(wsUrl(), {
    name: `dashboard-query-${randomId()}`,
    userId: $id("ws-user")?.value || undefined,
    password: $id("ws-password")?.value || undefined,
    heartbeat: 10,
  });
  const ends = hasEnd(bookmark, options);
  const own = client;
  client.on("disconnect", ({ error }) => {
    if (client !== own) return;
    alert.error(error, `connection to ${instance}`);
    client = null;
    running(false);
    endReplay();
    setState("failed", "disconnected", error?.reason ?? "");
  });
  client.on("error", (err) => alert.error(err));
  running(true);
  setState("running", "connecting");
  count = 0;
  rateBase = { at: performance.now(), count: 0 };
  setText($id("q-count"), "0");
  setText($id("q-completed"), bookmark ? "replaying" : "–");
  setText($id("q-bookmark"), "–");
  setText($id("q-subid"), "–");
  try {
    await own.connect();
    const subId = await own.subscribe(topic, {
      filter: $id("filter").value.trim() || undefined,
      bookmark: bookmark || undefined,
      options: options.join(",") || undefined,
      onCompleted: () => {
        if (client !== own) return;
        if (!ends) {
          setText($id("q-completed"), "reached live");
          return;
        }
        // the end of the range: nothing more comes, so the page's subscription ends here
        setText($id("q-completed"), "complete");
        stop("stopped", "replay complete");
      },
      onError: (err) => {
        if (client !== own) return;
        alert.error(err, "subscription");
        stop("failed", err.reason ?? String(err));
      },
    }, onMessage);
    if (client !== own) return; // ended while the answer came (a short range, Stop)
    setText($id("q-subid"), subId);
    setState("running", "running");
  } catch (err) {
    if (client !== own) return;
    alert.error(err, `subscribe to ${topic}`);
    stop("failed", err?.reason ?? String(err));
  }
}

/** A replay that did not get to its end says so no longer ("replaying" would be stale). */
function endReplay() {
  if ($id("q-completed").textContent === "replaying") setText($id("q-completed"), "–");
}

function clearRows() {
  tbody.replaceChildren();
  pending = [];
  count = 0;
  setText($id("q-count"), "0");
  setText($id("q-shown"), "0");
}

/** End the page's subscription: `state` "stopped" or "failed", `detail` why. */
function stop(state = "stopped", detail = "") {
  const c = client;
  client = null;
  if (c !== null) c.close();
  running(false);
  updateRate();
  endReplay();
  setState(state, state === "failed" ? "failed" : "stopped", detail);
}

form.addEventListener("submit", (e) => {
  e.preventDefault();
  start();
});
// the button starts disabled, so the browser cannot submit the form itself (a GET with
// the password in the URL) before this script handles it
startBtn.disabled = false;
stopBtn.addEventListener("click", () => stop());
$id("clear").addEventListener("click", clearRows);
bookmarkKind.addEventListener("change", () => {
  bookmarkField.hidden = bookmarkKind.value !== "custom";
});
window.addEventListener("pagehide", () => client?.close());

// -- export -----------------------------------------------------------------------------

/** The rows shown, in table order (newest first), as export records. */
function shownRecords() {
  const out = [];
  for (const tr of tbody.rows) {
    const m = shownMessage.get(tr);
    if (m === undefined) continue;
    out.push({ bookmark: m.bookmark ?? null, timestamp: m.timestamp ?? null, topic: m.topic,
      sow_key: m.sowKey, correlation_id: m.correlationId, body: m.body });
  }
  return out;
}

const EXPORT_FIELDS = ["bookmark", "timestamp", "topic", "sow_key", "correlation_id", "body"];

/** One CSV field per RFC 4180: always quoted, a quote doubled; null is empty. */
function csvField(value) {
  return `"${String(value ?? "").replaceAll('"', '""')}"`;
}

function download(text, type, extension) {
  const topic = $id("topic").value.trim().replace(/[^A-Za-z0-9_.-]+/g, "_") || "query";
  const stamp = new Date().toISOString().replace(/[:.]/g, "-");
  const link = el("a", { attrs: { href: URL.createObjectURL(new Blob([text], { type })),
    download: `spool-${topic}-${stamp}.${extension}` } });
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(link.href), 60_000);
}

$id("export-jsonl").addEventListener("click", () => {
  const lines = shownRecords().map((r) => `${JSON.stringify(r)}\n`);
  download(lines.join(""), "application/x-ndjson", "jsonl");
});
$id("export-csv").addEventListener("click", () => {
  const lines = [EXPORT_FIELDS, ...shownRecords().map((r) => EXPORT_FIELDS.map((f) => r[f]))];
  download(lines.map((fields) => `${fields.map(csvField).join(",")}\r\n`).join(""),
    "text/csv", "csv");
});

// -- inputs from the URL (/query?topic=T&filter=F&bookmark=B) ------------------------------

const params = new URLSearchParams(location.search);
if (params.get("topic")) $id("topic").value = params.get("topic");
if (params.get("filter")) $id("filter").value = params.get("filter");
if (params.has("bookmark")) {
  const bookmark = params.get("bookmark").trim();
  const preset = [...bookmarkKind.options].some((o) => o.value === bookmark && o.value !== "custom");
  bookmarkKind.value = preset ? bookmark : "custom";
  bookmarkField.hidden = preset;
  if (!preset) $id("bookmark").value = bookmark;
  // a link that names a bookmark asks for that replay: run it, unless the websocket needs
  // a password the URL cannot carry
  if (params.get("topic")) {
    if ($id("ws-password")) $id("ws-password").focus();
    else start();
  }
}
