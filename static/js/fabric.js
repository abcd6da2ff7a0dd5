// Fabric: the replication graph of every instance this page can reach, merged from their
// GET /api/fabric (this instance's first, then each instance's destinations' admin URLs,
// breadth first), drawn with cytoscape (instances grouped by Group, links coloured by
// health) and as tables, refreshed every `data-refresh` ms. An instance whose /api/fabric
// the browser cannot fetch ("Failed to fetch": a CORS refusal and a network error look the
// same to a page) is judged by the views of the instances that answered: if one of them
// sees a link with it connected, it runs and refuses this page ("unknown", with the origin
// to add to its Admin/AllowedOrigins), and its links keep the state those views give them;
// if none does, it is "down", and so is every link with it. Clicking an instance opens its
// dashboard; clicking a link shows its history (GET /api/replication/history on the
// link's source) and the downgrade / upgrade / reconnect actions (POST on the source).
// Calls to other instances carry the bearer token the operator saved for that instance
// in this tab (sessionStorage); the other instance must allow this page's origin.
// The route trace asks this instance (GET /api/fabric/route?topic=) where a message of a
// topic published here goes, lists the instances it reaches and the links that stop it,
// and draws the links it crosses thicker on the graph.

import cytoscape from "/static/vendor/cytoscape/cytoscape.esm.min.mjs";
import { TimeChart } from "./charts.js";
import {
  Alert, ApiError, KeyedTable, Poller, allowAction, api, badge, busy, confirmDialog, el,
  fmtBehind, fmtInt, fmtLag, fmtRate, setText,
} from "./ui.js";

const root = document.getElementById("fabric-root");
const $id = (id) => document.getElementById(id);
const alert = new Alert($id("page-alert"));
const SELF = root.dataset.self;
const REFRESH = Number(root.dataset.refresh) || 2000;
const PEERS = new Set(JSON.parse(root.dataset.peers || "[]"));
const TOKEN_KEY = "spool.fabric.tokens";

// -- credentials (per instance, this tab only) ---------------------------------------------

function tokens() {
  try {
    return JSON.parse(sessionStorage.getItem(TOKEN_KEY) || "{}");
  } catch {
    return {};
  }
}

function saveToken(instance, token) {
  const all = tokens();
  all[instance] = token;
  sessionStorage.setItem(TOKEN_KEY, JSON.stringify(all));
  renderCredentials();
}

function renderCredentials() {
  const list = $id("fabric-credential-list");
  list.replaceChildren(...Object.keys(tokens()).sort().map((name) => el("li", {},
    `${name}: token saved `,
    el("button", {
      type: "button", className: "small", text: "forget",
      onclick: () => {
        const all = tokens();
        delete all[name];
        sessionStorage.setItem(TOKEN_KEY, JSON.stringify(all));
        renderCredentials();
      },
    }))));
}

$id("fabric-credentials").addEventListener("submit", (event) => {
  event.preventDefault();
  const form = event.target;
  saveToken(form.instance.value.trim(), form.token.value);
  form.reset();
  poller.now();
});
// the button starts disabled, so the browser cannot submit the form itself (a GET with
// the token in the URL) before this script handles it
$id("fabric-credentials").querySelector("button[type=submit]").disabled = false;

// -- calls to an instance ------------------------------------------------------------------

/** Call instance `name` at `url` (null: this instance, with the dashboard's session). */
async function call(name, url, path, { method = "GET" } = {}) {
  if (url === null) return api(path, { method });
  const headers = { Accept: "application/json" };
  const token = tokens()[name];
  if (token) headers.Authorization = `Bearer ${token}`;
  let response;
  try {
    response = await fetch(`${url}${path}`, {
      method, headers, mode: "cors", credentials: "omit", cache: "no-store",
    });
  } catch (exc) {
    throw new ApiError(0, "unreachable", `${name} did not answer (${exc.message})`);
  }
  const data = await response.json().catch(() => null);
  if (!response.ok) {
    throw new ApiError(response.status, data?.error ?? `HTTP ${response.status}`,
      data?.detail ?? "");
  }
  return data;
}

function reachable(url) {
  if (url === null) return true;
  try {
    return PEERS.has(new URL(url).origin);
  } catch {
    return false;
  }
}

// -- the merged graph ----------------------------------------------------------------------

