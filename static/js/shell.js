// What every page has: the theme toggle, the UTC clock, and the top-bar ticker fed by the
// live stream (msgs/s in and out, connections, persisted-ack p99).

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

initTheme();
initClock();
initTicker();
