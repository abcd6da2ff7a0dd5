// Spool browser HA client, part 1 of 3: where to connect and how long to wait first.
//
// Small pure parts with no I/O: a server chooser (which URI next, with which credentials)
// and delay strategies (how long to wait before the next attempt, and when to give up).
// Time and randomness are injected (`clock.now()` in milliseconds, `random()` in [0, 1)),
// so a test can check a whole schedule on a virtual clock. The HA client
// (static/spool-ha.js) composes them; see docs/js-client.md, "High availability".

import { SpoolError } from "./spool-client.js";

/** The real clock: milliseconds since the epoch. */
export const SYSTEM_CLOCK = Object.freeze({ now: () => Date.now() });

/**
 * A delay strategy decided to stop trying: the reconnect time budget (`maxTotal`) is spent.
 * The HA client wraps it in a ReconnectGaveUpError for its exception listener.
 */
export class RetryTimeExceededError extends SpoolError {
  /**
   * @param {number} elapsedMs how long the attempts have been going on
   * @param {number} maxTotalMs the budget
   */
  constructor(elapsedMs, maxTotalMs) {
    super("retry time exceeded", `no connection after ${elapsedMs} ms (maxTotal ${maxTotalMs} ms)`);
    this.name = "RetryTimeExceededError";
    this.elapsedMs = elapsedMs;
    this.maxTotalMs = maxTotalMs;
  }
}

function requireNumber(what, value, { min = 0, integer = false } = {}) {
  if (typeof value !== "number" || !Number.isFinite(value) || value < min || (integer && !Number.isInteger(value))) {
    throw new TypeError(`${what} must be a ${integer ? "whole " : ""}number >= ${min}, not ${String(value)}`);
  }
  return value;
}

function refuseUnknown(what, opts, known) {
  for (const key of Object.keys(opts)) {
    if (!known.includes(key)) throw new TypeError(`${what}: unknown option '${key}' (known: ${known.join(", ")})`);
  }
}

// ---------------------------------------------------------------------------------------
// Server chooser
// ---------------------------------------------------------------------------------------

/**
 * The server chooser interface (any object with these methods can be passed as `chooser`):
 *
 * - `getCurrentURI()`: the URI to try now, or null when there is none (the HA client then
 *   gives up with `getError()`).
 * - `getCurrentAuthenticator()`: credentials for that URI: `{userId, password}` or null.
 *   May return a promise (a token fetched from the application's own login).
 * - `reportFailure(error, uri)`: the attempt on `uri` failed (connect, logon, or the
 *   recovery steps after logon).
 * - `reportSuccess(uri)`: logged on to `uri`.
 * - `getError()`: text explaining why the chooser has no URI (or the last failures).
 * - `reportSafety(uri, safe)` (optional): what `uri` said of failing over from it (true
 *   safe, false unsafe, null it does not replicate); the default chooser tries the servers
 *   last known safe first after a failure (docs/js-client.md "Failover safety").
 */
export class DefaultServerChooser {
  /**
   * @param {string[]} uris e.g. `["ws://a:9007/amps/json", "ws://b:9007/amps/json"]`
   * @param {object} [opts]
   * @param {object} [opts.authenticators] `{uri: authenticator}`; an authenticator is
   *   `{userId, password}` or an object with `credentials(uri)` returning that (or a
   *   promise of it)
   */
  constructor(uris = [], opts = {}) {
    refuseUnknown("DefaultServerChooser", opts, ["authenticators"]);
    this._uris = [];
    this._auth = new Map();
    this._index = 0;
    /** uri -> the message of its last failure */
    this._failures = new Map();
    /** uri -> what it last said of failing over from it: true safe, false unsafe, null none */
    this._safety = new Map();
    /** indexes of the URIs that failed in the current rotation */
    this._tried = new Set();
    for (const uri of uris) this.add(uri);
    for (const [uri, auth] of Object.entries(opts.authenticators ?? {})) this.setAuthenticator(uri, auth);
  }

