// Transaction log: journal files (GET /api/transaction_log every 3 s), totals, flush
// latency, the configured action that will act on each journal next (`next_actions`), and
// archive / compress / remove with a confirmation (each acts on the journal and all older
// ones; the broker answers 409 while something still needs them). Below, the delayed
// messages the log holds until their due time (GET /api/delayed and, for an admin, the
// first page of GET /api/delayed/messages, every 3 s); hidden on an instance without a
// log (404).

import {
  Alert, ApiError, KeyedTable, Poller, allowAction, api, badge, busy, confirmDialog, el,
  fmtBytes, fmtDateTime, fmtInt, fmtMs, isAdmin, setText,
} from "./ui.js";

const alert = new Alert(document.getElementById("page-alert"));
const $id = (id) => document.getElementById(id);

// Journal states (server/txlog/storage/journal.py JournalInfo): active (being appended to),
// closed (finished, plain), compressed, archived, preallocated (created ahead, empty).
const ACTIONS = {
  archive: {
    title: "Archive",
    verb: "archived",
    text: "moves the files to the archive directory (replays can still read them)",
    allowed: (j) => j.state === "closed" || j.state === "compressed",
  },
  compress: {
    title: "Compress",
    verb: "compressed",
    text: "compresses the files in place (replays can still read them)",
    allowed: (j) => (j.state === "closed" || j.state === "archived") && !j.compression,
  },
  remove: {
    title: "Remove",
    verb: "removed",
    text: "deletes the files for good; their messages can never be replayed again",
    allowed: (j) => j.state !== "active" && j.state !== "preallocated",
  },
};

/** Size on disk (`size_bytes`; `size` in older answers). */
const sizeOf = (j) => j.size_bytes ?? j.size;

/** A journal time as epoch seconds: `first_time_us` (or an ISO `first_time`). */
function timeOf(j, which) {
  const us = j[`${which}_time_us`];
  if (us !== undefined && us !== null) return us / 1e6;
  return j[`${which}_time`] ?? null;
}

function kv(node, rows) {
  node.replaceChildren(...rows.flatMap(([k, v]) => [
    el("dt", { text: k }), el("dd", { text: v ?? "–", title: String(v ?? "") }),
  ]));
}

let journals = [];

async function journalAction(button, action, journal) {
  const spec = ACTIONS[action];
  // the action takes every older journal it applies to (never a preallocated or
  // active file, nor one already in the state it makes)
  const older = journals.filter((j) => j.id < journal.id && spec.allowed(j)).length;
  const yes = await confirmDialog({
    title: `${spec.title} journal ${journal.id}${older ? ` and ${older} older` : ""}?`,
    message: [
      `${spec.title} ${spec.text}.`,
      `Covers sequences up to ${fmtInt(journal.last_seq)} (${fmtDateTime(timeOf(journal, "last"))} UTC).`,
    ],
    confirm: spec.title,
    danger: action === "remove",
  });
  if (!yes) return;
  await busy(button, async () => {
    try {
      const result = await api(`/api/transaction_log/journals/${journal.id}/${action}`, { method: "POST" });
      const n = Array.isArray(result?.journals) ? result.journals.length : null;
      alert.ok(`journal ${journal.id}${n !== null ? ` (${n} file${n === 1 ? "" : "s"})` : ""} ${spec.verb}`);
    } catch (err) {
      alert.error(err, `${action} journal ${journal.id}`);
    }
  });
  await poller.now();
}

const CELLS = ["id", "state", "size", "records", "seqs", "bookmarks", "times", "next"];
const NUMERIC = new Set(["id", "size", "records", "seqs"]);
const TWO_LINE = new Set(["bookmarks", "times", "next"]);

/** One planned action in words: "archive by nightly", "at 2024-05-02 02:00:00". */
function planLines(p) {
  const what = `${p.operation} by ${p.action}${p.conditional ? " (if its condition holds)" : ""}`;
  const when = p.at ? `at ${fmtDateTime(p.at)}` : p.when;
  return [what, p.pinned_by ? `${when} · pinned by ${p.pinned_by}` : when];
}

/** Set a two-line cell (first value above, last below) only when it changed. */
function setLines(td, first, last) {
  const key = `${first}\n${last}`;
  if (td.dataset.text === key) return;
  td.dataset.text = key;
  td.replaceChildren(el("span", { text: first }), el("span", { text: last }));
}

