// Overview: live KPIs and charts from the SSE stream, instance and host from the API. The
// charts open with what the stats database holds of their five minutes (stored.js).

import { TimeChart } from "./charts.js";
import { live } from "./live.js";
import { fetchStored, joinStored } from "./stored.js";
import {
  Alert, ApiError, KeyedTable, Poller, api, el, fmtBytes, fmtCompact, fmtDateTime, fmtDuration, fmtInt, fmtLag,
  fmtMs, fmtPercent, fmtRate, setText,
} from "./ui.js";

const alert = new Alert(document.getElementById("page-alert"));
const $id = (id) => document.getElementById(id);

// -- live figures -----------------------------------------------------------------------

/** The charts' window, in seconds. */
const WINDOW = 300;
/** The stats series of the charts, by the live point's field they continue. */
const STORED = {
  msgs_in: "instance/msgs_in_rate",
  msgs_out: "instance/msgs_out_rate",
  ack_p50_ms: "persisted_ack/p50_ms",
  ack_p99_ms: "persisted_ack/p99_ms",
};
/** What the stats database held of the window when the page opened (none until it answers). */
let stored = { points: [], interval: null };

const rates = new TimeChart($id("chart-rates"), {
  series: [
    { label: "in", color: "--in", fill: true, fmt: (v) => `${fmtRate(v)}/s` },
    { label: "out", color: "--out", fmt: (v) => `${fmtRate(v)}/s` },
  ],
  yFormat: fmtCompact,
  window: WINDOW,
});
const latency = new TimeChart($id("chart-latency"), {
  series: [
    { label: "p50", color: "--p50", fmt: fmtMs, points: true },
    { label: "p99", color: "--p99", fmt: fmtMs, points: true },
  ],
  yFormat: (v) => (v >= 100 ? v.toFixed(0) : v >= 10 ? v.toFixed(1) : v >= 1 ? v.toFixed(2) : v.toFixed(3)),
  empty: "no persisted acks yet",
  window: WINDOW,
});

function redrawCharts() {
  const pts = joinStored(stored, live.points);
  const xs = pts.map((p) => p.time);
  const col = (field) => pts.map((p) => p[field] ?? null);
  rates.setData([xs, col("msgs_in"), col("msgs_out")]);
  latency.setData([xs, col("ack_p50_ms"), col("ack_p99_ms")]);
}

/** Rows of a <dl class="kv">, made once and then updated in place (no flicker). */
function kvUpdate(dl, cache, rows) {
  for (const [key, value, title] of rows) {
    let dd = cache.get(key);
    if (dd === undefined) {
      dd = el("dd");
      cache.set(key, dd);
      dl.append(el("dt", { text: key, title: title ?? "" }), dd);
    }
    setText(dd, value);
  }
}

// what each disconnect cause means (server/session.py DisconnectCause)
const CAUSES = [
  ["slow_client_stalled", "slow: took nothing", "read nothing for Tuning/SlowClientTimeout while messages waited"],
  ["slow_client_buffer", "slow: buffer full", "messages that cannot be read back (topic not recorded, acks) passed SlowClientBufferLimit"],
  ["heartbeat", "heartbeat", "silent for two heartbeat intervals"],
  ["client", "closed by client", "the client closed or the connection was lost"],
  ["name_in_use", "name in use", "the same user logged on again with this client name"],
  ["logon_failed", "logon failed", "the logon was refused"],
  ["invalid_message", "invalid message", "a malformed frame"],
  ["admin", "by admin", "disconnected from the admin API or dashboard"],
  ["shutting_down", "shutting down", "the broker stopped"],
];
const slowRows = new Map();
const causeRows = new Map();

function showSlow(p) {
  kvUpdate($id("slow-kv"), slowRows, [
    ["catching up now", fmtInt(p.catching_up),
      "live subscriptions reading the transaction log after a burst their connection could not take"],
    ["spills", fmtInt(p.spills), "times a live subscription left the live path to catch up from the log"],
    ["time catching up", fmtDuration(p.catch_up_seconds), "all subscriptions together"],
  ]);
  const counts = p.disconnects ?? {};
  kvUpdate($id("disconnects-kv"), causeRows,
    CAUSES.map(([cause, label, title]) => [label, fmtInt(counts[cause] ?? 0), title]));
}

