// Time-series charts on uPlot (npm package, served from /static/vendor/uplot/; the page
// loads uPlot.iife.min.js before its modules, which defines the global `uPlot`).
//
// A TimeChart fits its container's width, follows the theme (colours come from the CSS
// variables, so a theme change rebuilds the chart with the same data) and shows times in
// UTC like the rest of the dashboard.

import { el } from "./ui.js";

function cssVar(name) {
  return getComputedStyle(document.documentElement).getPropertyValue(name).trim();
}

function colour(value) {
  return value.startsWith("--") ? cssVar(value) : value;
}

/** A time (epoch seconds) as a Date whose local fields read UTC, for uPlot's `fmtDate`. */
const utc = (ts) => globalThis.uPlot.tzDate(new Date(ts * 1000), "Etc/UTC");

/** uPlot date templates: 24-hour, read from {@link utc} dates, so UTC in any time zone. */
const TEMPLATES = {
  day: "{MM}-{DD} {HH}:{mm}", minute: "{HH}:{mm}", second: "{HH}:{mm}:{ss}",
  daySecond: "{MM}-{DD} {HH}:{mm}:{ss}", date: "{YYYY}-{MM}-{DD}",
};
/** @type {?Object<string, function(Date): string>} built on first use (uPlot loads first) */
let stamps = null;

/** `ts` (epoch seconds) in UTC, as one of {@link TEMPLATES}. */
function stamp(kind, ts) {
  stamps ??= Object.fromEntries(Object.entries(TEMPLATES)
    .map(([name, template]) => [name, globalThis.uPlot.fmtDate(template)]));
  return stamps[kind](utc(ts));
}

/** The legend's time of a point: with its day when the visible range holds more than one
 * UTC day (a time alone would not say which). */
function pointTime(u, ts) {
  const { min, max } = u.scales.x;
  const days = min !== undefined && max !== undefined && stamp("date", min) !== stamp("date", max);
  return stamp(days ? "daySecond" : "second", ts);
}

/** Tick labels in UTC, as precise as the visible span needs (24-hour clock). */
function timeTicks(u, splits) {
  const span = u.scales.x.max - u.scales.x.min;
  return splits.map((t, i) => {
    if (span > 2 * 86400) return stamp("day", t);
    if (span > 900) return i === 0 || stamp("minute", t) === "00:00" ? stamp("day", t) : stamp("minute", t);
    return stamp("second", t);
  });
}

export class TimeChart {
  /**
   * @param {HTMLElement} container
   * @param {object} opts
   * @param {Array<{label: string, color: string, fmt?: function, fill?: boolean,
   *   points?: boolean}>} opts.series colour is a CSS value or a CSS variable name ("--in");
   *   `points` marks every sample (for sparse series, where a lone sample has no line)
   * @param {function(number): string} opts.yFormat axis labels
   * @param {number} [opts.height]
   * @param {boolean} [opts.zeroBased] y axis starts at 0 (default true)
   * @param {string} [opts.empty] text shown while there is no data
   * @param {number} [opts.window] show the last `window` seconds (a rolling live chart)
   * @param {function(): ?Array<number>} [opts.xRange] the x range to show ([t0, t1] epoch
   *   seconds), e.g. the queried window, instead of the data's extent
   */
  constructor(container, opts) {
    if (typeof globalThis.uPlot !== "function") {
      throw new Error("uPlot is not loaded (run `npm ci`: /static/vendor/uplot/ is empty)");
    }
    this.container = container;
    this.opts = { height: 220, zeroBased: true, empty: "waiting for data…", ...opts };
    this.data = [[], ...this.opts.series.map(() => [])];
    this.plot = null;
    this.note = el("div", { className: "empty-note", text: this.opts.empty });
    container.classList.add("chart");
    container.append(this.note);
    this._build();
    this._resize = new ResizeObserver(() => this._fit());
    this._resize.observe(container);
    this._onTheme = () => this._build();
    document.addEventListener("themechange", this._onTheme);
  }

  _width() {
    return Math.max(200, Math.floor(this.container.clientWidth));
  }

  _build() {
    if (this.plot !== null) this.plot.destroy();
    const axis = cssVar("--axis");
    const grid = cssVar("--grid");
    const font = `11px ${cssVar("--mono")}`;
    const { series, yFormat, zeroBased } = this.opts;
    const opts = {
      width: this._width(),
      height: this.opts.height,
      tzDate: utc,
      legend: { show: true, live: true },
      cursor: { drag: { x: true, y: false }, points: { size: 6 } },
      scales: {
        x: {
          time: true,
          range: (u, min, max) => {
            const fixed = this.opts.xRange?.();
            if (fixed) return fixed;
            if (this.opts.window) return [(max ?? 0) - this.opts.window, max ?? 0];
            // a single sample has no extent: give it a minute either side
            return min === max ? [(min ?? 0) - 60, (max ?? 0) + 60] : [min, max];
          },
        },
        y: {
          range: (u, min, max) => {
            if (min === null || max === null) return [0, 1];
            const top = max > 0 ? max * 1.08 : 1;
            if (zeroBased) return [Math.min(0, min), top];
            const pad = (max - min) * 0.08 || Math.abs(max) * 0.05 || 1;
            return [min - pad, max + pad];
          },
        },
      },
      series: [
        { label: "time (UTC)", value: (u, v) => (v === null ? "–" : pointTime(u, v)) },
        ...series.map((s) => ({
          label: s.label,
          stroke: colour(s.color),
          width: 1.5,
          fill: s.fill ? colour(s.color) + "22" : undefined,
          spanGaps: false,
          points: s.points ? { show: true, size: 4, fill: colour(s.color) } : { show: false },
          value: (u, v) => (v === null || v === undefined ? "–" : (s.fmt ?? yFormat)(v)),
        })),
      ],
      axes: [
        {
          stroke: axis,
          font,
          values: timeTicks,
          space: 70,
          grid: { stroke: grid, width: 1 },
          ticks: { stroke: grid, width: 1 },
        },
        {
          stroke: axis,
          font,
          size: 64,
          grid: { stroke: grid, width: 1 },
          ticks: { stroke: grid, width: 1 },
          values: (u, splits) => splits.map((v) => yFormat(v)),
        },
      ],
    };
    this.plot = new globalThis.uPlot(opts, this.data, this.container);
    this.container.append(this.note);
    this._updateNote();
  }

  _fit() {
    if (this.plot === null) return;
    const width = this._width();
    if (Math.abs(width - this.plot.width) > 1) {
      this.plot.setSize({ width, height: this.opts.height });
    }
  }

  _updateNote() {
    this.note.hidden = this.data[0].length > 0;
  }

  /** Replace the data: `[xs, ys1, ys2, ...]`, xs in epoch seconds, nulls for gaps. */
  setData(data) {
    this.data = data;
    this.plot.setData(data);
    this._updateNote();
  }

  /** Show a message instead of data (e.g. "no samples in this range"). */
  setEmptyText(text) {
    this.note.textContent = text;
  }

  destroy() {
    this._resize.disconnect();
    document.removeEventListener("themechange", this._onTheme);
    if (this.plot !== null) this.plot.destroy();
    this.plot = null;
  }
}
