// Publish: messages published by this page itself, through the browser Spool client
// (static/spool-client.js) over the websocket, as the Query page subscribes. The broker
// checks the websocket user's entitlements and answers with its own acks, so what the
// page shows (the ack, its bookmark, a refusal and its reason) is the broker's word.
//
// The Query page's Re-publish button hands a received message over in sessionStorage
// (REPUBLISH_KEY; a tab opened from the Query page starts with a copy of its storage)
// and opens /publish?republish=1, which fills the form with it.

import { SpoolClient } from "../spool-client.js";
import { Alert, el, fmtInt, setText } from "./ui.js";

/** Where the Query page leaves the message to re-publish (the same name in query.js). */
const REPUBLISH_KEY = "spool.republish";
/** The most messages one press of Publish sends. */
const MAX_COUNT = 1000;
/** Rows kept in the table of results. */
const KEPT_RESULTS = 50;

const alert = new Alert(document.getElementById("page-alert"));
const $id = (id) => document.getElementById(id);
const form = $id("publish-form");
const publishBtn = $id("publish");
const results = $id("results-table").tBodies[0];

/** @type {SpoolClient | null} */
let client = null;
/** the credentials `client` logged on with, to open a new connection when they change */
let clientKey = "";
/** the message being re-published: {topic, bookmark, ...} from the Query page, or null */
let original = null;
/** the last publish asked for: what a refusal that comes without a waiting promise is about */
let lastRequest = { topic: "", count: 1, ack: "none" };

function wsUrl() {
  return `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/amps/json`;
}

function randomId() {
  const b = new Uint8Array(3);
  crypto.getRandomValues(b);
  return Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
}

function utcTime() {
  return new Date().toISOString().slice(11, 19);
}

function setResult(state, text) {
  const node = $id("p-result");
  node.className = `state-${state}`;
  setText(node, text);
}

/** One row of the results table, newest first. */
function addResult({ topic, count, ack, result, detail }) {
  results.querySelector("tr.empty")?.remove();
  results.prepend(el("tr", { className: `publish-${result}` },
    el("td", { className: "mono", text: utcTime() }),
    el("td", { className: "mono", text: topic }),
    el("td", { className: "num", text: fmtInt(count) }),
    el("td", { text: ack }),
    el("td", { text: result }),
    el("td", { className: "mono", text: detail })));
  while (results.rows.length > KEPT_RESULTS) results.lastElementChild.remove();
}

function closeClient() {
  const c = client;
  client = null;
  clientKey = "";
  setText($id("p-client"), "–");
  c?.close();
}

/** The page's connection, logged on as the websocket user of the form (a new one when
 * the credentials changed or the last one went away). */
async function connection() {
  const userId = $id("ws-user")?.value || undefined;
  const password = $id("ws-password")?.value || undefined;
  const key = JSON.stringify([userId ?? "", password ?? ""]);
  if (client !== null && clientKey === key) return client;
  closeClient();
  const c = new SpoolClient(wsUrl(), {
    name: `dashboard-publish-${randomId()}`,
    userId,
    password,
    heartbeat: 10,
  });
  c.on("disconnect", ({ error }) => {
    if (client !== c) return;
    client = null;
    clientKey = "";
    setText($id("p-client"), "–");
    const instance = $id("instance-name")?.textContent?.trim() ?? "spool";
    alert.error(error, `connection to ${instance}`);
  });
  // a refusal no promise waits for: a publish sent without an ack
  c.on("error", (err) => {
    if (client !== c) return;
    refused(err, lastRequest);
  });
  client = c;
  clientKey = key;
  try {
    await c.connect();
  } catch (err) {
    if (client === c) closeClient();
    throw err;
  }
  setText($id("p-client"), c.name);
  return c;
}

function refused(err, { topic, count, ack }) {
  const reason = err?.reason ?? (err instanceof Error ? err.name : "error");
  alert.error(err, topic ? `publish to ${topic}` : "publish");
  setResult("failed", "refused");
  if (ack !== "none") setText($id("p-ack"), `${ack}: failure`);
  setText($id("p-bookmark"), "–");
  addResult({ topic, count, ack, result: "refused", detail: `${reason}: ${err?.detail ?? err?.message ?? ""}` });
}

