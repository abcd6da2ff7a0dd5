// One queue's messages (/queues/messages?queue=NAME): GET /api/queues/{name}/messages a
// page at a time (the broker pages with a cursor: this page never holds more than one
// page of a queue), with why each message is not being delivered. Admin only; the user
// must be entitled to read the queue (the broker answers 403 otherwise, shown here).

import { Alert, api, el, fmtDuration, fmtInt, fmtLag, setText } from "./ui.js";

const alert = new Alert(document.getElementById("page-alert"));
const $id = (id) => document.getElementById(id);
const queue = new URLSearchParams(location.search).get("queue") ?? "";
const PAGE = 100;
/** the cursor of the page shown (0: the first) and of the next one (null: none) */
let after = 0;
let next = null;

setText($id("queue-name"), queue);
document.title = `Queue ${queue} · messages`;

function reasonCell(m) {
  const since = m.since_age !== null ? ` (since ${fmtLag(m.since_age)} ago)` : "";
  return el("td", { className: `reason reason-${m.reason}`, dataset: { reason: m.reason } },
    el("b", { text: m.reason.replaceAll("_", " ") }), ` ${m.detail}${since}`);
}

function row(m) {
  return el("tr", { dataset: { bookmark: m.bookmark } },
    el("td", { className: "mono", text: m.bookmark }),
    el("td", { className: "num age", text: fmtDuration(m.age) }),
    el("td", { className: "mono", text: m.owner }),
    el("td", { className: "num", text: fmtInt(m.epoch) }),
    el("td", { className: "num", text: fmtInt(m.deliveries) }),
    el("td", { className: "mono", text: m.lease_holder ?? "–" }),
    el("td", { className: "num", text: m.lease_expires_in === null ? "–" : fmtDuration(Math.max(0, m.lease_expires_in)) }),
    reasonCell(m),
    el("td", { className: "mono data", text: m.data + (m.truncated ? "…" : "") }));
}

async function load(cursor) {
  if (!queue) {
    alert.error(new Error("no queue given (open this page from the Queues page)"), "messages");
    return;
  }
  try {
    const page = await api(`/api/queues/${encodeURIComponent(queue)}/messages?after=${cursor}&limit=${PAGE}`);
    after = cursor;
    next = page.next_after;
    const body = $id("messages-table").tBodies[0];
    body.replaceChildren(...page.messages.map(row));
    if (!body.rows.length) body.append(el("tr", {}, el("td", { colSpan: 9, className: "muted", text: "no message" })));
    const inactive = page.inactive ? `, ${fmtInt(page.inactive)} inactive in the log` : "";
    setText($id("page-info"), `${fmtInt(page.messages.length)} shown of ${fmtInt(page.depth)}${inactive}`);
    $id("next-page").disabled = next === null;
    alert.clear("messages");
  } catch (err) {
    alert.error(err, `messages of ${queue}`, "messages");
  }
}

$id("first-page").addEventListener("click", () => load(0));
$id("next-page").addEventListener("click", () => { if (next !== null) load(next); });
$id("refresh").addEventListener("click", () => load(after));
load(0);
