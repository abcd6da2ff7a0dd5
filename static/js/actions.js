// Actions: the configured actions (GET /api/actions every 2 s) with their triggers, next
// run, steps and last run; "Run now" for on-admin actions, with a form for their declared
// parameters (POST /api/actions/NAME); the history of runs (GET /api/action_runs), each
// run's steps in a dialog. An action run by messages shows its tally since the instance
// started under its triggers, its last history window as its last run, and no "Run now"
// (the broker refuses to run it on demand).

import {
  Alert, KeyedTable, Poller, allowAction, api, badge, busy, el, fmtDateTime, fmtInt,
  setText,
} from "./ui.js";

const alert = new Alert(document.getElementById("page-alert"));
const $id = (id) => document.getElementById(id);
const historySelect = $id("history-action");

/** A run's duration: "12 ms", "3.4 s", "2m 05s". */
function took(seconds) {
  if (seconds === null || seconds === undefined) return "–";
  if (seconds < 1) return `${Math.round(seconds * 1000)} ms`;
  if (seconds < 60) return `${seconds.toFixed(1)} s`;
  return `${Math.floor(seconds / 60)}m ${String(Math.floor(seconds % 60)).padStart(2, "0")}s`;
}

/**
 * A trigger in words. The broker describes an on-admin trigger with the REST path's
 * placeholder (it does not know the action there); the page names the action itself.
 */
function triggerText(trigger, action) {
  if (trigger.module !== "amps-action-on-admin") return trigger.description;
  return `on demand: Run now, or POST /api/actions/${encodeURIComponent(action)}`;
}

/** A cell of several lines (one <div> each), rebuilt only when the text changes. */
function setLines(td, lines) {
  const key = lines.join("\n");
  if (td.dataset.text === key) return;
  td.dataset.text = key;
  td.replaceChildren(...lines.map((line) => el("div", { text: line })));
}

/**
 * The live tally of an action run by messages: one labelled count each, `dropped` and
 * `loop cut` emphasised when not zero (messages that did not fire it), the webhook posts
 * when the action has a webhook step.
 */
const TALLY = [
  ["offered", "offered", "messages its triggers saw"],
  ["dropped", "dropped", "messages its queue had no room for: they did not fire it"],
  ["matched", "matched", "messages that passed the trigger's filter"],
  ["runs", "runs", "firings run, one per matched message"],
  ["failed", "failed", "firings whose step failed"],
  ["derived", "derived", "messages its publish steps stored"],
  ["loop_cut", "loop cut", "messages derived too many times over (a loop): not offered"],
];
const WEBHOOK_TALLY = [
  ["webhooks_sent", "sent"], ["webhooks_failed", "failed"], ["webhooks_dropped", "dropped"],
];
const LOSSES = new Set(["dropped", "loop_cut", "failed", "webhooks_failed", "webhooks_dropped"]);

function tallyCount(events, key, label, title) {
  const n = events[key] ?? 0;
  const emphasis = LOSSES.has(key) && n > 0;
  return el("span", { className: emphasis ? "count warn" : "count", title: title ?? "",
    dataset: { count: key } }, el("b", { text: fmtInt(n) }), ` ${label}`);
}

/** The tally's elements under the triggers, rebuilt only when a count changes. */
function setTally(td, a) {
  const events = a.events;
  const keys = [...TALLY.map(([k]) => k), ...(a.webhooks ? WEBHOOK_TALLY.map(([k]) => k) : [])];
  const key = [a.triggers.map((t) => triggerText(t, a.name)).join("\n"),
    ...keys.map((k) => events[k] ?? 0)].join("|");
  if (td.dataset.text === key) return;
  td.dataset.text = key;
  const counts = TALLY.map(([k, label, title]) => tallyCount(events, k, label, title));
  const posts = a.webhooks
    ? [el("span", { className: "muted", text: "webhooks" }),
      ...WEBHOOK_TALLY.map(([k, label]) => tallyCount(events, k, label))]
    : [];
  td.replaceChildren(
    ...a.triggers.map((t) => el("div", { text: triggerText(t, a.name) })),
    el("div", { className: "tally mono", dataset: { field: "events" } }, ...counts),
    posts.length ? el("div", { className: "tally mono", dataset: { field: "webhooks" } }, ...posts) : "");
}

// -- run now ----------------------------------------------------------------------------