/** Walk the fabric from this instance; returns {instances: Map, links: Map}. */
async function discover() {
  const instances = new Map();
  const links = new Map();
  const queue = [{ name: SELF, url: null }];
  const visited = new Set();
  // instances the browser could not fetch at all: judged once every answer is in
  const unanswered = new Set();
  while (queue.length) {
    const { name, url } = queue.shift();
    if (visited.has(name)) continue;
    visited.add(name);
    const known = instances.get(name);
    if (url !== null && !reachable(url)) {
      if (known) known.note = "not allowed from this page (add its origin to AllowedOrigins)";
      continue;
    }
    let graph;
    try {
      graph = await call(name, url, "/api/fabric");
    } catch (err) {
      const entry = known ?? { name, group: name, admin_url: url };
      if (err.status === 0) {
        unanswered.add(name);
        instances.set(name, { ...entry, state: "down", note: err.detail || err.message });
        continue;
      }
      // refused (no or a wrong token) is not down: this page cannot tell how it is
      const refused = err.status === 401 || err.status === 403;
      const note = refused
        ? `not authenticated: save a token for ${name} under Credentials (${err.detail})`
        : err.detail || err.message;
      instances.set(name, { ...entry, state: refused ? "unknown" : "down", note });
      continue;
    }
    for (const inst of graph.instances) {
      const mine = inst.name === graph.name;
      const old = instances.get(inst.name);
      if (mine) {
        instances.set(inst.name, { ...old, ...inst, admin_url: url, state: "up", note: "" });
      } else if (!old) {
        instances.set(inst.name, { ...inst, note: "" });
      } else if (old.state !== "up" && old.state !== "down" && inst.state === "up") {
        old.state = "up";
      }
      if (!mine && inst.admin_url && !visited.has(inst.name)) {
        queue.push({ name: inst.name, url: inst.admin_url });
        if (!instances.get(inst.name).admin_url) instances.get(inst.name).admin_url = inst.admin_url;
      }
    }
    for (const link of graph.links) {
      const old = links.get(link.id);
      // the source's report wins: it knows the sync type and how far behind the link is
      if (!old || link.reported_by === link.source) links.set(link.id, { ...link });
    }
  }
  for (const name of unanswered) judgeUnanswered(instances.get(name), links);
  for (const link of links.values()) {
    const ends = [instances.get(link.source), instances.get(link.target)];
    if (ends.some((end) => end?.state === "down")) {
      link.state = "down";
      link.health = "down";
    }
  }
  return { instances, links };
}

/**
 * An instance whose API the browser could not fetch. The page cannot tell a CORS refusal
 * from a network error, but the instances that answered can say whether it runs: a link
 * with it that one of them sees connected (this instance's own destinations and inbound
 * links first) means it is up and refuses this page's origin (or its call, for an
 * instance with <Users>), so it is "unknown" with what to do; with no such link it is
 * "down" (its note keeps the browser's error).
 */
function judgeUnanswered(inst, links) {
  const seen = [...links.values()].filter((l) => l.source === inst.name || l.target === inst.name);
  const live = seen.find((l) => l.reported_by === SELF && l.state === "connected")
    ?? seen.find((l) => l.state === "connected");
  if (!live) return;
  inst.state = "unknown";
  inst.note = `add ${window.location.origin} to ${inst.name}'s Admin/AllowedOrigins`
    + ` (${live.reported_by} sees the link ${live.source} → ${live.target} connected, so`
    + ` ${inst.name} runs and refused this browser's call: CORS, or its auth)`;
}

// -- drawing --------------------------------------------------------------------------------

function cssVar(name) {
  return getComputedStyle(document.documentElement).getPropertyValue(name).trim() || "#888";
}

const COLOURS = () => ({
  up: cssVar("--ok"), ok: cssVar("--ok"), lagging: cssVar("--warn"),
  unknown: cssVar("--muted"), down: cssVar("--err"), text: cssVar("--text"),
});

const cy = cytoscape({
  container: $id("fabric-graph"),
  elements: [],
  wheelSensitivity: 0.3,
  style: [],
});