/** Milliseconds to three significant digits (fits a KPI tile: "0.379 / 1.19 ms"). */
const ms3 = (v) => (v >= 1000 ? v.toFixed(0) : String(Number(v.toPrecision(3))));

function showPoint(p) {
  if (!p) return;
  setText($id("kpi-in"), `${fmtRate(p.msgs_in)}/s`);
  setText($id("kpi-out"), `${fmtRate(p.msgs_out)}/s`);
  setText($id("kpi-in-bytes"), `${fmtBytes(p.bytes_in)}/s`);
  setText($id("kpi-out-bytes"), `${fmtBytes(p.bytes_out)}/s`);
  setText($id("kpi-clients"), fmtInt(p.connections));
  setText($id("kpi-queue"), `queued ${fmtBytes(p.queue_depth)}`);
  setText($id("kpi-subs"), fmtInt(p.subscriptions));
  setText($id("kpi-lag"), p.catching_up > 0
    ? `max lag ${fmtLag(p.lag_max)} · ${fmtInt(p.catching_up)} catching up`
    : `max lag ${fmtLag(p.lag_max)}`);
  setText($id("kpi-ack"), p.acks > 0 ? `${ms3(p.ack_p50_ms)} / ${ms3(p.ack_p99_ms)} ms` : "–");
  setText($id("kpi-acks"), `${fmtInt(p.acks)} acks/s`);
  setText($id("kpi-journal"), p.txlog_bytes === null ? "no log" : fmtBytes(p.txlog_bytes));
  setText($id("kpi-durable"), p.durable_seq === null ? "no transaction log" : `durable seq ${fmtInt(p.durable_seq)}`);
  showSlow(p);
}

live.addEventListener("history", () => {
  redrawCharts();
  showPoint(live.latest);
});
live.addEventListener("point", (e) => {
  redrawCharts();
  showPoint(e.detail);
});
live.start();
fetchStored(STORED, WINDOW).then((answer) => {
  stored = answer;
  redrawCharts();
});

// -- instance ---------------------------------------------------------------------------

let instance = null;
let instanceAt = 0;

/** The instance panel's rows, built once and then updated in place (text stays selectable). */
const instanceRows = new Map();

function renderInstance() {
  if (instance === null) return;
  const uptime = instance.uptime + (performance.now() - instanceAt) / 1000;
  const rows = [
    ["name", instance.name],
    ["group", instance.group],
    ["version", instance.version],
    ["uptime", fmtDuration(uptime)],
    ["started", `${fmtDateTime(instance.start_time)} UTC`],
    ["pid", instance.pid],
    ["ready", instance.ready === undefined ? "–" : instance.ready ? "yes" : "no"],
    ["config", instance.config_path ?? "embedded default"],
    ["data dir", instance.data_dir],
  ];
  const kv = $id("instance-kv");
  for (const [key, value] of rows) {
    let dd = instanceRows.get(key);
    if (dd === undefined) {
      dd = el("dd");
      instanceRows.set(key, dd);
      kv.append(el("dt", { text: key }), dd);
    }
    setText(dd, value ?? "–");
    dd.title = String(value ?? "");
  }
  setText($id("instance-line"),
    `${instance.name} · ${instance.group} · v${instance.version} · up ${fmtDuration(uptime)}`);
}

const instancePoller = new Poller(async () => {
  try {
    instance = await api("/api/instance");
    instanceAt = performance.now();
    renderInstance();
    alert.clear("instance");
  } catch (err) {
    alert.error(err, "instance", "instance");
  }
}, 30000);
instancePoller.start();
setInterval(renderInstance, 1000);

// -- host -------------------------------------------------------------------------------