/** The parameter form of an on-admin action; resolves to {name: value} or null (cancel). */
function parameterDialog(action) {
  return new Promise((resolve) => {
    const inputs = action.parameters.map((p) => {
      const input = el("input", {
        type: "text", className: "mono", name: p.name, value: p.default ?? "",
        required: p.required, attrs: { "aria-label": p.name, autocomplete: "off" },
        dataset: { parameter: p.name },
      });
      const help = [p.description, p.pattern ? `must match ${p.pattern}` : "",
        p.required ? "required" : `default: ${p.default === "" ? "(empty)" : p.default}`]
        .filter(Boolean).join(" · ");
      return { p, input, field: el("div", { className: "field" },
        el("label", { text: p.name }), input, el("span", { className: "muted", text: help })) };
    });
    const run = el("button", { type: "submit", className: "primary", text: "Run",
      dataset: { action: "run" } });
    const cancel = el("button", { type: "button", text: "Cancel", dataset: { action: "cancel" } });
    const steps = action.steps.map((s) => `${s.index}. ${s.description}`);
    const form = el("form", { method: "dialog", className: "run-form" },
      el("div", { className: "dlg-body" },
        el("h3", { text: `Run ${action.name} now?` }),
        ...steps.map((line) => el("p", { className: "mono", text: line })),
        ...inputs.map((i) => i.field),
        inputs.length ? null : el("p", { text: "This action takes no parameters." })),
      el("div", { className: "dlg-actions" }, cancel, run));
    const dialog = el("dialog", { className: "confirm", dataset: { dialog: "run" } }, form);
    let answer = null;
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      if (!form.reportValidity()) return;
      answer = Object.fromEntries(inputs.map(({ p, input }) => [p.name, input.value]));
      dialog.close();
    });
    cancel.addEventListener("click", () => dialog.close());
    dialog.addEventListener("close", () => {
      dialog.remove();
      resolve(answer);
    });
    document.body.append(dialog);
    dialog.showModal();
    (inputs[0]?.input ?? run).focus();
  });
}

async function runNow(button, action) {
  const parameters = await parameterDialog(action);
  if (parameters === null) return;
  await busy(button, async () => {
    try {
      const result = await api(`/api/actions/${encodeURIComponent(action.name)}`, {
        method: "POST", body: { parameters },
      });
      const run = result.run;
      alert.ok(`${action.name}: ${run.outcome}${run.message ? ` · ${run.message}` : ""}`);
    } catch (err) {
      alert.error(err, `run ${action.name}`);
    }
  });
  await Promise.all([poller.now(), history.now()]);
}

// -- the actions table ------------------------------------------------------------------

const CELLS = ["name", "triggers", "next_run", "steps", "last", "outcome", "runs"];
let actions = [];

const rows = new KeyedTable($id("actions-table").tBodies[0], {
  key: (a) => a.name,
  columns: CELLS.length + 1,
  empty: "No action is configured (see <Actions> in the configuration).",
  create: () => {
    const tr = el("tr");
    const classes = { runs: "num", name: "mono", outcome: "wrap" };
    for (const field of CELLS) tr.append(el("td", { className: classes[field] ?? "", dataset: { field } }));
    const button = el("button", { type: "button", className: "small primary", text: "Run now",
      dataset: { action: "run-now" } });
    button.addEventListener("click", () => runNow(button, tr._action));
    tr.append(el("td", { className: "nowrap" }, button));
    return tr;
  },
  update: (tr, a) => {
    tr._action = a;
    const last = a.running ?? a.last_run;
    CELLS.forEach((field, i) => {
      const td = tr.cells[i];
      switch (field) {
        case "name": setText(td, a.name); break;
        case "triggers":
          if (a.event_driven && a.events) setTally(td, a);
          else setLines(td, a.triggers.map((t) => triggerText(t, a.name)));
          break;
        case "next_run":
          setText(td, a.event_driven ? "each message" : a.next_run ? fmtDateTime(a.next_run) : "–");
          break;
        case "steps": setLines(td, a.steps.map((s) => `${s.index}. ${s.description}`)); break;
        case "last":
          setText(td, last ? fmtDateTime(last.started) : "never");
          td.title = last ? `${last.trigger} · ${last.detail}` : "";
          break;
        case "outcome": {
          const state = a.running ? "running" : a.last_run?.outcome ?? "";
          // a history window says what it counted; a run, what its steps did
          const counted = a.last_run?.events ? a.last_run.detail : null;
          const message = a.running ? "" : counted ?? a.last_run?.message ?? "";
          const key = `${state}|${message}`;
          if (td.dataset.key !== key) {
            td.dataset.key = key;
            td.replaceChildren(...(state ? [badge(state)] : []),
              message ? el("span", { className: "muted", text: ` ${message}` }) : "");
          }
          break;
        }
        case "runs":
          setText(td, fmtInt(a.runs));
          if (a.event_driven) {
            td.title = "firings: one per matching message";
          } else {
            td.title = a.skipped ? `${a.skipped} firing(s) skipped while a run was in progress` : "";
          }
          break;
        default: break;
      }
    });
    const cell = tr.cells[CELLS.length];
    const button = cell.firstChild;
    button.hidden = !a.on_admin;
    allowAction(button, !a.running);
    // run by messages: nothing to run on demand (POST /api/actions/NAME refuses it)
    cell.title = a.event_driven ? "Runs once per matching message, not on demand" : "";
  },
});

