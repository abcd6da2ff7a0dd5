// Stored samples for the live charts: what the statistics database (GET /api/stats, the
// History page's endpoint) holds of a chart's series over its window, so a chart opens
// full instead of starting with the first live point, then continues from the page's own
// live points.
//
// The stats database is optional: when it is not open (503), a series does not exist yet
// (404, a fresh instance) or the request fails, the chart simply starts live, as it did
// without it; nothing is reported, so a page never fills with banners for it.

import { api } from "./ui.js";

/** A gap wider than this many sampling intervals is drawn as a gap, not a line. */
const GAP_INTERVALS = 2.5;
/** Fetched beyond the chart's window, so a browser clock a little ahead misses nothing. */
const SLACK_S = 60;

/**
 * A name as one segment of a metric path, encoded like the broker's
 * `server/stats/series.py segment()` (every character but letters, digits and `_.-~`).
 * @param {string} name
 */
export function metricSegment(name) {
  return encodeURIComponent(name).replace(/[!'()*]/g,
    (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
}

/** One series' raw samples ([[time, value], ...]), or [] when there are none to have. */
async function samples(metric, t0) {
  try {
    const answer = await api(`/api/stats?${new URLSearchParams({ metric, t0: String(t0) })}`);
    return Array.isArray(answer?.points) ? answer.points : [];
  } catch (err) {
    if (err?.name === "AbortError") throw err;
    return [];
  }
}

/**
 * The stored samples of several series over the last `seconds`, merged into rows like the
 * page's live points: `{time, [key]: value}` (a key is null where its series has no sample
 * at that time), oldest first. One GET /api/stats per series, in parallel.
 * @param {Object<string, string>} series key in the rows -> metric path
 * @param {number} seconds
 * @returns {Promise<{points: Array<Object>, interval: ?number}>} `interval`: the sampling
 *   interval seen (the smallest step between rows), null with fewer than two rows
 */
export async function fetchStored(series, seconds) {
  const t0 = Date.now() / 1000 - seconds - SLACK_S;
  const entries = Object.entries(series);
  const answers = await Promise.all(entries.map(([, metric]) => samples(metric, t0)));
  const rows = new Map();
  entries.forEach(([key], i) => {
    for (const [time, value] of answers[i]) {
      let row = rows.get(time);
      if (row === undefined) {
        row = { time };
        for (const [k] of entries) row[k] = null;
        rows.set(time, row);
      }
      row[key] = value;
    }
  });
  const points = [...rows.values()].sort((a, b) => a.time - b.time);
  let interval = null;
  for (let i = 1; i < points.length; i++) {
    const step = points[i].time - points[i - 1].time;
    if (step > 0 && (interval === null || step < interval)) interval = step;
  }
  return { points, interval };
}

/**
 * The stored points, then the live ones: stored points at or after the first live point
 * are left out (the live ones cover that time), so the seam has neither a gap nor a
 * duplicate. A hole of more than a few sampling intervals (the broker was down, the
 * sampler stalled) gets a row of nulls, which the chart draws as a gap.
 * @param {{points: Array<Object>, interval: ?number}} stored from {@link fetchStored}
 * @param {Array<Object>} live the page's points, oldest first, each with `time`
 * @returns {Array<Object>}
 */
export function joinStored(stored, live) {
  const first = live.length ? live[0].time : Infinity;
  const older = stored.points.filter((p) => p.time < first);
  if (older.length === 0) return live;
  const all = older.concat(live);
  if (stored.interval === null) return all;
  const gap = GAP_INTERVALS * stored.interval;
  const out = [all[0]];
  for (let i = 1; i < all.length; i++) {
    if (all[i].time - all[i - 1].time > gap) out.push({ time: all[i - 1].time + gap / 2 });
    out.push(all[i]);
  }
  return out;
}
