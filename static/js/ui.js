// Shared helpers of the dashboard pages: REST calls, inline errors, DOM building,
// number formatting, polling, keyed tables, confirmation dialogs.
//
// Everything that shows server data goes through textContent (never innerHTML), so
// client names, topics and bodies cannot inject markup.

// -- REST -------------------------------------------------------------------------------

/** A non-2xx answer of the admin API, carrying its JSON `error` and `detail`. */
export class ApiError extends Error {
  constructor(status, error, detail) {
    super(detail ? `${error}: ${detail}` : error);
    this.name = "ApiError";
    this.status = status;
    this.error = error;
    this.detail = detail;
  }
}

/** The CSRF token the page was rendered with (sent on every POST). */
export function csrfToken() {
  return document.querySelector('meta[name="csrf-token"]')?.content ?? "";
}

function loginUrl() {
  const next = `${location.pathname}${location.search}${location.hash}`;
  return `/login?next=${encodeURIComponent(next)}`;
}

/**
 * Call the admin API and return its JSON.
 *
 * @param {string} path e.g. "/api/clients"
 * @param {object} [opts] method ("GET"), body (JSON-serialised), signal
 * @throws {ApiError} on a 4xx/5xx answer (the API's `error` and `detail`), or a network
 *   failure (status 0). A 401 sends the browser to the login page.
 */
export async function api(path, { method = "GET", body, signal } = {}) {
  const headers = { Accept: "application/json" };
  const init = { method, headers, signal, credentials: "same-origin", cache: "no-store" };
  if (method !== "GET" && method !== "HEAD") {
    headers["X-CSRF-Token"] = csrfToken();
    if (body !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
  }
  let response;
  try {
    response = await fetch(path, init);
  } catch (exc) {
    if (exc.name === "AbortError") throw exc;
    throw new ApiError(0, "unreachable", `the broker did not answer (${exc.message})`);
  }
  const text = await response.text();
  let data = null;
  if (text) {
    try {
      data = JSON.parse(text);
    } catch {
      data = null;
    }
  }
  if (!response.ok) {
    if (response.status === 401 && method === "GET") {
      location.assign(loginUrl());
    }
    const error = data?.error ?? `HTTP ${response.status}`;
    const detail = data?.detail ?? (data === null ? text.slice(0, 300) : "");
    throw new ApiError(response.status, error, detail);
  }
  return data;
}

// -- DOM --------------------------------------------------------------------------------

/**
 * Build an element. `props`: className, text, title, dataset, attrs, style, and on<event>
 * handlers; children are nodes or strings (strings become text nodes).
 */
export function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (value === undefined || value === null) continue;
    if (key === "className") node.className = value;
    else if (key === "text") node.textContent = value;
    else if (key === "dataset") Object.assign(node.dataset, value);
    else if (key === "attrs") for (const [a, v] of Object.entries(value)) node.setAttribute(a, v);
    else if (key === "style") Object.assign(node.style, value);
    else if (key.startsWith("on") && typeof value === "function") {
      node.addEventListener(key.slice(2).toLowerCase(), value);
    } else node[key] = value;
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

/** Set an element's text only when it changed (no layout work on a steady table). */
export function setText(node, text) {
  const value = text === null || text === undefined ? "" : String(text);
  if (node.textContent !== value) node.textContent = value;
}

/** A state badge (`live`, `paused`, `archived`, ...). */
export function badge(text) {
  return el("span", { className: `badge ${String(text).replace(/[^a-z0-9_-]/gi, "")}`, text });
}

// -- inline messages --------------------------------------------------------------------

/**
 * The page's inline message box: API errors show their `error` and `detail` in place,
 * next to what failed, instead of a modal or the console.
 */
export class Alert {
  constructor(node) {
    this.node = node;
    this.node.classList.add("alert");
    this.node.setAttribute("role", "alert");
    this.node.hidden = true;
    this.source = "";
  }

  /**
   * Show an error (ApiError, SpoolError or any Error/string).
   *
   * @param {*} err the error
   * @param {string} [context] what was being done ("disconnect pricer-1")
   * @param {string} [source] a tag, so that `clear(source)` (e.g. the next successful
   *   refresh) removes this message but not another one
   */
  error(err, context = "", source = "") {
    const reason = err?.error ?? err?.reason ?? (err instanceof Error ? err.name : "error");
    let detail = err?.detail ?? (err instanceof Error ? err.message : String(err));
    if (detail === reason) detail = "";
    this._show(false, reason, context ? `${context}${detail ? ": " : ""}${detail}` : detail, source);
  }

  /** Show a success note. */
  ok(message) {
    this._show(true, "ok", message, "");
  }

  /** Hide the message (only if it came from `source`, when one is given). */
  clear(source) {
    if (source !== undefined && this.source !== source) return;
    this.node.hidden = true;
    this.node.replaceChildren();
    this.source = "";
  }

  _show(ok, reason, detail, source) {
    this.source = source;
    this.node.classList.toggle("ok", ok);
    this.node.replaceChildren(
      el("span", { className: "reason", text: reason }),
      el("span", { className: "detail", text: detail }),
      el("button", { className: "close", type: "button", text: "✕", title: "Dismiss",
        onclick: () => this.clear() }),
    );
    this.node.hidden = false;
  }
}

// -- formatting -------------------------------------------------------------------------

const intFormat = new Intl.NumberFormat("en-US", { maximumFractionDigits: 0 });

export function fmtInt(n) {
  if (n === null || n === undefined || Number.isNaN(n)) return "–";
  return intFormat.format(n);
}

/** Fixed-width-ish compact number: 999, 12.3k, 4.56M. */
export function fmtCompact(n) {
  if (n === null || n === undefined || Number.isNaN(n)) return "–";
  const a = Math.abs(n);
  if (a >= 1e9) return `${(n / 1e9).toFixed(2)}G`;
  if (a >= 1e6) return `${(n / 1e6).toFixed(2)}M`;
  if (a >= 1e4) return `${(n / 1e3).toFixed(1)}k`;
  if (a >= 100) return n.toFixed(0);
  if (a >= 10) return n.toFixed(1);
  return n === 0 ? "0" : n.toFixed(2);
}

export function fmtRate(n) {
  return fmtCompact(n);
}

const BYTE_UNITS = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];