  /** Add a URI at the end of the rotation. */
  add(uri) {
    if (typeof uri !== "string" || !/^wss?:\/\//.test(uri)) {
      throw new TypeError(`a server URI must start with ws:// or wss://, not ${JSON.stringify(uri)}`);
    }
    this._uris.push(uri);
    return this;
  }

  /** Credentials for `uri` (see the constructor). */
  setAuthenticator(uri, authenticator) {
    if (!this._uris.includes(uri)) throw new TypeError(`no such URI in the chooser: ${uri}`);
    this._auth.set(uri, authenticator);
    return this;
  }

  get uris() {
    return [...this._uris];
  }

  getCurrentURI() {
    return this._uris.length === 0 ? null : this._uris[this._index % this._uris.length];
  }

  async getCurrentAuthenticator() {
    const uri = this.getCurrentURI();
    const auth = uri === null ? undefined : this._auth.get(uri);
    if (auth === undefined || auth === null) return null;
    if (typeof auth.credentials === "function") return (await auth.credentials(uri)) ?? null;
    return { userId: auth.userId, password: auth.password };
  }

  /**
   * Move on after a failure: to the URI not yet tried in this rotation that last said the
   * best of failing over from it (safe, then unknown, then unsafe; list order among
   * equals); a new rotation once every URI was tried. Without safety reports this is the
   * plain rotation in list order.
   */
  reportFailure(error, uri = this.getCurrentURI()) {
    if (uri !== null) this._failures.set(uri, error?.message ?? String(error));
    const n = this._uris.length;
    if (n === 0) return;
    this._tried.add(this._index % n);
    if (this._tried.size >= n) this._tried.clear();
    const rank = (i) => {
      const safe = this._safety.get(this._uris[i]);
      return safe === true ? 0 : safe === false ? 2 : 1;
    };
    const order = [...Array(n).keys()].filter((i) => !this._tried.has(i))
      .sort((a, b) => rank(a) - rank(b) || a - b);
    this._index = order[0];
  }

  /** Stay on this URI; its failure record is cleared. */
  reportSuccess(uri = this.getCurrentURI()) {
    this._failures.delete(uri);
    this._tried.clear();
    const i = this._uris.indexOf(uri);
    if (i >= 0) this._index = i;
  }

  /** What `uri` said of failing over from it (the HA client reports each logon and
   * notice): true safe, false unsafe, null it does not replicate. */
  reportSafety(uri, safe) {
    this._safety.set(uri, safe);
  }

  /** What `uri` last said of failing over from it (undefined: nothing yet). */
  safety(uri) {
    return this._safety.get(uri);
  }

  getError() {
    if (this._uris.length === 0) return "the server chooser has no URI";
    const last = [...this._failures].map(([uri, message]) => `${uri}: ${message}`);
    return last.length === 0 ? "" : `last failures: ${last.join("; ")}`;
  }
}

// ---------------------------------------------------------------------------------------
// Delay strategies
// ---------------------------------------------------------------------------------------

/**
 * The delay strategy interface:
 *
 * - `getConnectWaitDuration(uri)`: milliseconds to wait before the next attempt on `uri`;
 *   throws RetryTimeExceededError when attempts should stop.
 * - `reset()`: a logon succeeded; the next failure starts a new series.
 *
 * Both strategies here make the first attempt of a series at once (a dropped connection
 * is retried immediately) and count `maxTotal` from that first attempt: an attempt that
 * would start later than `maxTotal` ms after it is not made.
 */
