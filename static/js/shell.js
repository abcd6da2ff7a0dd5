// What every page has: the theme toggle, the UTC clock, the top-bar ticker fed by the
// live stream (msgs/s in and out, connections, persisted-ack p99), and the alert banners
// (a transaction log refusing writes, missing preallocated files: server/alerts.py),
// rendered by the server with the page and kept current from each live point.

import { live } from "./live.js";
import { fmtMs, fmtRate, fmtInt, setText } from "./ui.js";

const THEME_KEY = "spool.theme";

function currentTheme() {
  return document.documentElement.getAttribute("data-theme") === "light" ? "light" : "dark";
}

/** Switch theme, remember it, and tell charts to redraw with the new colours. */
export function setTheme(theme) {
  document.documentElement.setAttribute("data-theme", theme);
  try {
    localStorage.setItem(THEME_KEY, theme);
  } catch {
    /* storage disabled: the choice lasts for this page only */
  }
  const button = document.getElementById("theme-toggle");
  if (button) {
    button.setAttribute("aria-pressed", String(theme === "light"));
    button.title = theme === "light" ? "Switch to dark theme" : "Switch to light theme";
  }
  document.dispatchEvent(new CustomEvent("themechange", { detail: theme }));
}

function initTheme() {
  const button = document.getElementById("theme-toggle");
  if (!button) return;
  setTheme(currentTheme());
  button.addEventListener("click", () => setTheme(currentTheme() === "dark" ? "light" : "dark"));
}

function initClock() {
  const clock = document.getElementById("clock");
  if (!clock) return;
  const tick = () => {
    const now = new Date();
    setText(clock, `${now.toISOString().slice(11, 19)} UTC`);
    setTimeout(tick, 1000 - (now.getTime() % 1000) + 5);
  };
  tick();
}

function initTicker() {
  const ticker = document.getElementById("ticker");
  const dot = document.getElementById("live-status");
  const field = (name) => ticker?.querySelector(`[data-live="${name}"]`);
  const show = (p) => {
    if (!ticker || !p) return;
    setText(field("msgs_in"), fmtRate(p.msgs_in));
    setText(field("msgs_out"), fmtRate(p.msgs_out));
    setText(field("connections"), fmtInt(p.connections));
    setText(field("ack_p99_ms"), p.ack_p99_ms === null ? "–" : fmtMs(p.ack_p99_ms));
  };
  live.addEventListener("point", (e) => show(e.detail));
  live.addEventListener("history", () => show(live.latest));
  live.addEventListener("state", (e) => {
    if (!dot) return;
    dot.dataset.state = e.detail;
    dot.title = { open: "live: connected", connecting: "live: connecting…", error: "live: disconnected" }[e.detail];
  });
  live.start();
}

/** One banner element for an alert {id, level, title, message, since} (text only). */
function alertBanner(alert) {
  const div = document.createElement("div");
  div.className = `banner ${alert.level}`;
  div.setAttribute("role", "alert");
  div.dataset.alert = alert.id;
  const title = document.createElement("b");
  title.textContent = alert.title;
  const since = document.createElement("time");
  since.textContent = alert.since;
  div.append(title, " since ", since, `: ${alert.message}`);
  return div;
}

function initAlerts() {
  const box = document.getElementById("alerts");
  if (!box) return;
  let shown = null;
  const show = (p) => {
    if (!p || !Array.isArray(p.alerts)) return;
    const key = JSON.stringify(p.alerts);
    if (key === shown) return; // unchanged: leave the DOM alone
    shown = key;
    box.replaceChildren(...p.alerts.map(alertBanner));
  };
  live.addEventListener("point", (e) => show(e.detail));
  live.addEventListener("history", () => show(live.latest));
}

initTheme();
initClock();
initTicker();
initAlerts();