function restyle() {
  const c = COLOURS();
  cy.style([
    { selector: "node", style: { label: "data(label)", color: c.text, "font-size": 12,
      "text-valign": "bottom", "text-margin-y": 6, width: 34, height: 34,
      "background-color": (n) => c[n.data("state")] ?? c.unknown } },
    { selector: "node.group", style: { "background-opacity": 0.06, "border-width": 1,
      "border-color": c.unknown, "text-valign": "top", shape: "round-rectangle",
      "font-size": 11, color: c.unknown } },
    { selector: "edge", style: { label: "data(label)", "font-size": 10, color: c.text,
      "curve-style": "bezier", "target-arrow-shape": "triangle", width: 3,
      "line-color": (e) => c[e.data("health")] ?? c.unknown,
      "target-arrow-color": (e) => c[e.data("health")] ?? c.unknown,
      "text-background-opacity": 0.7, "text-background-color": cssVar("--bg") || "#111",
      "text-background-padding": 2 } },
    // a destination that does not get everything (topics, filters, groups): dashed
    { selector: "edge.drops", style: { "line-style": "dashed" } },
    // the links the route trace crosses, and the instances it reaches
    { selector: "edge.route", style: { width: 7 } },
    { selector: "node.reached", style: { "border-width": 4, "border-color": c.text } },
  ]);
}
restyle();
document.addEventListener("themechange", restyle);

let shape = "";

function draw({ instances, links }) {
  const groups = new Set([...instances.values()].map((i) => i.group));
  const elements = [
    ...[...groups].map((g) => ({ group: "nodes", classes: "group",
      data: { id: `group:${g}`, label: g } })),
    ...[...instances.values()].map((i) => ({ group: "nodes",
      data: { id: i.name, label: i.name, state: i.state, parent: `group:${i.group}` } })),
    ...[...links.values()].filter((l) => instances.has(l.source) && instances.has(l.target))
      .map((l) => ({ group: "edges", classes: l.drops?.length ? "drops" : "",
        data: { id: l.id, source: l.source, target: l.target,
          health: l.health, label: edgeLabel(l) } })),
  ];
  const nextShape = elements.map((e) => `${e.data.id}<${e.data.parent ?? ""}<${e.classes ?? ""}`)
    .sort().join("|");
  if (nextShape !== shape) {
    shape = nextShape;
    cy.elements().remove();
    cy.add(elements);
    cy.layout({ name: "breadthfirst", directed: true, padding: 30, spacingFactor: 1.3 }).run();
    markRoute();
  } else {
    for (const e of elements) cy.getElementById(e.data.id).data(e.data);
  }
}

// -- the route trace ------------------------------------------------------------------------

let trace = null;

function markRoute() {
  cy.elements().removeClass("route reached");
  if (trace === null) return;
  for (const route of trace.routes) {
    for (const hop of route.hops) cy.getElementById(`${hop.source}->${hop.target}`).addClass("route");
  }
  for (const r of trace.reached) cy.getElementById(r.instance).addClass("reached");
}

function hopText(hop) {
  const parts = [hop.sync_type ?? "?"];
  if (hop.filtered) parts.push(`only where ${hop.filtered}`);
  if (hop.connected === false) parts.push("down now");
  return `→ ${hop.target} (${parts.join(", ")})`;
}

function renderTrace(t) {
  const summary = $id("fabric-route-summary");
  const table = $id("fabric-route-reached");
  const stops = $id("fabric-route-stops");
  if (!t.recorded) {
    setText(summary, `${t.origin} does not record ${JSON.stringify(t.topic)}: nothing of it is replicated`);
  } else {
    const n = t.reached.length;
    setText(summary, `${JSON.stringify(t.topic)} published on ${t.origin} reaches ${n} instance${n === 1 ? "" : "s"}`
      + (t.truncated ? ` (the first ${t.routes.length} routes shown)` : ""));
  }
  table.hidden = t.reached.length === 0;
  table.tBodies[0].replaceChildren(...t.reached.map((r) => {
    const best = t.routes.find((route) => route.reaches === r.instance);
    return el("tr", { dataset: { key: r.instance } },
      el("td", { className: "mono", text: r.instance }),
      el("td", { className: "num", text: String(r.hops) }),
      el("td", { className: "mono", dataset: { field: "route" },
        text: `${t.origin} ${best.hops.map(hopText).join(" ")}` }),
      el("td", {}, badge(r.sync_path ? "sync" : "async")),
      el("td", { text: r.filtered ? "yes: only matching messages" : "no" }));
  }));
  stops.replaceChildren(
    ...t.not_reached.map((u) => el("li", { dataset: { key: `${u.source}->${u.target}` },
      text: `not to ${u.target} from ${u.source}: ${u.reason}` })),
    ...t.unknown.map((name) => el("li", { dataset: { key: `unknown:${name}` },
      text: `${name}: its configuration is not known here, the trace stops there` })));
  markRoute();
}