export function fmtBytes(n) {
  if (n === null || n === undefined || Number.isNaN(n)) return "–";
  let v = Math.abs(n);
  let i = 0;
  while (v >= 1024 && i < BYTE_UNITS.length - 1) {
    v /= 1024;
    i += 1;
  }
  const s = i === 0 ? String(Math.round(v)) : v.toFixed(v >= 100 ? 0 : 1);
  return `${n < 0 ? "-" : ""}${s} ${BYTE_UNITS[i]}`;
}

/** Milliseconds with precision that fits the magnitude (0.042 ms, 1.25 ms, 250 ms, 1.5 s). */
export function fmtMs(ms) {
  if (ms === null || ms === undefined || Number.isNaN(ms)) return "–";
  if (ms >= 1000) return `${(ms / 1000).toFixed(2)} s`;
  if (ms >= 100) return `${ms.toFixed(0)} ms`;
  if (ms >= 10) return `${ms.toFixed(1)} ms`;
  if (ms >= 1) return `${ms.toFixed(2)} ms`;
  return `${ms.toFixed(3)} ms`;
}

export function fmtPercent(p) {
  if (p === null || p === undefined || Number.isNaN(p)) return "–";
  return `${p.toFixed(1)}%`;
}

/** Seconds as "3d 04:05:06" / "04:05:06". */
export function fmtDuration(seconds) {
  if (seconds === null || seconds === undefined || Number.isNaN(seconds)) return "–";
  let s = Math.max(0, Math.floor(seconds));
  const d = Math.floor(s / 86400);
  s -= d * 86400;
  const hh = String(Math.floor(s / 3600)).padStart(2, "0");
  const mm = String(Math.floor((s % 3600) / 60)).padStart(2, "0");
  const ss = String(s % 60).padStart(2, "0");
  return `${d > 0 ? `${d}d ` : ""}${hh}:${mm}:${ss}`;
}

/** Seconds behind: "0", "850 ms", "12.3 s", "4m 05s". */
export function fmtLag(seconds) {
  if (seconds === null || seconds === undefined || Number.isNaN(seconds)) return "–";
  if (seconds <= 0) return "0";
  if (seconds < 1) return `${Math.round(seconds * 1000)} ms`;
  if (seconds < 60) return `${seconds.toFixed(1)} s`;
  const m = Math.floor(seconds / 60);
  return `${m}m ${String(Math.floor(seconds % 60)).padStart(2, "0")}s`;
}

/**
 * How far a replication link is behind: "caught up", "1 message", "12 messages · 2.5 s".
 * `seconds` (the age of the oldest record not acked) is left out when there is none.
 */
