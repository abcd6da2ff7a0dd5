// The page's one connection to /live/events (Server-Sent Events), shared by every module
// of the page (the top-bar ticker, the overview charts, the events table).
//
// The stream keeps what it received (`points`, `log`), so a module that starts listening
// after the first events arrived reads the state from there and misses nothing.
//
// Events dispatched on `live`:
//   "point"   detail: one point {time, msgs_in, msgs_out, ... } (every second)
//   "history" detail: {points, log} (on every (re)connect: the last minutes)
//   "log"     detail: {fresh: [{id, entry}], reset: bool} event-log entries not seen
//             before; `reset` when the broker restarted and `log` was replaced
//   "state"   detail: "connecting" | "open" | "error"

import { api } from "./ui.js";

/** Points kept in the page: 15 minutes at one a second. */
const KEEP_POINTS = 900;
/** Event-log entries kept in the page. */
const KEEP_LOG = 2000;
/** After the server refused the stream for good (e.g. logged out), try again this late. */
const RETRY_AFTER_CLOSE_MS = 5000;

class LiveStream extends EventTarget {
  constructor(url) {
    super();
    this.url = url;
    this.source = null;
    this.points = [];
    /** event-log entries {id, entry}, oldest first, numbered by the server's feed */
    this.log = [];
    this.state = "connecting";
  }

  /** Open the stream (once per page; later calls do nothing). */
  start() {
    if (this.source !== null) return this;
    this._open();
    return this;
  }

  /** The newest point, or null before the first one. */
  get latest() {
    return this.points.length ? this.points[this.points.length - 1] : null;
  }

  _setState(state) {
    if (state === this.state) return;
    this.state = state;
    this.dispatchEvent(new CustomEvent("state", { detail: state }));
  }

  _open() {
    const source = new EventSource(this.url);
    this.source = source;
    this._setState("connecting");
    source.addEventListener("open", () => this._setState("open"));
    source.addEventListener("history", (e) => this._onHistory(JSON.parse(e.data)));
    source.addEventListener("message", (e) => this._onPoint(JSON.parse(e.data)));
    source.addEventListener("log", (e) => this._onLog(JSON.parse(e.data), false));
    source.addEventListener("error", () => {
      if (source.readyState === EventSource.CLOSED) {
        // The server answered with something other than a stream (401 after the session
        // expired, 5xx): EventSource gives up. Ask the API (a 401 there leads to the
        // login page) and open a new stream a little later.
        this._setState("error");
        this.source = null;
        api("/api/instance").catch(() => {});
        setTimeout(() => this.start(), RETRY_AFTER_CLOSE_MS);
      } else {
        // The stream ended (server-side stream lifetime, restart): EventSource reconnects.
        this._setState("connecting");
      }
    });
  }

  _onHistory(history) {
    const incoming = history.points ?? [];
    if (incoming.length) {
      // keep what the page has from before the server's history window, then the history
      const first = incoming[0].time;
      const older = this.points.filter((p) => p.time < first);
      this.points = older.concat(incoming).slice(-KEEP_POINTS);
    }
    this._setState("open");
    this.dispatchEvent(new CustomEvent("history", { detail: history }));
    this._onLog(history.log ?? [], true);
  }

  _onLog(items, fromHistory) {
    const lastId = this.log.length ? this.log[this.log.length - 1].id : 0;
    const newest = items.length ? items[items.length - 1].id : 0;
    // a history whose numbering is behind ours: the broker restarted, start over
    const reset = fromHistory && newest < lastId;
    const fresh = reset ? items : items.filter((i) => i.id > lastId);
    if (!reset && fresh.length === 0) return;
    this.log = (reset ? fresh : this.log.concat(fresh)).slice(-KEEP_LOG);
    this.dispatchEvent(new CustomEvent("log", { detail: { fresh, reset } }));
  }

  _onPoint(point) {
    const last = this.latest;
    if (last !== null && point.time <= last.time) return;
    this.points.push(point);
    if (this.points.length > KEEP_POINTS) this.points.splice(0, this.points.length - KEEP_POINTS);
    this.dispatchEvent(new CustomEvent("point", { detail: point }));
  }
}

export const live = new LiveStream("/live/events");