function meter(label, percent, text, title = "") {
  const p = Math.max(0, Math.min(100, Number(percent) || 0));
  const bar = el("i", { className: p >= 90 ? "err" : p >= 75 ? "warn" : "", style: { width: `${p}%` } });
  return el("div", { className: "meter", title },
    el("span", { className: "label", text: label }),
    el("span", { className: "bar" }, bar),
    el("span", { className: "val", text }));
}

function renderHost(host) {
  const cpu = host.cpu ?? {};
  const mem = host.memory ?? {};
  const proc = host.process ?? {};
  const net = host.network ?? {};
  const load = (cpu.load_avg ?? []).map((v) => v.toFixed(2)).join(" ");
  $id("host-meters").replaceChildren(
    meter("cpu", cpu.percent, `${fmtPercent(cpu.percent)} of ${cpu.count ?? "?"}`, `load ${load}`),
    meter("memory", mem.percent, `${fmtBytes(mem.used)} / ${fmtBytes(mem.total)}`),
    meter("swap", mem.swap_percent, fmtPercent(mem.swap_percent)),
    meter("process cpu", (proc.cpu_percent ?? 0) / Math.max(1, cpu.count ?? 1),
      fmtPercent(proc.cpu_percent), "100% = one core"),
    el("dl", { className: "kv", style: { marginTop: "6px" } },
      el("dt", { text: "load avg" }), el("dd", { text: load || "–" }),
      el("dt", { text: "process" }),
      el("dd", { text: `rss ${fmtBytes(proc.rss)} · ${fmtInt(proc.threads)} threads · ${fmtInt(proc.fds)} fds` }),
      el("dt", { text: "network" }),
      el("dd", { text: net.bytes_recv_rate === null || net.bytes_recv_rate === undefined ? "–"
        : `rx ${fmtBytes(net.bytes_recv_rate)}/s · tx ${fmtBytes(net.bytes_sent_rate)}/s` })),
  );
  const disks = Object.entries(host.disks ?? {});
  $id("disk-meters").replaceChildren(...(disks.length ? disks.map(([label, d]) =>
    meter(label, d.fs_percent, `${fmtBytes(d.dir_bytes)} · ${fmtBytes(d.fs_free)} free`,
      `${d.path}\nfilesystem ${fmtPercent(d.fs_percent)} used of ${fmtBytes(d.fs_total)}`))
    : [el("span", { className: "muted", text: "no directories reported" })]));
  setText($id("host-updated"), new Date().toISOString().slice(11, 19));
}

const hostPoller = new Poller(async () => {
  try {
    renderHost(await api("/api/host"));
    alert.clear("host");
  } catch (err) {
    alert.error(err, "host", "host");
  }
}, 5000);
hostPoller.start();

// -- alert rules (Admin/Alerts; admins only: the panel stays hidden for other users) -----

/** What a rule watches, in a few words. */
function ruleTarget(rule) {
  if (rule.target === null) return `${rule.metric} (worst)`;
  return rule.sub_id === null ? `${rule.metric} ${rule.target}` : `${rule.metric} ${rule.target}/${rule.sub_id}`;
}

const ruleTable = new KeyedTable($id("alert-rules").tBodies[0], {
  key: (rule) => rule.name,
  columns: 7,
  create: () => el("tr", {},
    el("td", { className: "mono" }), el("td"), el("td", { className: "mono" }), el("td"),
    el("td", {}, el("span", { className: "badge" })), el("td", { className: "mono" }),
    el("td", { className: "num mono" })),
  update: (tr, rule) => {
    const [name, watches, threshold, level, state, since, value] = tr.cells;
    setText(name, rule.name);
    setText(watches, ruleTarget(rule));
    const wait = rule.for_seconds > 0 ? ` for ${rule.for_seconds}s` : "";
    setText(threshold, `${rule.comparison} ${rule.threshold_text}${wait}`);
    setText(level, rule.level);
    const badge = state.firstElementChild;
    badge.className = `badge ${rule.state}`;
    setText(badge, rule.state);
    tr.dataset.state = rule.state;
    setText(since, rule.since === null ? "–" : fmtDateTime(rule.since));
    setText(value, rule.value_text ?? "–");
  },
});