const rows = new KeyedTable($id("journals-table").tBodies[0], {
  // preallocated files all have id 0: the path is what tells journals apart
  key: (j) => j.path,
  columns: CELLS.length + 1,
  empty: "No journal file.",
  create: () => {
    const tr = el("tr");
    for (const field of CELLS) {
      const cls = NUMERIC.has(field) ? "num" : TWO_LINE.has(field) ? "mono two-line" : "";
      tr.append(el("td", { className: cls, dataset: { field } }));
    }
    const cell = el("td", { className: "nowrap" });
    for (const action of Object.keys(ACTIONS)) {
      const button = el("button", { type: "button", className: `small${action === "remove" ? " danger" : ""}`,
        text: ACTIONS[action].title, dataset: { action } });
      button.addEventListener("click", () => journalAction(button, action, tr._journal));
      cell.append(button, " ");
    }
    tr.append(cell);
    return tr;
  },
  update: (tr, j) => {
    tr._journal = j;
    tr.dataset.id = String(j.id);
    const empty = j.state === "preallocated" || j.records === 0;
    const time = (which) => {
      const t = timeOf(j, which);
      return t === null ? "–" : fmtDateTime(t);
    };
    CELLS.forEach((field, i) => {
      const td = tr.cells[i];
      switch (field) {
        case "id":
          setText(td, j.state === "preallocated" ? "–" : fmtInt(j.id));
          td.title = j.path ?? "";
          break;
        case "state": {
          const key = `${j.state}|${j.compression ?? ""}|${j.pinned_by ?? ""}`;
          if (td.dataset.key !== key) {
            td.dataset.key = key;
            td.replaceChildren(badge(j.state));
            if (j.compression && j.state !== "compressed") td.append(" ", badge(j.compression));
            if (j.pinned_by) {
              const pin = badge("pinned");
              pin.title = `still needed by ${j.pinned_by}`;
              td.append(" ", pin);
            }
          }
          break;
        }
        case "size":
          setText(td, fmtBytes(sizeOf(j)));
          td.title = j.data_bytes === undefined ? "" : `${fmtBytes(j.data_bytes)} of records`;
          break;
        case "records": setText(td, j.records === undefined ? "–" : fmtInt(j.records)); break;
        case "seqs": setText(td, empty ? "–" : `${fmtInt(j.first_seq)} – ${fmtInt(j.last_seq)}`); break;
        case "bookmarks": setLines(td, j.first_bookmark || "–", j.last_bookmark || "–"); break;
        case "times": setLines(td, time("first"), time("last")); break;
        case "next": {
          const plan = j.next_actions ?? [];
          if (plan.length === 0) {
            setLines(td, "–", "");
            td.title = "";
          } else {
            const [what, when] = planLines(plan[0]);
            setLines(td, what, when);
            td.title = plan.map((p) => planLines(p).join(" ")).join("\n");
          }
          break;
        }
        default: break;
      }
    });
    for (const button of tr.cells[CELLS.length].querySelectorAll("button")) {
      allowAction(button, ACTIONS[button.dataset.action].allowed(j));
    }
  },
});

function render(info) {
  if (info === null) {
    journals = [];
    rows.render([]);
    setText($id("summary"), "no transaction log configured");
    return;
  }
  journals = info.journals ?? [];
  // oldest first; preallocated (future) files last
  const rank = (j) => (j.state === "preallocated" ? Infinity : j.id);
  rows.render([...journals].sort((a, b) => rank(a) - rank(b) || String(a.path).localeCompare(b.path)));
  const t = info.totals ?? {};
  const st = info.stats ?? {};
  setText($id("summary"), `${fmtInt(t.files ?? journals.length)} files · ${fmtBytes(t.bytes)}`);
  kv($id("totals"), [
    ["files", fmtInt(t.files ?? journals.length)],
    ["bytes", fmtBytes(t.bytes)],
    ["first seq", fmtInt(t.first_seq)],
    ["last seq", fmtInt(t.last_seq)],
    ["durable seq", fmtInt(t.durable_seq)],
    ["not yet durable", fmtInt(Math.max(0, (t.last_seq ?? 0) - (t.durable_seq ?? 0)))],
  ]);
  const fl = info.flush_latency_ms ?? {};
  kv($id("flush"), [
    ["fsync p50", fmtMs(fl.p50)],
    ["fsync p99", fmtMs(fl.p99)],
    ["flushes", fmtInt(st.flushes)],
    ["records in", fmtInt(st.appended)],
  ]);
  // the writer's counters that say something to an operator; the rest is in /api/transaction_log
  const shown = [
    ["appended_bytes", "bytes in", fmtBytes], ["disk_bytes", "on disk", fmtBytes],
    ["journals", "journals", fmtInt], ["preallocated", "preallocated", fmtInt],
    ["rolls", "rolls", fmtInt], ["publishers", "publishers", fmtInt],
    ["pins", "pins", fmtInt], ["pending_records", "pending records", fmtInt],
    ["tail_cache_bytes", "tail cache", fmtBytes], ["write_failed", "write failed", fmtInt],
    ["recovery_seconds", "recovery", (v) => `${Number(v).toFixed(2)} s`],
    ["recovery_truncated_bytes", "recovery cut", fmtBytes],
  ].filter(([key]) => st[key] !== undefined);
  kv($id("writer"), shown.map(([key, label, fmt]) => [label, fmt(st[key])]));
}