export function fmtBehind(messages, seconds = null) {
  if (messages === null || messages === undefined || Number.isNaN(messages)) return "–";
  const lag = typeof seconds === "number" && seconds > 0 ? fmtLag(seconds) : "";
  if (messages <= 0 && !lag) return "caught up";
  const count = `${fmtInt(messages)} ${messages === 1 ? "message" : "messages"}`;
  return lag ? `${count} · ${lag}` : count;
}

function toDate(value) {
  if (value === null || value === undefined || value === "") return null;
  if (value instanceof Date) return value;
  if (typeof value === "number") return new Date(value * 1000);
  const d = new Date(value);
  return Number.isNaN(d.getTime()) ? null : d;
}

/** "2024-05-01 12:00:03" in UTC (the broker's time zone for bookmarks and logs). */
export function fmtDateTime(value, { ms = false } = {}) {
  const d = toDate(value);
  if (d === null) return "–";
  const iso = d.toISOString();
  return `${iso.slice(0, 10)} ${iso.slice(11, ms ? 23 : 19)}`;
}

// -- polling ----------------------------------------------------------------------------

/**
 * Calls `fn` every `ms` milliseconds, never overlapping (the next call is scheduled when
 * the previous one finished) and not while the tab is hidden.
 */
export class Poller {
  constructor(fn, ms) {
    this.fn = fn;
    this.ms = ms;
    this.timer = null;
    this.running = false;
    this.busy = null;
    document.addEventListener("visibilitychange", () => {
      if (this.running && !document.hidden && this.timer === null && this.busy === null) this.now();
    });
  }

  start() {
    this.running = true;
    return this.now();
  }

  stop() {
    this.running = false;
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
  }

  /** Run now (e.g. right after an action), then resume the schedule. */
  async now() {
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
    if (this.busy !== null) return this.busy;
    this.busy = (async () => {
      try {
        await this.fn();
      } finally {
        this.busy = null;
        if (this.running && !document.hidden) {
          this.timer = setTimeout(() => {
            this.timer = null;
            this.now();
          }, this.ms);
        }
      }
    })();
    return this.busy;
  }
}

// -- tables -----------------------------------------------------------------------------

/**
 * A table body kept in step with a list of rows by key: rows are created once and updated
 * in place, so a refresh every second neither flickers nor swallows a click on a button.
 */
export class KeyedTable {
  /**
   * @param {HTMLTableSectionElement} tbody
   * @param {object} spec key(row) -> string; create(row) -> <tr>; update(tr, row);
   *   empty: text shown when there is no row; columns: column count (for the empty row)
   */
  constructor(tbody, spec) {
    this.tbody = tbody;
    this.spec = spec;
    this.rows = new Map();
    this.emptyRow = el("tr", { className: "empty" },
      el("td", { text: spec.empty ?? "Nothing to show", attrs: { colspan: spec.columns } }));
  }

  render(rows) {
    const seen = new Set();
    let index = 0;
    const body = this.tbody;
    if (rows.length === 0) {
      body.replaceChildren(this.emptyRow);
      this.rows.clear();
      return;
    }
    if (this.emptyRow.parentNode === body) this.emptyRow.remove();
    for (const row of rows) {
      const key = this.spec.key(row);
      seen.add(key);
      let tr = this.rows.get(key);
      if (tr === undefined) {
        tr = this.spec.create(row);
        tr.dataset.key = key;
        this.rows.set(key, tr);
      }
      this.spec.update(tr, row);
      if (body.children[index] !== tr) body.insertBefore(tr, body.children[index] ?? null);
      index += 1;
    }
    for (const [key, tr] of this.rows) {
      if (!seen.has(key)) {
        tr.remove();
        this.rows.delete(key);
      }
    }
  }
}

/**
 * Click-to-sort headers: every <th data-sort="field"> sorts by that field (data-type="num"
 * for numbers). Calls `onChange()` after a change; `compare` sorts a row list.
 */
export class TableSort {
  constructor(table, { field, dir = "asc" }, onChange) {
    this.field = field;
    this.dir = dir;
    this.types = {};
    this.headers = [...table.querySelectorAll("th[data-sort]")];
    for (const th of this.headers) {
      this.types[th.dataset.sort] = th.dataset.type ?? "str";
      th.tabIndex = 0;
      const activate = () => {
        const f = th.dataset.sort;
        if (this.field === f) this.dir = this.dir === "asc" ? "desc" : "asc";
        else {
          this.field = f;
          this.dir = this.types[f] === "num" ? "desc" : "asc";
        }
        this._mark();
        onChange();
      };
      th.addEventListener("click", activate);
      th.addEventListener("keydown", (e) => {
        if (e.key === "Enter" || e.key === " ") {
          e.preventDefault();
          activate();
        }
      });
    }
    this._mark();
  }