export class FixedDelayStrategy {
  /**
   * @param {object} [opts]
   * @param {number} [opts.delay] ms between attempts (default 200)
   * @param {number} [opts.maxTotal] ms after which to give up (0: never; default 0)
   * @param {{now: function(): number}} [opts.clock]
   */
  constructor(opts = {}) {
    refuseUnknown("FixedDelayStrategy", opts, ["delay", "maxTotal", "clock"]);
    this.delay = requireNumber("FixedDelayStrategy delay", opts.delay ?? 200);
    this.maxTotal = requireNumber("FixedDelayStrategy maxTotal", opts.maxTotal ?? 0);
    this._clock = opts.clock ?? SYSTEM_CLOCK;
    this._start = null;
  }

  getConnectWaitDuration(_uri) {
    const now = this._clock.now();
    if (this._start === null) {
      this._start = now;
      return 0;
    }
    checkBudget(now, this.delay, this._start, this.maxTotal);
    return this.delay;
  }

  reset() {
    this._start = null;
  }
}

/** An attempt that would start more than `maxTotal` ms after the first one is not made. */
function checkBudget(now, wait, start, maxTotal) {
  if (maxTotal > 0 && now + wait - start > maxTotal) throw new RetryTimeExceededError(now - start, maxTotal);
}

/**
 * Exponential backoff per URI, with jitter.
 *
 * The first attempt on a URI in a series is immediate; the k-th retry on the same URI
 * (k = 1, 2, ...) waits `min(initial * backoff^(k-1) + jitter * initial * random(),
 * maximum)` ms, rounded to whole ms. With several URIs each has its own count, so a
 * failover to a fresh server is immediate. With `maxTotal`, an attempt that would start
 * more than `maxTotal` ms after the first one of the series is not made:
 * RetryTimeExceededError. (The Python client, server/client/ha/delay.py, has the same
 * schedule, in seconds.)
 */
export class ExponentialDelayStrategy {
  /**
   * @param {object} [opts]
   * @param {number} [opts.initial] ms (default 200)
   * @param {number} [opts.maximum] ms (default 20000)
   * @param {number} [opts.backoff] factor (default 2.0, at least 1)
   * @param {number} [opts.maxTotal] ms (0: never give up; default 0)
   * @param {number} [opts.jitter] in multiples of `initial` (default 1.0; 0: none)
   * @param {{now: function(): number}} [opts.clock]
   * @param {function(): number} [opts.random] in [0, 1) (default Math.random)
   */
  constructor(opts = {}) {
    refuseUnknown("ExponentialDelayStrategy", opts,
      ["initial", "maximum", "backoff", "maxTotal", "jitter", "clock", "random"]);
    this.initial = requireNumber("ExponentialDelayStrategy initial", opts.initial ?? 200);
    this.maximum = requireNumber("ExponentialDelayStrategy maximum", opts.maximum ?? 20000);
    this.backoff = requireNumber("ExponentialDelayStrategy backoff", opts.backoff ?? 2.0, { min: 1 });
    this.maxTotal = requireNumber("ExponentialDelayStrategy maxTotal", opts.maxTotal ?? 0);
    this.jitter = requireNumber("ExponentialDelayStrategy jitter", opts.jitter ?? 1.0);
    if (this.maximum < this.initial) {
      throw new TypeError(`ExponentialDelayStrategy maximum (${this.maximum}) is below initial (${this.initial})`);
    }
    this._clock = opts.clock ?? SYSTEM_CLOCK;
    this._random = opts.random ?? Math.random;
    this._start = null;
    /** uri -> retries made on it in this series */
    this._retries = new Map();
  }

  getConnectWaitDuration(uri) {
    const now = this._clock.now();
    if (this._start === null) this._start = now;
    const k = this._retries.get(uri);
    this._retries.set(uri, k === undefined ? 0 : k + 1);
    let wait = 0;
    if (k !== undefined) {
      const base = Math.min(this.initial * this.backoff ** k, this.maximum);
      wait = Math.round(Math.min(base + this.jitter * this.initial * this._random(), this.maximum));
    }
    checkBudget(now, wait, this._start, this.maxTotal);
    return wait;
  }

  reset() {
    this._start = null;
    this._retries.clear();
  }
}