/** Read and check the form; null (with the reason shown) when it cannot be sent. */
function readForm() {
  const topic = $id("topic").value.trim();
  const count = Number($id("count").value);
  if (!topic) {
    alert.error("a topic is needed", "publish");
    return null;
  }
  if (!Number.isInteger(count) || count < 1 || count > MAX_COUNT) {
    alert.error(`count must be a whole number from 1 to ${fmtInt(MAX_COUNT)}`, "publish");
    return null;
  }
  const ack = $id("ack-mode").value;
  /** @type {{ack?: string, ackPersisted?: boolean, correlationId?: string, sowKey?: string}} */
  const opts = {
    correlationId: $id("correlation-id").value || undefined,
    sowKey: $id("sow-key").value.trim() || undefined,
  };
  if (ack === "processed") opts.ack = "processed";
  if (ack === "persisted") opts.ackPersisted = true;
  // the body is sent exactly as typed: the broker stores and delivers these bytes
  return { topic, count, ack, opts, body: $id("body").value };
}

function seqRange(first, last) {
  return first === last ? String(first) : `${first}–${last}`;
}

async function publish() {
  alert.clear();
  const request = readForm();
  if (request === null) return;
  const { topic, count, ack, opts, body } = request;
  lastRequest = { topic, count, ack };
  setResult("running", "publishing");
  for (const id of ["p-ack", "p-count", "p-seq", "p-bookmark"]) setText($id(id), "–");
  let c;
  try {
    c = await connection();
  } catch (err) {
    refused(err, { topic, count, ack });
    return;
  }
  const sent = [];
  try {
    for (let i = 0; i < count; i++) sent.push(c.publish(topic, body, opts));
    const acks = await Promise.all(sent);
    published(request, acks);
  } catch (err) {
    refused(err, { topic, count, ack });
  }
}

/** Show what the broker acknowledged: sequence numbers, or {seq, bookmark} when persisted. */
function published({ topic, count, ack }, acks) {
  const seqs = acks.map((a) => (typeof a === "number" ? a : a.seq));
  const bookmarks = acks.map((a) => (typeof a === "number" ? null : a.bookmark)).filter(Boolean);
  const first = bookmarks[0] ?? null;
  const last = bookmarks[bookmarks.length - 1] ?? null;
  const bookmark = first === null ? "–" : first === last ? first : `${first} … ${last}`;
  setResult(ack === "none" ? "stopped" : "running", ack === "none" ? "sent" : "published");
  setText($id("p-ack"), ack === "none" ? "none asked" : `${ack}: success`);
  setText($id("p-count"), fmtInt(count));
  setText($id("p-seq"), seqRange(seqs[0], seqs[seqs.length - 1]));
  setText($id("p-bookmark"), bookmark);
  addResult({ topic, count, ack, result: ack === "none" ? "sent" : "published", detail: bookmark });
  if (original !== null) {
    const was = original.bookmark ? ` (the original: ${original.bookmark})` : "";
    alert.ok(last === null
      ? `re-published to ${topic} as a new message${was}; a persisted ack shows its new bookmark`
      : `re-published to ${topic} as a new message with the new bookmark ${last}${was}`);
  }
}

/** Fill the form with the message the Query page handed over (REPUBLISH_KEY). */
function takeRepublished() {
  let message;
  try {
    message = JSON.parse(sessionStorage.getItem(REPUBLISH_KEY) ?? "null");
  } catch {
    message = null;
  }
  sessionStorage.removeItem(REPUBLISH_KEY);
  if (message === null || typeof message.topic !== "string") {
    alert.error("the message to re-publish is not here any more: press Re-publish on the Query page again",
      "re-publish");
    return;
  }
  original = message;
  $id("topic").value = message.topic;
  $id("body").value = message.body ?? "";
  $id("sow-key").value = message.sowKey ?? "";
  $id("correlation-id").value = message.correlationId ?? "";
  $id("ack-mode").value = "persisted";
  setText($id("p-heading"), "Re-publish");
  const note = $id("republish-note");
  note.hidden = false;
  setText(note, `a copy of ${message.bookmark ? `the message ${message.bookmark}` : "a message"} ` +
    `from the Query page: publishing it makes a new message, with a new bookmark`);
}

function reset() {
  for (const id of ["topic", "body", "sow-key", "correlation-id"]) $id(id).value = "";
  $id("count").value = "1";
  original = null;
  $id("republish-note").hidden = true;
  setText($id("p-heading"), "Message");
  alert.clear();
}

form.addEventListener("submit", async (e) => {
  e.preventDefault();
  publishBtn.disabled = true;
  try {
    await publish();
  } finally {
    publishBtn.disabled = false;
  }
});
$id("reset").addEventListener("click", reset);
publishBtn.disabled = false;
window.addEventListener("pagehide", () => closeClient());

const params = new URLSearchParams(location.search);
if (params.get("republish")) takeRepublished();
else if (params.get("topic")) $id("topic").value = params.get("topic");