$id("fabric-route-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const topic = event.target.topic.value;
  try {
    trace = await api(`/api/fabric/route?topic=${encodeURIComponent(topic)}`);
    renderTrace(trace);
  } catch (err) {
    alert.error(err, `route of ${topic}`);
  }
});

function edgeLabel(link) {
  const sync = link.effective_sync_type ?? "";
  const lag = link.state === "connected" ? fmtBehind(link.messages_behind) : link.state;
  return [sync, lag].filter(Boolean).join(" · ");
}

// -- tables --------------------------------------------------------------------------------

const instanceTable = new KeyedTable($id("fabric-instances").tBodies[0], {
  key: (i) => i.name,
  columns: 5,
  empty: "no instance",
  create: (i) => el("tr", {},
    el("td", { className: "mono", dataset: { field: "name" }, text: i.name }),
    el("td", { dataset: { field: "group" } }),
    el("td", { dataset: { field: "state" } }),
    el("td", { dataset: { field: "dashboard" } }),
    el("td", {}, el("button", { type: "button", className: "small", text: "Manage",
      dataset: { action: "manage" }, onclick: () => manage(i.name) }))),
  update: (tr, i) => {
    setText(tr.querySelector('[data-field="group"]'), i.group);
    const state = tr.querySelector('[data-field="state"]');
    state.replaceChildren(badge(i.state), i.note ? el("span", { className: "muted", text: `: ${i.note}` }) : "");
    const dash = tr.querySelector('[data-field="dashboard"]');
    const href = i.name === SELF ? "/" : i.admin_url;
    dash.replaceChildren(href ? el("a", { text: "open", attrs: { href, target: "_blank",
      rel: "noopener" } }) : el("span", { className: "muted", text: "admin URL unknown" }));
  },
});

let current = { instances: new Map(), links: new Map() };
let chosen = null;

const linkTable = new KeyedTable($id("fabric-links").tBodies[0], {
  key: (l) => l.id,
  columns: 7,
  empty: "no replication link",
  create: (l) => el("tr", { onclick: (event) => {
    if (event.target.closest("button")) return;
    choose(l.id);
  } },
  el("td", { className: "mono", dataset: { field: "id" }, text: `${l.source} → ${l.target}` }),
  el("td", { dataset: { field: "sync" } }),
  el("td", { dataset: { field: "state" } }),
  el("td", { className: "num", dataset: { field: "behind" } }),
  el("td", { className: "num", dataset: { field: "lag" } }),
  el("td", { className: "num", dataset: { field: "rate" } }),
  el("td", { dataset: { field: "actions" } })),
  update: (tr, l) => {
    const sync = tr.querySelector('[data-field="sync"]');
    sync.replaceChildren(l.effective_sync_type ? badge(l.effective_sync_type) : el("span",
      { className: "muted", text: "–" }));
    tr.querySelector('[data-field="state"]').replaceChildren(badge(l.health),
      el("span", { className: "muted", text: ` ${l.state}` }),
      ...(l.drops?.length ? [" ", el("span", { className: "badge drops", text: "drops",
        dataset: { field: "drops" }, attrs: { title: l.drops.join("\n") } })] : []));
    setText(tr.querySelector('[data-field="behind"]'), fmtBehind(l.messages_behind));
    setText(tr.querySelector('[data-field="lag"]'),
      l.seconds_behind === null ? "–" : fmtLag(l.seconds_behind));
    setText(tr.querySelector('[data-field="rate"]'), fmtRate(l.msgs_per_sec));
    const cell = tr.querySelector('[data-field="actions"]');
    if (!cell.firstChild) cell.append(...actionButtons(l.id));
    for (const button of cell.querySelectorAll("button")) {
      allowLinkAction(button, current.links.get(l.id));
    }
  },
});

// -- operations on any instance: clients and subscriptions ----------------------------------

let managed = null;

function instanceUrl(name) {
  return name === SELF ? null : current.instances.get(name)?.admin_url ?? null;
}

async function instanceAct(button, name, path, what) {
  await busy(button, async () => {
    try {
      await call(name, instanceUrl(name), path, { method: "POST" });
      alert.ok(`${name}: ${what} done`);
    } catch (err) {
      alert.error(err, `${what} on ${name}`);
    }
  });
  await loadInstance();
}