const rulesPoller = new Poller(async () => {
  try {
    const { rules } = await api("/api/alerts/rules");
    $id("alert-rules-panel").hidden = rules.length === 0;
    ruleTable.render(rules);
    setText($id("alert-rules-updated"), new Date().toISOString().slice(11, 19));
    alert.clear("rules");
  } catch (err) {
    if (err instanceof ApiError && err.status === 403) {
      rulesPoller.stop();
      return;
    }
    alert.error(err, "alert rules", "rules");
  }
}, 2000);
rulesPoller.start();

// -- listener security and logons -------------------------------------------------------

function kvRows(node, rows) {
  node.replaceChildren(...rows.flatMap(([label, value, cls = ""]) => [
    el("dt", { text: label }),
    el("dd", { text: String(value ?? "–"), className: cls, title: String(value ?? "") }),
  ]));
}

function perPath(counts) {
  const c = counts ?? {};
  return `websocket ${fmtInt(c.websocket ?? 0)} · dashboard ${fmtInt(c.dashboard ?? 0)}` +
    ` · replication ${fmtInt(c.replication ?? 0)}`;
}

function renderSecurity(listener, logons) {
  const tls = listener.tls;
  if (tls) {
    const cert = tls.certificate;
    const days = tls.expires_in_days;
    const expiry = `${fmtDateTime(cert.not_after)} (${days < 0 ? "expired" : `${days.toFixed(1)} days`})`;
    setText($id("tls-badge"), `TLS · ${tls.minimum_version}+`);
    kvRows($id("tls-kv"), [
      ["address", listener.address],
      ["certificate", cert.subject],
      ["issuer", cert.issuer],
      ["expires", expiry, tls.expired ? "err" : tls.expiring ? "warn" : ""],
      ["client certs", tls.client_auth],
      ["reloads", `${fmtInt(tls.reloads)} · loaded ${fmtDateTime(tls.loaded_at)}`],
      ["last reload", tls.last_reload_error ?? "ok", tls.last_reload_error ? "err" : ""],
      ["sha-256", cert.sha256],
    ]);
  } else {
    setText($id("tls-badge"), "plain text");
    kvRows($id("tls-kv"), [
      ["address", listener.address],
      ["TLS", listener.plaintext_exposed
        ? "none: reachable from other machines in clear text (AllowPlaintext)"
        : "none (loopback only)", listener.plaintext_exposed ? "warn" : ""],
    ]);
  }
  const p = logons.policy;
  setText($id("logons-policy"),
    `${p.failures_per_address_user}/address and user · ${p.failures_per_address}/address · ${p.failures_per_user}/user per ${fmtDuration(p.window_s)}`);
  const blocked = logons.blocked_addresses + logons.blocked_users;
  const last = logons.recent_failures.at(-1);
  kvRows($id("logons-kv"), [
    ["succeeded", perPath(logons.succeeded)],
    ["failed", perPath(logons.failures), Object.values(logons.failures).some((n) => n > 0) ? "warn" : ""],
    ["refused unchecked", perPath(logons.refused)],
    ["throttled now", `${fmtInt(logons.blocked_addresses)} addresses · ${fmtInt(logons.blocked_users)} users`,
      blocked ? "warn" : ""],
    ["password checks", `${fmtInt(logons.password_checks)} run · ${fmtInt(logons.password_checks_pending)} waiting`],
    ["last failure", last ? `${fmtDateTime(last.time)} ${last.remote ?? ""} ${last.user ?? ""}` : "none"],
  ]);
}

const securityPoller = new Poller(async () => {
  try {
    const [listener, logons] = await Promise.all([api("/api/tls"), api("/api/logons")]);
    renderSecurity(listener, logons);
    alert.clear("security");
  } catch (err) {
    alert.error(err, "security", "security");
  }
}, 10000);
securityPoller.start();