  _mark() {
    for (const th of this.headers) {
      if (th.dataset.sort === this.field) {
        th.setAttribute("aria-sort", this.dir === "asc" ? "ascending" : "descending");
      } else th.removeAttribute("aria-sort");
    }
  }

  sort(rows, get = (row, f) => row[f]) {
    const f = this.field;
    const num = this.types[f] === "num";
    const sign = this.dir === "asc" ? 1 : -1;
    return [...rows].sort((a, b) => {
      const x = get(a, f);
      const y = get(b, f);
      if (num) return sign * ((Number(x) || 0) - (Number(y) || 0));
      return sign * String(x ?? "").localeCompare(String(y ?? ""), undefined, { numeric: true });
    });
  }
}

// -- confirmation -----------------------------------------------------------------------

/**
 * Ask before a destructive action. Resolves true when confirmed.
 *
 * @param {object} opts title, message (string or list of strings), confirm (button label),
 *   danger (red button)
 */
export function confirmDialog({ title, message, confirm = "Confirm", danger = false }) {
  return new Promise((resolve) => {
    const lines = Array.isArray(message) ? message : [message];
    const ok = el("button", { type: "button", className: danger ? "danger" : "primary",
      text: confirm, dataset: { action: "confirm" } });
    const cancel = el("button", { type: "button", text: "Cancel", dataset: { action: "cancel" } });
    const dialog = el("dialog", { className: "confirm" },
      el("div", { className: "dlg-body" }, el("h3", { text: title }),
        ...lines.map((line) => el("p", { text: line }))),
      el("div", { className: "dlg-actions" }, cancel, ok));
    let answer = false;
    ok.addEventListener("click", () => {
      answer = true;
      dialog.close();
    });
    cancel.addEventListener("click", () => dialog.close());
    dialog.addEventListener("close", () => {
      dialog.remove();
      resolve(answer);
    });
    document.body.append(dialog);
    dialog.showModal();
    cancel.focus();
  });
}

// -- admin rights -----------------------------------------------------------------------

/**
 * Whether the logged-on user may act on this instance: an admin, or anyone when the
 * instance has no users. The top bar carries it (web/dashboard.py); the broker refuses
 * the POST of anyone else anyway, this only spares them a button that cannot work.
 */
export const isAdmin = document.querySelector(".topbar")?.dataset.admin !== "false";

const ADMIN_NEEDED = "An admin is needed for this: your user may look, not act";

/**
 * Enable an action button when `allowed` and the user may act; for a non-admin it stays
 * disabled and its title says why. `here` false: the action goes to another instance,
 * which judges it by the credentials sent there (the fabric page), not by this user.
 */
export function allowAction(button, allowed = true, here = true) {
  const refused = here && !isAdmin;
  button.disabled = refused || !allowed;
  if (refused) {
    if (button.dataset.ownTitle === undefined) button.dataset.ownTitle = button.title;
    button.title = ADMIN_NEEDED;
  } else if (button.dataset.ownTitle !== undefined) {
    button.title = button.dataset.ownTitle;
    delete button.dataset.ownTitle;
  }
}

/** Disable a button while an async action runs. */
export async function busy(button, action) {
  button.disabled = true;
  try {
    return await action();
  } finally {
    button.disabled = false;
  }
}

/**
 * Disconnect client `name` after the operator confirms (POST /api/clients/NAME/disconnect,
 * the Clients page and a client's page); `button` is busy meanwhile, the outcome goes to
 * `alert`. Returns whether the broker was asked.
 */
export async function disconnectClient(button, name, alert) {
  const yes = await confirmDialog({
    title: `Disconnect ${name}?`,
    message: ["The broker closes this client's connection now.",
      "A client with reconnect logic will come back under the same name."],
    confirm: "Disconnect",
    danger: true,
  });
  if (!yes) return false;
  await busy(button, async () => {
    try {
      await api(`/api/clients/${encodeURIComponent(name)}/disconnect`, { method: "POST" });
      alert.ok(`${name} disconnected`);
    } catch (err) {
      alert.error(err, `disconnect ${name}`);
    }
  });
  return true;
}