const clientTable = new KeyedTable($id("fabric-clients").tBodies[0], {
  key: (c) => c.name ?? c.remote_addr,
  columns: 4,
  empty: "no client",
  create: (c) => el("tr", {},
    el("td", { className: "mono", text: c.name ?? "(no logon)" }),
    el("td", { dataset: { field: "user" } }),
    el("td", { className: "num", dataset: { field: "subs" } }),
    el("td", {}, el("button", { type: "button", className: "small danger", text: "Disconnect",
      dataset: { action: "disconnect" },
      onclick: (event) => instanceAct(event.currentTarget, managed,
        `/api/clients/${encodeURIComponent(c.name)}/disconnect`, `disconnect ${c.name}`) }))),
  update: (tr, c) => {
    setText(tr.querySelector('[data-field="user"]'), c.user ?? "–");
    setText(tr.querySelector('[data-field="subs"]'), fmtInt(c.subscriptions));
    allowAction(tr.querySelector("button"), c.name !== null, managed === SELF);
  },
});

const subscriptionTable = new KeyedTable($id("fabric-subscriptions").tBodies[0], {
  key: (s) => `${s.client}/${s.sub_id}`,
  columns: 5,
  empty: "no subscription",
  create: (s) => {
    const base = `/api/subscriptions/${encodeURIComponent(s.client)}/${encodeURIComponent(s.sub_id)}`;
    return el("tr", {},
      el("td", { className: "mono", text: s.client ?? "" }),
      el("td", { className: "mono", text: s.sub_id }),
      el("td", { className: "mono", text: s.topic }),
      el("td", { dataset: { field: "state" } }),
      el("td", {},
        el("button", { type: "button", className: "small", text: "Pause",
          dataset: { action: "pause" },
          onclick: (event) => instanceAct(event.currentTarget, managed, `${base}/pause`,
            `pause ${s.client}/${s.sub_id}`) }),
        el("button", { type: "button", className: "small", text: "Resume",
          dataset: { action: "resume" },
          onclick: (event) => instanceAct(event.currentTarget, managed, `${base}/resume`,
            `resume ${s.client}/${s.sub_id}`) })));
  },
  update: (tr, s) => {
    tr.querySelector('[data-field="state"]').replaceChildren(badge(s.state));
    const replay = s.bookmark_kind !== "none";
    const here = managed === SELF;
    allowAction(tr.querySelector('[data-action="pause"]'), replay && s.state !== "paused", here);
    allowAction(tr.querySelector('[data-action="resume"]'), s.state === "paused", here);
  },
});

async function manage(name) {
  managed = name;
  $id("fabric-instance").hidden = false;
  setText($id("fabric-instance-name"), name);
  await loadInstance();
}

async function loadInstance() {
  if (managed === null) return;
  const name = managed;
  try {
    const [clients, subs] = await Promise.all([
      call(name, instanceUrl(name), "/api/clients"),
      call(name, instanceUrl(name), "/api/subscriptions"),
    ]);
    if (managed !== name) return;
    clientTable.render(clients.clients);
    subscriptionTable.render(subs.subscriptions ?? subs);
  } catch (err) {
    alert.error(err, `clients of ${name}`);
  }
}

// -- link actions and history ----------------------------------------------------------------

const ACTIONS = {
  downgrade: { title: "Downgrade", danger: true,
    text: "persisted acks on its source stop waiting for it at once",
    allowed: (l) => l && l.configured_sync_type === "sync" && l.effective_sync_type === "sync"
      && sourceUp(l) },
  upgrade: { title: "Upgrade", danger: false,
    text: "persisted acks wait for it again once it has caught up",
    allowed: (l) => l && l.configured_sync_type === "sync" && l.effective_sync_type === "async"
      && sourceUp(l) },
  reconnect: { title: "Reconnect", danger: false,
    text: "drops the link and dials it again from the first address",
    allowed: (l) => l && l.configured_sync_type !== null && sourceUp(l) },
};

function sourceUp(link) {
  return current.instances.get(link.source)?.state === "up";
}

/** A link action is made on the link's source: this user's rights count only there. */
function allowLinkAction(button, link) {
  allowAction(button, ACTIONS[button.dataset.action].allowed(link), link?.source === SELF);
}

function actionButtons(id) {
  return Object.entries(ACTIONS).map(([verb, spec]) => el("button", {
    type: "button", className: `small${spec.danger ? " danger" : ""}`, text: spec.title,
    dataset: { action: verb },
    onclick: (event) => act(event.currentTarget, verb, id),
  }));
}