const poller = new Poller(async () => {
  try {
    render(await api("/api/transaction_log"));
    setText($id("updated"), new Date().toISOString().slice(11, 19));
    alert.clear("poll");
  } catch (err) {
    if (err.status === 404) {
      // the instance runs without a transaction log
      render(null);
      return;
    }
    alert.error(err, "refresh", "poll");
  }
}, 3000);
poller.start();

// -- delayed messages ---------------------------------------------------------------------

/** Messages of the "Next delayed messages" table: the first page of the listing. */
const NEXT_PAGE = 20;

const delayedTopics = new KeyedTable($id("delayed-topics").tBodies[0], {
  key: (t) => t.topic,
  columns: 2,
  empty: "No delayed message pending.",
  create: () => el("tr", {}, el("td", { className: "mono" }), el("td", { className: "num" })),
  update: (tr, t) => {
    setText(tr.cells[0], t.topic);
    setText(tr.cells[1], fmtInt(t.pending));
  },
});

const delayedNext = new KeyedTable($id("delayed-messages").tBodies[0], {
  key: (m) => `${m.due_us}:${m.seq}`,
  columns: 4,
  empty: "No delayed message pending.",
  create: () => el("tr", {},
    el("td", { className: "mono" }), el("td", { className: "mono" }),
    el("td", { className: "num" }), el("td", { className: "mono" })),
  update: (tr, m) => {
    setText(tr.cells[0], fmtDateTime(m.due, { ms: true }));
    // a message whose record could not be read (a fenced range) has no topic
    setText(tr.cells[1], m.topic || "–");
    setText(tr.cells[2], fmtInt(m.seq));
    setText(tr.cells[3], m.bookmark);
  },
});

/** Whether this user gets the listing (an admin; it stops at a 403). */
let listMessages = isAdmin;

function renderDelayed(info) {
  const shown = info.topics.reduce((n, t) => n + t.pending, 0);
  const facts = [
    ["pending", fmtInt(info.pending)],
    ["next due", info.next_due === null ? "–" : `${fmtDateTime(info.next_due)} UTC`],
    ["delivered since start", fmtInt(info.delivered)],
    ["retrying", info.waiting ? "yes: the log refused the due records, or a record is fenced" : "no"],
  ];
  // the totals count every topic; the list only the topics this user may read
  if (shown < info.pending) facts.push(["in topics not shown", fmtInt(info.pending - shown)]);
  kv($id("delayed-kv"), facts);
  delayedTopics.render(info.topics);
}

async function refreshNext() {
  try {
    const page = await api(`/api/delayed/messages?limit=${NEXT_PAGE}`);
    delayedNext.render(page.messages);
    setText($id("delayed-next-updated"),
      page.next_after === null ? "every pending message" : `the first ${NEXT_PAGE} due`);
    $id("delayed-next").hidden = false;
  } catch (err) {
    if (err instanceof ApiError && err.status === 403) {
      listMessages = false;
      $id("delayed-next").hidden = true;
      return;
    }
    throw err;
  }
}

const delayedPoller = new Poller(async () => {
  try {
    renderDelayed(await api("/api/delayed"));
    if (listMessages) await refreshNext();
    $id("delayed").hidden = false;
    setText($id("delayed-updated"), new Date().toISOString().slice(11, 19));
    alert.clear("delayed");
  } catch (err) {
    if (err instanceof ApiError && err.status === 404) {
      // no transaction log, so no delayed delivery: nothing to show while this instance runs
      $id("delayed").hidden = true;
      $id("delayed-next").hidden = true;
      delayedPoller.stop();
      return;
    }
    alert.error(err, "delayed messages", "delayed");
  }
}, 3000);
delayedPoller.start();