function fillHistorySelect() {
  const names = actions.map((a) => a.name);
  const have = [...historySelect.options].slice(1).map((o) => o.value);
  if (have.join("\n") === names.join("\n")) return;
  const chosen = historySelect.value;
  historySelect.replaceChildren(el("option", { value: "", text: "all actions" }),
    ...names.map((n) => el("option", { value: n, text: n })));
  historySelect.value = names.includes(chosen) ? chosen : "";
}

const poller = new Poller(async () => {
  try {
    actions = (await api("/api/actions")).actions;
    rows.render(actions);
    fillHistorySelect();
    setText($id("count"), `${actions.length}`);
    setText($id("updated"), new Date().toISOString().slice(11, 19));
    alert.clear("poll");
  } catch (err) {
    alert.error(err, "refresh", "poll");
  }
}, 2000);

// -- history ----------------------------------------------------------------------------

function showRun(run) {
  const close = el("button", { type: "button", text: "Close", dataset: { action: "close" } });
  const lines = run.steps.map((s) => el("li", {},
    badge(s.status), ` ${s.kind} ${s.module}`,
    s.message ? el("div", { className: "muted", text: s.message }) : null,
    s.files.length ? el("div", { className: "mono", text: s.files.join("\n") }) : null));
  const params = Object.entries(run.parameters ?? {});
  const dialog = el("dialog", { className: "confirm", dataset: { dialog: "run-detail" } },
    el("div", { className: "dlg-body" },
      el("h3", { text: `${run.action} · run ${run.id ?? "–"} · ${run.outcome}` }),
      el("p", { text: `${fmtDateTime(run.started, { ms: true })} UTC · ${took(run.duration_s)} · ${run.trigger} (${run.detail})` }),
      params.length ? el("p", { className: "mono", text: params.map(([k, v]) => `${k}=${v}`).join(" ") }) : null,
      el("ol", { className: "steps" }, ...lines)),
    el("div", { className: "dlg-actions" }, close));
  close.addEventListener("click", () => dialog.close());
  dialog.addEventListener("close", () => dialog.remove());
  document.body.append(dialog);
  dialog.showModal();
  close.focus();
}

const HISTORY_CELLS = ["id", "action", "started", "took", "trigger", "outcome", "message", "files"];

const runs = new KeyedTable($id("history-table").tBodies[0], {
  key: (r) => String(r.id ?? `${r.action}@${r.started}`),
  columns: HISTORY_CELLS.length,
  empty: "No run yet.",
  create: () => {
    const tr = el("tr", { className: "clickable", title: "Show the steps of this run" });
    for (const field of HISTORY_CELLS) {
      const className = ["id", "took", "files"].includes(field) ? "num" : field === "message" ? "wrap" : "";
      tr.append(el("td", { className, dataset: { field } }));
    }
    tr.addEventListener("click", () => showRun(tr._run));
    return tr;
  },
  update: (tr, r) => {
    tr._run = r;
    HISTORY_CELLS.forEach((field, i) => {
      const td = tr.cells[i];
      switch (field) {
        case "id": setText(td, r.id ?? "–"); break;
        case "action": setText(td, r.action); break;
        case "started": setText(td, fmtDateTime(r.started)); break;
        case "took": setText(td, took(r.duration_s)); break;
        case "trigger": setText(td, r.detail); td.title = r.trigger; break;
        case "outcome":
          if (td.dataset.key !== r.outcome) {
            td.dataset.key = r.outcome;
            td.replaceChildren(badge(r.outcome ?? "running"));
          }
          break;
        case "message": setText(td, r.message || "–"); break;
        case "files": setText(td, fmtInt(r.files.length)); break;
        default: break;
      }
    });
  },
});

const history = new Poller(async () => {
  try {
    const action = historySelect.value;
    const query = action ? `&action=${encodeURIComponent(action)}` : "";
    runs.render((await api(`/api/action_runs?limit=100${query}`)).runs);
    setText($id("history-updated"), new Date().toISOString().slice(11, 19));
    alert.clear("history");
  } catch (err) {
    alert.error(err, "history", "history");
  }
}, 3000);

historySelect.addEventListener("change", () => history.now());
poller.start();
history.start();