function sourceUrl(link) {
  return link.source === SELF ? null : current.instances.get(link.source)?.admin_url ?? null;
}

async function act(button, verb, id) {
  const link = current.links.get(id);
  if (!link) return;
  const spec = ACTIONS[verb];
  if (verb !== "reconnect") {
    const yes = await confirmDialog({
      title: `${spec.title} ${link.source} → ${link.target}?`,
      message: [`${spec.title}: ${spec.text}. Recorded in ${link.source}'s event log.`],
      confirm: spec.title, danger: spec.danger,
    });
    if (!yes) return;
  }
  await busy(button, async () => {
    try {
      const path = `/api/replication/${encodeURIComponent(link.target)}/${verb}`;
      const result = await call(link.source, sourceUrl(link), path, { method: "POST" });
      const now = result?.effective_sync_type ? ` (now ${result.effective_sync_type})` : "";
      alert.ok(`${link.source} → ${link.target}: ${verb} done${now}`);
    } catch (err) {
      alert.error(err, `${verb} ${link.source} → ${link.target}`);
    }
  });
  await poller.now();
}

let charts = null;

async function choose(id) {
  chosen = id;
  const link = current.links.get(id);
  if (!link) return;
  $id("fabric-link").hidden = false;
  setText($id("fabric-link-name"), `${link.source} → ${link.target}`);
  $id("fabric-link-actions").replaceChildren(...actionButtons(id));
  for (const button of $id("fabric-link-actions").querySelectorAll("button")) {
    allowLinkAction(button, link);
  }
  if (charts === null) {
    charts = {
      behind: new TimeChart($id("fabric-chart-behind"), { height: 180,
        series: [{ label: "behind", color: "--warn" }], yFormat: fmtInt }),
      rate: new TimeChart($id("fabric-chart-rate"), { height: 180,
        series: [{ label: "msgs/s", color: "--in" }], yFormat: fmtRate }),
    };
  }
  await loadHistory(link);
}

async function loadHistory(link) {
  // the source's history of its destination; an inbound-only view asks the target
  const bySource = link.configured_sync_type !== null || link.reported_by === link.source;
  const [name, direction, peer] = bySource
    ? [link.source, "out", link.target] : [link.target, "in", link.source];
  const url = name === SELF ? null : current.instances.get(name)?.admin_url ?? null;
  try {
    const q = `/api/replication/history?link=${encodeURIComponent(peer)}&direction=${direction}`;
    const history = await call(name, url, q);
    const t = history.samples.map((s) => s.time);
    charts.behind.setData([t, history.samples.map((s) => s.messages_behind)]);
    charts.rate.setData([t, history.samples.map((s) => s.msgs_per_sec)]);
  } catch (err) {
    charts.behind.setEmptyText(`history unavailable: ${err.detail || err.message}`);
  }
}

cy.on("tap", "node", (event) => {
  const node = event.target;
  if (node.hasClass("group")) return;
  const inst = current.instances.get(node.id());
  const href = node.id() === SELF ? "/" : inst?.admin_url;
  if (href) window.open(href, "_blank", "noopener");
});
cy.on("tap", "edge", (event) => choose(event.target.id()));

// -- refresh ---------------------------------------------------------------------------------

async function refresh() {
  let graph;
  try {
    graph = await discover();
  } catch (err) {
    alert.error(err, "fabric");
    return;
  }
  current = graph;
  draw(graph);
  const byGroup = (a, b) => a.group.localeCompare(b.group) || a.name.localeCompare(b.name);
  instanceTable.render([...graph.instances.values()].sort(byGroup));
  linkTable.render([...graph.links.values()].sort((a, b) => a.id.localeCompare(b.id)));
  const down = [...graph.instances.values()].filter((i) => i.state === "down").length;
  setText($id("summary"), `${graph.instances.size} instances · ${graph.links.size} links`
    + (down ? ` · ${down} down` : ""));
  setText($id("updated"), `updated ${new Date().toISOString().slice(11, 19)} UTC`);
  root.dataset.refreshed = String(Number(root.dataset.refreshed || 0) + 1);
  await loadInstance();
  if (chosen !== null && current.links.has(chosen)) {
    for (const button of $id("fabric-link-actions").querySelectorAll("button")) {
      allowLinkAction(button, current.links.get(chosen));
    }
  }
}

renderCredentials();
const poller = new Poller(refresh, REFRESH);
poller.start();
