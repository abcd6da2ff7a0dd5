// Spool client, layer 3: the session. SpoolClient logs on, numbers commands (`cid`), matches
// acks to the promises that wait for them, routes delivered messages to subscriptions by
// `sids`, keeps heartbeats and tracks publish sequence numbers and subscription bookmarks.
//
// It talks to its transport only through `transportFactory(url)` (static/spool-transport.js
// by default), and keeps for every subscription the last bookmark delivered, so the HA
// layer (static/spool-ha.js) adds a server list, reconnect backoff and resubscription from
// the last bookmark around it without touching the codec.
//
// static/spool-client.js is the entry module that re-exports the public API.

import { encodeMessage, joinFrame, splitFrame } from "./spool-codec.js";
import { SpoolError } from "./spool-error.js";
import { SpoolMessage } from "./spool-message.js";
import { resolveWebSocket, WebSocketTransport } from "./spool-transport.js";

/** @typedef {import("./spool-transport.js").Transport} Transport */
/** @typedef {import("./spool-transport.js").WebSocketClass} WebSocketClass */

/** Version string sent on logon. */
export const CLIENT_VERSION = "spool-js/1";

/** A comma list of names as an array. */
function splitNames(value) {
  return typeof value === "string" && value !== "" ? value.split(",").filter((x) => x !== "") : [];
}

/** Failing over from the broker, as its logon ack or a notice says (docs/protocol.md). */
function safetyOf(header, detail) {
  return Object.freeze({
    failover: header.failover ?? "unsafe",
    safe: header.failover === "safe",
    asyncLinks: splitNames(header.async_links),
    downLinks: splitNames(header.down_links),
    detail,
  });
}

/** Two digits (or `width`), zero-padded. */
function pad(value, width = 2) {
  return String(value).padStart(width, "0");
}

/**
 * The `o` header of a delayed publish (docs/protocol.md "Publish options"), or undefined
 * when neither option is given: `deliverAt` as `deliver_at=YYYYmmddTHHMMSS.fffZ` (UTC, to
 * the millisecond a Date holds), `deliverAfterMs` as `deliver_after=NNNms` (a fraction of
 * a millisecond is kept to the picosecond, written without an exponent).
 *
 * @param {object} opts
 * @param {Date} [opts.deliverAt] deliver at this moment
 * @param {number} [opts.deliverAfterMs] deliver this many milliseconds (> 0) after the
 *   broker takes the message
 * @returns {string | undefined}
 * @throws {TypeError} both given, a `deliverAt` that is not a valid Date, a
 *   `deliverAfterMs` that is not a finite number > 0 (and at most 2^53 - 1)
 */
export function publishOptions({ deliverAt, deliverAfterMs } = {}) {
  if (deliverAt !== undefined && deliverAfterMs !== undefined) {
    throw new TypeError("deliverAt and deliverAfterMs contradict each other: give one");
  }
  if (deliverAt !== undefined) {
    if (!(deliverAt instanceof Date) || Number.isNaN(deliverAt.getTime())) {
      throw new TypeError(`deliverAt must be a valid Date, not ${String(deliverAt)}`);
    }
    const d = deliverAt;
    return `deliver_at=${pad(d.getUTCFullYear(), 4)}${pad(d.getUTCMonth() + 1)}${pad(d.getUTCDate())}` +
      `T${pad(d.getUTCHours())}${pad(d.getUTCMinutes())}${pad(d.getUTCSeconds())}` +
      `.${pad(d.getUTCMilliseconds(), 3)}Z`;
  }
  if (deliverAfterMs !== undefined) {
    if (typeof deliverAfterMs !== "number" || !(deliverAfterMs > 0) || deliverAfterMs > Number.MAX_SAFE_INTEGER) {
      throw new TypeError(`deliverAfterMs must be a finite number of milliseconds > 0, not ${String(deliverAfterMs)}`);
    }
    if (Number.isInteger(deliverAfterMs)) return `deliver_after=${deliverAfterMs}ms`;
    // toFixed never writes an exponent (below 1e21): to the picosecond, far below the
    // broker's microsecond
    const text = deliverAfterMs.toFixed(9).replace(/\.?0+$/, "");
    if (text === "0") throw new TypeError(`deliverAfterMs ${deliverAfterMs} is below a picosecond`);
    return `deliver_after=${text}ms`;
  }
  return undefined;
}

/** Largest frame the client builds when it batches messages (the server accepts 16 MB). */
const MAX_BATCH_BYTES = 1024 * 1024;
/** Above this many bytes waiting in the socket, publish() waits before queueing more. */
const HIGH_WATER_BYTES = 8 * 1024 * 1024;

function randomSuffix() {
  const bytes = new Uint8Array(4);
  crypto.getRandomValues(bytes);
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

function nextTick(ms) {
  return new Promise((resolve) => {
    setTimeout(resolve, ms);
  });
}

/**
 * A Spool client session over one connection.
 *
 * ```js
 * const client = new SpoolClient("ws://127.0.0.1:9007/amps/json", {name: "pricer"});
 * await client.connect();
 * const subId = await client.subscribe("orders", {filter: "/qty > 10"}, (m) => use(m.json()));
 * await client.publish("orders", {id: 1, qty: 20}, {ackPersisted: true});
 * await client.unsubscribe(subId);
 * client.close();
 * ```
 */
export class SpoolClient {
  /**
   * @param {string} url e.g. `ws://host:9007/amps/json`
   * @param {object} [opts]
   * @param {string} [opts.name] client name (unique per user); a random one if absent
   * @param {string} [opts.userId] user for authentication
   * @param {string} [opts.password] password or token
   * @param {number} [opts.heartbeat] heartbeat interval in seconds (0: none)
   * @param {number} [opts.heartbeatIdle] seconds without traffic that mean the connection
   *   is dead (default: two intervals)
   * @param {number} [opts.timeoutMs] connect + logon timeout (default 10 s)
   * @param {WebSocketClass} [opts.WebSocket] the WebSocket class (default: the global one;
   *   on Node 20 pass the `ws` package's: `import WebSocket from "ws"`)
   * @param {(url: string) => Transport} [opts.transportFactory] builds the transport (instead of
   *   a WebSocketTransport)
   * @param {string} [opts.logonOptions] the logon's `o`: "failover" (the broker's failover
   *   notices: the "failover" event, `safety`), "replicated" (its replicated acks: the
   *   "replicated" event, `lastReplicatedSeq`); docs/protocol.md "Logon options"
   * @param {string} [opts.reusedSeq] a publish given a `seq` at or below the highest this
   *   client name used (or the broker persisted) is dropped by the broker as a duplicate:
   *   "warn" (console.warn, the default), "refuse" (SpoolError "reused sequence", nothing
   *   sent) or "allow" (a deliberate resend)
   */
  constructor(url, opts = {}) {
    this.url = url;
    this.name = opts.name || `spool-js-${randomSuffix()}`;
    this.userId = opts.userId;
    this.password = opts.password;
    this.heartbeat = opts.heartbeat || 0;
    this.timeoutMs = opts.timeoutMs ?? 10000;
    this.logonOptions = opts.logonOptions ?? "";
    if (!["warn", "refuse", "allow"].includes(opts.reusedSeq ?? "warn")) {
      throw new TypeError(`reusedSeq must be "warn", "refuse" or "allow", not ${JSON.stringify(opts.reusedSeq)}`);
    }
    this.reusedSeq = opts.reusedSeq ?? "warn";
    if (opts.transportFactory !== undefined) {
      this._transportFactory = opts.transportFactory;
    } else {
      // resolved now, so that a runtime without WebSocket fails here with the fix, not at connect()
      const WebSocketImpl = resolveWebSocket("SpoolClient", opts.WebSocket);
      this._transportFactory = (/** @type {string} */ u) => new WebSocketTransport(u, WebSocketImpl);
    }
    this._transport = null;
    this._listeners = new Map();
    this._cid = 0;
    this._subCounter = 0;
    /** cid -> {resolve, reject, kind} for commands whose caller awaits an ack */
    this._pending = new Map();
    /** publishes waiting for a persisted ack, in sequence order: {seq, resolve, reject} */
    this._persistWaiters = [];
    /** sub_id -> subscription state (handlers, last bookmark for resubscribe) */
    this._subs = new Map();
    /** qid -> {onRecord(message), onGroup(header)} for query results being received */
    this._queries = new Map();
    /** subscriptions with an onBatch callback holding messages of the current frame */
    this._batching = [];
    this._out = [];
    this._outBytes = 0;
    this._flushScheduled = false;
    this._beatTimer = null;
    this._idleTimer = null;
    /** seconds without traffic after which the connection is dead (0: two intervals) */
    this.heartbeatIdle = opts.heartbeatIdle || 0;
    this._lastRx = 0;
    this._connected = false;
    /** Highest publish sequence number assigned on this client name. */
    this.lastSeq = 0;
    /** Highest sequence number the broker reported persisted for this client name. */
    this.lastPersistedSeq = 0;
    /** Highest sequence number the broker reported replicated (logon option "replicated"). */
    this.lastReplicatedSeq = 0;
    /** The logon options the broker took (an empty list from one that predates them). */
    this.grantedOptions = [];
    /** Failing over from the broker: {failover, asyncLinks, downLinks, detail}, from the
     * logon ack then its notices; null when it does not replicate. */
    this.safety = null;
    /** Logon ack fields: version, negotiated heartbeat, last bookmark. */
    this.serverVersion = null;
    this.lastBookmark = null;
    this._pubHash = null;
  }

  // -- events ----------------------------------------------------------------------------

  /**
   * Listen to an event: "disconnect" ({code, reason, error}), "error" (SpoolError that no
   * caller awaits, e.g. a failed fire-and-forget publish), "persisted" (every persisted ack
   * header), "replicated" (every replicated ack header), "failover" (the broker's safety
   * object, at each notice), "message" (delivered messages that match no local
   * subscription).
   * Returns a function that removes the listener.
   *
   * @param {"disconnect" | "error" | "persisted" | "replicated" | "failover" | "message"} event
   * @param {(value: any) => void} callback
   * @returns {() => void}
   */
  on(event, callback) {
    if (!this._listeners.has(event)) this._listeners.set(event, new Set());
    this._listeners.get(event).add(callback);
    return () => this.off(event, callback);
  }

  /**
   * @param {string} event
   * @param {(value: any) => void} callback
   */
  off(event, callback) {
    this._listeners.get(event)?.delete(callback);
  }

  _emit(event, value) {
    const set = this._listeners.get(event);
    if (!set || set.size === 0) {
      if (event === "error") console.error("SpoolClient:", value);
      return;
    }
    for (const cb of [...set]) {
      try {
        cb(value);
      } catch (exc) {
        console.error(`SpoolClient: a '${event}' listener threw`, exc);
      }
    }
  }

  // -- connection ------------------------------------------------------------------------

  get connected() {
    return this._connected;
  }

  /**
   * Open the connection and log on.
   *
   * @returns {Promise<object>} the logon ack header (client_name, s, bm, version, hb)
   * @throws {SpoolError} "auth failure", "name in use", "timeout", "disconnected", ...
   */
  async connect() {
    if (this._transport !== null) throw new SpoolError("invalid command", "already connected");
    const transport = this._transportFactory(this.url);
    this._transport = transport;
    transport.onFrame = (frame) => this._onFrame(frame);
    transport.onClose = (info) => this._onTransportClose(info);
    try {
      await transport.open(this.timeoutMs);
    } catch (exc) {
      this._transport = null;
      throw exc;
    }
    this._lastRx = Date.now();
    const cid = this._nextCid();
    const header = {
      c: "logon",
      cid,
      a: "processed",
      client_name: this.name,
      user_id: this.userId,
      pw: this.password,
      version: CLIENT_VERSION,
      hb: this.heartbeat || undefined,
      o: this.logonOptions || undefined,
    };
    let ack;
    try {
      ack = await this._request(cid, header, null, this.timeoutMs);
    } catch (exc) {
      this._transport = null;
      transport.close(1000, "logon failed");
      throw exc;
    }
    this._connected = true;
    this.lastPersistedSeq = ack.s ?? 0;
    this.lastSeq = Math.max(this.lastSeq, this.lastPersistedSeq);
    this.serverVersion = ack.version ?? null;
    this.lastBookmark = ack.bm ?? null;
    this.lastReplicatedSeq = 0;
    this.grantedOptions = splitNames(ack.o);
    this.safety = ack.failover === undefined ? null : safetyOf(ack, "logon");
    this._learnPubHash(this.lastBookmark);
    this._startHeartbeat(typeof ack.hb === "number" ? ack.hb : this.heartbeat);
    return ack;
  }

  /** Close the connection; everything still waiting fails with SpoolError("closed"). */
  close() {
    const transport = this._transport;
    if (transport === null) return;
    this._flushOut();
    this._teardown(new SpoolError("closed", "the client was closed"));
    transport.close(1000, "client closed");
  }

  _onTransportClose(info) {
    if (this._transport === null) return;
    const detail = `connection closed (code ${info.code}${info.reason ? `, ${info.reason}` : ""})`;
    const error = new SpoolError("disconnected", detail);
    // before the logon completed, connect() reports the failure; no "disconnect" event
    const wasConnected = this._connected;
    this._teardown(error);
    if (wasConnected) this._emit("disconnect", { code: info.code, reason: info.reason, error });
  }

  _teardown(error) {
    this._transport = null;
    this._connected = false;
    this._stopHeartbeat();
    this._out = [];
    this._outBytes = 0;
    const pending = [...this._pending.values()];
    const persistWaiters = this._persistWaiters;
    this._pending.clear();
    this._persistWaiters = [];
    this._queries.clear();
    for (const waiter of pending) waiter.reject(error);
    for (const waiter of persistWaiters) waiter.reject(error);
    // Subscriptions stay in _subs (with their last bookmark) for a later resubscribe; they
    // are marked inactive so nothing is delivered to them until then.
    for (const sub of this._subs.values()) sub.active = false;
  }

  // -- heartbeats ------------------------------------------------------------------------

  /**
   * Change the heartbeat now (and for later logons): the broker is asked to beat every
   * `seconds` (`heartbeat` with `o=start,N`), and the connection is declared dead after
   * `idleSeconds` without traffic (default two intervals). 0 stops the local checks (the
   * broker keeps the interval it has until the next logon).
   */
  setHeartbeat(seconds, idleSeconds = 2 * seconds) {
    if (typeof seconds !== "number" || !(seconds >= 0) || typeof idleSeconds !== "number" || !(idleSeconds >= 0)) {
      throw new TypeError("setHeartbeat(seconds, idleSeconds) takes numbers >= 0");
    }
    if (seconds > 0 && idleSeconds <= seconds) {
      throw new TypeError(`the idle limit (${idleSeconds} s) must be longer than the interval (${seconds} s)`);
    }
    this.heartbeat = seconds;
    this.heartbeatIdle = idleSeconds;
    if (!this._connected) return;
    if (seconds > 0) this._queue(encodeMessage({ c: "heartbeat", o: `start,${seconds}` }));
    this._startHeartbeat(seconds);
  }

  _startHeartbeat(seconds) {
    this._stopHeartbeat();
    if (!seconds || seconds <= 0) return;
    const ms = seconds * 1000;
    const idleMs = (this.heartbeatIdle || 2 * seconds) * 1000;
    this._beatTimer = setInterval(() => this._queue(encodeMessage({ c: "heartbeat", o: "beat" })), ms);
    // The broker beats every interval; `idle` without any traffic means the link is dead.
    // The check runs when the idle limit would be reached, so detection is not late by up
    // to an interval.
    const check = () => {
      const silent = Date.now() - this._lastRx;
      if (silent < idleMs) {
        this._idleTimer = setTimeout(check, idleMs - silent);
        return;
      }
      const transport = this._transport;
      const error = new SpoolError("heartbeat", `nothing received for ${silent / 1000} s`);
      this._teardown(error);
      transport?.close(4000, "heartbeat");
      this._emit("disconnect", { code: 4000, reason: "heartbeat", error });
    };
    this._idleTimer = setTimeout(check, idleMs);
  }

  _stopHeartbeat() {
    if (this._beatTimer !== null) clearInterval(this._beatTimer);
    if (this._idleTimer !== null) clearTimeout(this._idleTimer);
    this._beatTimer = null;
    this._idleTimer = null;
  }

  // -- sending ---------------------------------------------------------------------------

  _nextCid() {
    this._cid += 1;
    return String(this._cid);
  }

  /** The open transport (SpoolError "disconnected" when there is none). */
  _requireOpen() {
    if (this._transport === null || !this._transport.isOpen) {
      throw new SpoolError("disconnected", "not connected");
    }
    return this._transport;
  }

  /**
   * Queue one encoded message. Messages queued in the same task go out as one frame (the
   * protocol lets clients batch), sent from a microtask.
   */
  _queue(bytes) {
    this._out.push(bytes);
    this._outBytes += bytes.length;
    if (this._outBytes >= MAX_BATCH_BYTES) {
      this._flushOut();
    } else if (!this._flushScheduled) {
      this._flushScheduled = true;
      queueMicrotask(() => this._flushOut());
    }
  }

  _flushOut() {
    this._flushScheduled = false;
    if (this._out.length === 0 || this._transport === null) return;
    const frame = joinFrame(this._out);
    this._out = [];
    this._outBytes = 0;
    try {
      this._transport.send(frame);
    } catch (exc) {
      this._emit("error", exc instanceof SpoolError ? exc : new SpoolError("disconnected", String(exc)));
    }
  }

  /** Send a command and wait for its ack (matched by cid): the `processed` ack, or the
   * kind given (`stats` for a query or a delete); a failure ack rejects. */
  _request(cid, header, body, timeoutMs = 0, resolveOn = "processed") {
    return new Promise((resolve, reject) => {
      let timer = null;
      const done = (fn) => (value) => {
        if (timer !== null) clearTimeout(timer);
        this._pending.delete(cid);
        fn(value);
      };
      this._pending.set(cid, { resolve: done(resolve), reject: done(reject), resolveOn });
      if (timeoutMs > 0) {
        timer = setTimeout(() => {
          this._pending.get(cid)?.reject(
            new SpoolError("timeout", `no answer to '${header.c}' in ${timeoutMs} ms`));
        }, timeoutMs);
      }
      this._queue(encodeMessage(header, body));
    });
  }

  /** Resolves once the socket's send buffer is below the high-water mark. */
  async _drain() {
    while (this._transport !== null && this._transport.bufferedAmount > HIGH_WATER_BYTES) {
      await nextTick(5);
    }
  }

  /**
   * Publish one message.
   *
   * Without options it resolves (to the sequence number) once the message is handed to
   * the socket. With `ackPersisted` it resolves to `{seq, bookmark}` when the broker has
   * made it durable (conflated persisted acks cover every earlier sequence), and rejects
   * with SpoolError if the broker refuses it ("duplicate", "not entitled", "txlog full",
   * ...). With `ack: "processed"` it resolves when the broker has validated it.
   *
   * @param {string} topic
   * @param {*} data string, bytes, or any JSON-serialisable value
   * @param {object} [opts]
   * @param {number} [opts.seq] publisher sequence (default: the next one)
   * @param {boolean} [opts.ackPersisted]
   * @param {string} [opts.ack] "processed" to wait for validation
   * @param {string} [opts.correlationId]
   * @param {number} [opts.expiration] seconds
   * @param {string} [opts.sowKey]
   * @param {Date} [opts.deliverAt] delayed delivery: the broker stores the message now and
   *   delivers it at this moment (a topic its transaction log records)
   * @param {number} [opts.deliverAfterMs] delayed delivery this many milliseconds (> 0)
   *   after the broker takes it; one of the two (`publishOptions` throws TypeError)
   */
  async publish(topic, data, opts = {}) {
    return this._publishCommand("publish", topic, data, opts);
  }

  /**
   * Publish a delta to a SOW topic: the fields given are merged into the stored record
   * (nested objects field by field; a key the topic has not seen stores the message as it
   * is). The merged record is what is logged and delivered. Options and results as
   * `publish` (the record's key comes from the body's Key fields, or `sowKey`).
   *
   * @param {string} topic a SOW topic
   * @param {*} data the fields to merge (JSON text or a JSON-serialisable value)
   * @param {object} [opts] as `publish`
   */
  async deltaPublish(topic, data, opts = {}) {
    return this._publishCommand("delta_publish", topic, data, opts);
  }

  async _publishCommand(command, topic, data, opts) {
    const options = publishOptions({ deliverAt: opts.deliverAt, deliverAfterMs: opts.deliverAfterMs });
    if (this._requireOpen().bufferedAmount > HIGH_WATER_BYTES) await this._drain();
    this._requireOpen();
    if (opts.seq !== undefined && opts.seq <= this.lastSeq && this.reusedSeq !== "allow") {
      const text = `publish sequence ${opts.seq} is not above ${this.lastSeq}, the highest this client ` +
        "name used or the broker persisted: the broker acks it as a duplicate and drops it";
      if (this.reusedSeq === "refuse") throw new SpoolError("reused sequence", text);
      console.warn(`SpoolClient: ${text}`);
    }
    const seq = opts.seq ?? this.lastSeq + 1;
    if (seq > this.lastSeq) this.lastSeq = seq;
    const acks = [];
    if (opts.ack === "processed") acks.push("processed");
    if (opts.ackPersisted) acks.push("persisted");
    const cid = this._nextCid();
    const header = {
      c: command,
      t: topic,
      cid,
      s: seq,
      a: acks.length ? acks.join(",") : undefined,
      x: opts.correlationId,
      e: opts.expiration,
      k: opts.sowKey,
      o: options,
    };
    if (acks.length === 0) {
      this._queue(encodeMessage(header, data));
      return seq;
    }
    return new Promise((resolve, reject) => {
      const waiter = {
        seq,
        cid,
        needProcessed: opts.ack === "processed",
        processed: false,
        needPersisted: Boolean(opts.ackPersisted),
        persisted: null,
        resolve,
        reject,
      };
      // Failure acks carry the cid whatever was asked, so the cid entry catches a refusal
      // even when only the (cid-less, conflated) persisted ack was requested.
      this._pending.set(cid, {
        resolve: () => {
          waiter.processed = true;
          this._settlePublish(waiter);
        },
        reject: (err) => this._failPublish(waiter, err),
      });
      if (waiter.needPersisted) this._addPersistWaiter(waiter);
      this._queue(encodeMessage(header, data));
    });
  }

  _addPersistWaiter(waiter) {
    // kept in sequence order; publishes are almost always appended at the end
    const list = this._persistWaiters;
    let i = list.length;
    while (i > 0 && list[i - 1].seq > waiter.seq) i--;
    list.splice(i, 0, waiter);
  }

  _settlePublish(waiter) {
    if (waiter.needProcessed && !waiter.processed) return;
    if (waiter.needPersisted && waiter.persisted === null) return;
    this._pending.delete(waiter.cid);
    waiter.resolve(waiter.needPersisted ? waiter.persisted : waiter.seq);
  }

  _failPublish(waiter, err) {
    this._pending.delete(waiter.cid);
    const i = this._persistWaiters.indexOf(waiter);
    if (i >= 0) this._persistWaiters.splice(i, 1);
    waiter.reject(err);
  }

  /**
   * Resolves when every earlier command of this connection is processed and persisted.
   */
  flush(timeoutMs = 0) {
    this._requireOpen();
    const cid = this._nextCid();
    return this._request(cid, { c: "flush", cid, a: "processed" }, null, timeoutMs);
  }

  /**
   * Subscribe to a topic (or a regular expression of topics).
   *
   * Resolves to the sub id when the broker has accepted the subscription (processed ack);
   * rejects with SpoolError(reason) when it refuses it ("bad filter", "invalid bookmark",
   * "invalid topic", "subid in use", ...). A failure that comes later (a replay that cannot
   * continue) goes to `onError` (or the client's "error" event) and ends the subscription.
   *
   * @param {string} topic
   * @param {object} [opts]
   * @param {string} [opts.filter] content filter expression
   * @param {string} [opts.bookmark] "0" (epoch), "0|1|" (now), a bookmark, a timestamp,
   *   a list or a range: makes this a bookmark (replay) subscription
   * @param {string} [opts.options] comma-separated options ("timestamp", "live", ...)
   * @param {string} [opts.subId] the subscription id (default: generated)
   * @param {function(object): void} [opts.onCompleted] called with the completed ack (replay
   *   reached the live point, or the range end)
   * @param {function(SpoolError): void} [opts.onError] called on a later failure
   * @param {function(string): void} [opts.onPosition] called with the durable position the
   *   broker reports periodically for a bookmark subscription
   * @param {function(SpoolMessage[]): void} [opts.onBatch] called instead of `onMessage` with
   *   the messages of one frame for this subscription, in order (a replay delivers them
   *   by the thousand): one call per frame instead of one per message. The array is the
   *   callback's to keep; message bodies are views into the frame (copy to keep them).
   * @param {function(SpoolMessage): void} onMessage called for every message delivered
   * @returns {Promise<string>}
   */
  async subscribe(topic, opts = {}, onMessage = () => {}) {
    return this._subscribeCommand("subscribe", topic, opts, onMessage);
  }

  /**
   * Subscribe to a SOW topic receiving only what changed in each record: the changed
   * fields plus the record's key fields (a record the subscription did not hold yet comes
   * whole). Options and result as `subscribe` (`bookmark` is refused: a delta
   * subscription is live).
   */
  async deltaSubscribe(topic, opts = {}, onMessage = () => {}) {
    return this._subscribeCommand("delta_subscribe", topic, opts, onMessage);
  }

  /**
   * Query a SOW topic (or every SOW topic a regular expression matches) and, in the same
   * step, subscribe to its changes: `onMessage` gets the snapshot's records (`command`
   * "sow", with `sowKey`), then every later change (`publish`, or `oof` with `reason` when
   * asked with the `oof` option), none lost or doubled in between. Resolves to the sub id
   * once the broker accepted it; `opts.onSnapshot(header)` is called when the snapshot has
   * been delivered (its `group_end`).
   *
   * @param {string} topic
   * @param {object} [opts] `subscribe`'s options, plus:
   * @param {number} [opts.topN] at most this many snapshot records
   * @param {string} [opts.orderby] e.g. "/px DESC, /id"
   * @param {number} [opts.batchSize] records per frame (`bs`)
   * @param {boolean} [opts.delta] `sow_and_delta_subscribe`: changes come as deltas
   * @param {function(object): void} [opts.onSnapshot] the snapshot was delivered
   * @param {function(SpoolMessage): void} onMessage
   * @returns {Promise<string>}
   */
  async sowAndSubscribe(topic, opts = {}, onMessage = () => {}) {
    const command = opts.delta ? "sow_and_delta_subscribe" : "sow_and_subscribe";
    return this._subscribeCommand(command, topic, opts, onMessage);
  }

  async _subscribeCommand(command, topic, opts, onMessage) {
    this._requireOpen();
    const subId = opts.subId ?? `s${++this._subCounter}-${randomSuffix()}`;
    if (this._subs.has(subId) && this._subs.get(subId).active) {
      throw new SpoolError("subid in use", `sub_id ${subId} is already in use on this client`);
    }
    const cid = this._nextCid();
    const acks = ["processed"];
    if (opts.onCompleted) acks.push("completed");
    const snapshot = command.startsWith("sow_and_");
    const header = {
      c: command,
      cid,
      t: topic,
      sub_id: subId,
      qid: snapshot ? subId : undefined,
      f: opts.filter || undefined,
      bm: opts.bookmark || undefined,
      o: opts.options || undefined,
      top_n: snapshot ? opts.topN : undefined,
      orderby: snapshot ? opts.orderby || undefined : undefined,
      bs: snapshot ? opts.batchSize : undefined,
      a: acks.join(","),
    };
    const sub = {
      subId,
      cid,
      topic,
      filter: opts.filter,
      bookmark: opts.bookmark,
      options: opts.options,
      onMessage,
      onBatch: opts.onBatch,
      /** messages of the frame being dispatched, for onBatch */
      batch: null,
      onCompleted: opts.onCompleted,
      onError: opts.onError,
      onPosition: opts.onPosition,
      /** the last bookmark delivered or reported durable: where a resubscribe resumes */
      lastBookmark: null,
      active: true,
      accepted: false,
    };
    this._subs.set(subId, sub);
    if (snapshot) {
      // the snapshot's records carry the qid (here the sub id), not `sids`
      this._queries.set(subId, {
        onRecord: (message) => this._deliverTo(sub, message),
        onGroup: (group) => {
          if (group.c !== "group_end") return;
          this._queries.delete(subId);
          try {
            opts.onSnapshot?.(group);
          } catch (exc) {
            this._emit("error", exc);
          }
        },
      });
    }
    try {
      await this._request(cid, header, null);
    } catch (exc) {
      if (this._subs.get(subId) === sub) this._subs.delete(subId);
      this._queries.delete(subId);
      throw exc;
    }
    sub.accepted = true;
    return subId;
  }

  /**
   * End a subscription (no more messages are delivered to its callback from now on).
   * Resolves when the broker has removed it.
   */
  async unsubscribe(subId) {
    this._requireOpen();
    this._subs.delete(subId);
    this._queries.delete(subId);
    const cid = this._nextCid();
    await this._request(cid, { c: "unsubscribe", cid, sub_id: subId, a: "processed" }, null);
  }

  /**
   * Query a SOW topic (or every SOW topic a regular expression matches).
   *
   * Resolves, once the whole result arrived, to `{records, matches, returned}`: the
   * records (`SpoolMessage`s with `command` "sow", `sowKey`, `bookmark`; their bodies are
   * copied out of the frames), how many records matched and how many were sent. With
   * `opts.onRecord` each record goes to that callback as it arrives instead (a large
   * result is not kept; `records` is then empty). Rejects with the broker's reason
   * ("invalid topic", "bad filter", "bookmark not found", ...).
   *
   * @param {string} topic
   * @param {object} [opts]
   * @param {string} [opts.filter]
   * @param {number} [opts.topN]
   * @param {string} [opts.orderby] e.g. "/px DESC, /id"
   * @param {number} [opts.batchSize] records per frame (`bs`)
   * @param {string} [opts.bookmark] the state as of a bookmark or a time (historical)
   * @param {string[]} [opts.keys] only these keys
   * @param {string} [opts.options] e.g. "timestamp", "no_sowkey"
   * @param {function(SpoolMessage): void} [opts.onRecord]
   * @param {number} [opts.timeoutMs]
   * @returns {Promise<{records: SpoolMessage[], matches: number, returned: number}>}
   */
  async sow(topic, opts = {}) {
    this._requireOpen();
    const cid = this._nextCid();
    const qid = `q${cid}-${randomSuffix()}`;
    const records = [];
    const onRecord = opts.onRecord;
    this._queries.set(qid, {
      onRecord: (message) => {
        if (onRecord) {
          onRecord(message);
          return;
        }
        // the frame is reused by nothing, but a copy lets the caller keep records cheaply
        records.push(new SpoolMessage({ ...message.header }, message.body.slice()));
      },
      onGroup: () => {},
    });
    const header = {
      c: "sow",
      cid,
      t: topic,
      qid,
      f: opts.filter || undefined,
      top_n: opts.topN,
      orderby: opts.orderby || undefined,
      bs: opts.batchSize,
      bm: opts.bookmark || undefined,
      k: opts.keys?.length ? opts.keys.join(",") : undefined,
      o: opts.options || undefined,
      a: "stats",
    };
    let ack;
    try {
      ack = await this._request(cid, header, null, opts.timeoutMs ?? 0, "stats");
    } finally {
      this._queries.delete(qid);
    }
    return {
      records,
      matches: ack.matches ?? records.length,
      returned: ack.records_returned ?? records.length,
    };
  }

  /**
   * Delete SOW records: those matching `opts.filter`, those of `opts.keys`, or the one
   * whose key `opts.data` (a message body) gives. Resolves to how many were deleted.
   *
   * @param {string} topic
   * @param {object} opts exactly one of `filter`, `keys`, `data`
   * @param {string} [opts.filter] a content filter
   * @param {string[]} [opts.keys] SOW keys
   * @param {*} [opts.data] a message body whose key fields name the record
   * @param {number} [opts.timeoutMs]
   * @returns {Promise<number>}
   */
  async sowDelete(topic, opts = {}) {
    this._requireOpen();
    const given = ["filter", "keys", "data"].filter((k) => opts[k] !== undefined);
    if (given.length !== 1) {
      throw new SpoolError("invalid message", "sowDelete needs exactly one of filter, keys, data");
    }
    const cid = this._nextCid();
    const header = {
      c: "sow_delete",
      cid,
      t: topic,
      f: opts.filter,
      k: opts.keys ? opts.keys.join(",") : undefined,
      a: "stats",
    };
    const ack = await this._request(cid, header, opts.data ?? null, opts.timeoutMs ?? 0, "stats");
    return ack.records_deleted ?? 0;
  }

  // -- queues (docs/queues.md) -------------------------------------------------------------

  /**
   * Subscribe to a queue. Each message handed to `onMessage` is leased to this
   * subscription: call `m.ack()` when it is processed, `m.cancel()` to give it back,
   * `m.expire()` to drop it, `m.reject(reason)` to refuse it (it leaves the queue for its
   * dead-letter topic, if it has one; acks of one task leave as one `sow_delete`). With
   * `opts.autoAck` the message is acked once `onMessage` returned (or its promise
   * resolved) and cancelled if it threw. `m.deliveryCount` above 1 means an earlier
   * delivery's lease ended unacked; `m.leasePeriodMs` is its lease (0: at-most-once).
   *
   * @param {string} queue
   * @param {object} [opts] `filter`, `subId`, `maxBacklog` (the broker grants at most the
   *   queue's MaxPerSubscriptionBacklog; 1 when not given), `autoAck`
   * @param {function(SpoolMessage): void} onMessage
   * @returns {Promise<string>} the sub id
   */
  async queueSubscribe(queue, opts = {}, onMessage = () => {}) {
    const settle = (m, option, reason = "") => {
      if (m.settled) throw new SpoolError("invalid message", `queue message ${m.bookmark} was already settled`);
      m.settled = true;
      this._queueSettle(queue, m.bookmark, option, reason);
    };
    const wrap = (m) => {
      m.deliveryCount = Number(m.header.dc ?? 1);
      m.leasePeriodMs = Number(m.header.lp ?? 0);
      m.settled = false;
      m.ack = () => settle(m, "");
      m.cancel = () => settle(m, "cancel");
      m.expire = () => settle(m, "expire");
      m.reject = (reason = "") => settle(m, "reject", String(reason));
      if (!opts.autoAck) {
        onMessage(m);
        return;
      }
      Promise.resolve()
        .then(() => onMessage(m))
        .then(() => { if (!m.settled) m.ack(); },
              (err) => { if (!m.settled) m.cancel(); this._emit("error", err); });
    };
    return this.subscribe(queue, {
      filter: opts.filter,
      subId: opts.subId,
      options: opts.maxBacklog ? `max_backlog=${opts.maxBacklog}` : undefined,
    }, wrap);
  }

  /**
   * Queue an ack (option ""), cancel, expire or reject (with `reason`); sent with the
   * others of this task.
   */
  _queueSettle(queue, bookmark, option, reason = "") {
    if (!this._queueAcks) this._queueAcks = new Map();
    const key = JSON.stringify([option, reason, queue]);
    let list = this._queueAcks.get(key);
    if (!list) this._queueAcks.set(key, (list = []));
    list.push(bookmark);
    if (this._queueAcks.size === 1 && list.length === 1) {
      queueMicrotask(() => this._sendQueueAcks());
    }
  }

  _sendQueueAcks() {
    const pending = this._queueAcks;
    this._queueAcks = new Map();
    if (pending === undefined) return;
    for (const [key, bookmarks] of pending) {
      const [option, reason, queue] = JSON.parse(key);
      const cid = this._nextCid();
      const header = { c: "sow_delete", cid, t: queue, bm: bookmarks.join(","), a: "stats",
        o: option || undefined, reason: reason || undefined };
      this._request(cid, header, null, 0, "stats").catch((err) => this._emit("error", err));
    }
  }

  /** Ids of the subscriptions this client holds. */
  get subscriptions() {
    return [...this._subs.keys()];
  }

  /** The last bookmark seen on a subscription (its resume point), or null. */
  lastBookmarkOf(subId) {
    return this._subs.get(subId)?.lastBookmark ?? null;
  }

  // -- receiving -------------------------------------------------------------------------

  _onFrame(frame) {
    if (this._transport === null) return; // frames still in flight after a teardown
    this._lastRx = Date.now();
    const { items, error } = splitFrame(frame);
    for (const item of items) {
      try {
        if (item instanceof SpoolMessage) {
          this._deliver(item); // a delivery read by the fast path
          continue;
        }
        const c = item.header.c;
        if (c !== "publish" && c !== "sow" && this._batching.length > 0) this._flushBatches();
        this._dispatch(item.header, item.body);
      } catch (exc) {
        this._emit("error", exc);
      }
    }
    if (this._batching.length > 0) this._flushBatches();
    if (error !== null) {
      // The broker never sends malformed frames; if it happens the stream is untrustworthy.
      const transport = this._transport;
      const wasConnected = this._connected;
      const err = new SpoolError("invalid message", error);
      this._teardown(err);
      // browsers let a page close with 1000 or 3000-4999 only: 4002 mirrors 1002 (protocol error)
      transport?.close(4002, "invalid message");
      if (wasConnected) this._emit("disconnect", { code: 4002, reason: "invalid message", error: err });
    }
  }

  _dispatch(header, body) {
    switch (header.c) {
      case "ack":
        this._onAck(header);
        return;
      case "heartbeat":
        return;
      case "sow":
      case "group_begin":
      case "group_end": {
        const query = header.qid === undefined ? undefined : this._queries.get(String(header.qid));
        if (query === undefined) {
          this._deliver(new SpoolMessage(header, body));
        } else if (header.c === "sow") {
          query.onRecord(new SpoolMessage(header, body));
        } else {
          query.onGroup(header);
        }
        return;
      }
      case "publish":
      case "oof":
        this._deliver(new SpoolMessage(header, body));
        return;
      default:
        this._emit("error", new SpoolError("invalid message", `unknown command '${header.c}'`, header));
    }
  }

  _deliver(message) {
    const ids = message.subIds;
    let delivered = false;
    for (const id of ids) {
      const sub = this._subs.get(id);
      if (sub === undefined || !sub.active) continue;
      delivered = true;
      this._deliverTo(sub, message);
    }
    if (!delivered) this._emit("message", message);
  }

  _deliverTo(sub, message) {
    if (!sub.active) return;
    if (sub.onBatch) {
      // the batch's last bookmark becomes the resume point when the batch is handed over
      if (sub.batch === null) {
        sub.batch = [];
        this._batching.push(sub);
      }
      sub.batch.push(message);
      return;
    }
    // a snapshot record's bookmark is where that record was published, not a position
    // of the stream: only live messages move the resume point
    const bookmark = message.command === "sow" ? undefined : message.bookmark;
    if (bookmark) sub.lastBookmark = bookmark;
    try {
      sub.onMessage(message);
    } catch (exc) {
      this._emit("error", exc);
    }
  }

  /** Hand every subscription's collected messages to its batch callback (at the end of a
   * frame, and before any other message of the frame, so the order of events is kept). */
  _flushBatches() {
    const subs = this._batching;
    this._batching = [];
    for (const sub of subs) {
      const batch = sub.batch;
      sub.batch = null;
      for (let k = batch.length - 1; k >= 0; k--) {
        if (batch[k].command === "sow") break;
        const bookmark = batch[k].bookmark;
        if (bookmark) {
          sub.lastBookmark = bookmark;
          break;
        }
      }
      if (!sub.active) continue;
      try {
        sub.onBatch(batch);
      } catch (exc) {
        this._emit("error", exc);
      }
    }
  }

  _onAck(header) {
    const kind = header.a;
    const failed = header.status === "failure";
    if (kind === "persisted" && header.cid === undefined) {
      this._onPersisted(header, failed);
      return;
    }
    if (kind === "replicated" && header.cid === undefined) {
      if (typeof header.s === "number" && header.s > this.lastReplicatedSeq) {
        this.lastReplicatedSeq = header.s;
        this._emit("replicated", header);
      }
      return;
    }
    if (kind === "failover" && header.cid === undefined) {
      this.safety = safetyOf(header, header.detail ?? "");
      this._emit("failover", this.safety);
      return;
    }
    const cid = header.cid === undefined ? undefined : String(header.cid);
    const pending = cid === undefined ? undefined : this._pending.get(cid);
    if (pending !== undefined && (kind === (pending.resolveOn ?? "processed") || failed)) {
      if (failed) pending.reject(new SpoolError(header.reason ?? "failure", header.detail ?? "", header));
      else pending.resolve(header);
      return;
    }
    const sub = this._subByCid(cid, header.sub_id);
    if (sub !== undefined) {
      if (failed) {
        sub.active = false;
        this._subs.delete(sub.subId);
        const err = new SpoolError(header.reason ?? "failure", header.detail ?? "", header);
        if (sub.onError) sub.onError(err);
        else this._emit("error", err);
      } else if (kind === "completed" && sub.onCompleted) {
        sub.onCompleted(header);
      }
      return;
    }
    if (failed) {
      this._emit("error", new SpoolError(header.reason ?? "failure", header.detail ?? "", header));
    }
  }

  /** Remember this client's publisher hash, the first part of its bookmarks. */
  _learnPubHash(bookmark) {
    if (this._pubHash !== null || typeof bookmark !== "string") return;
    const bar = bookmark.indexOf("|");
    if (bar > 0) this._pubHash = bookmark.slice(0, bar);
  }

  /** Bookmark of this client's publish number `seq` (docs/protocol.md: `PUBHASH|PUBSEQ|`). */
  _bookmarkOf(seq) {
    return this._pubHash === null ? null : `${this._pubHash}|${seq}|`;
  }

  _subByCid(cid, subId) {
    if (subId !== undefined) {
      const sub = this._subs.get(subId);
      if (sub !== undefined) return sub;
    }
    if (cid === undefined) return undefined;
    for (const sub of this._subs.values()) if (sub.cid === cid) return sub;
    return undefined;
  }

  _onPersisted(header, failed) {
    if (header.sub_id !== undefined) {
      // the periodic durable position of a bookmark subscription (docs/protocol.md "Acks")
      const sub = this._subs.get(header.sub_id);
      if (sub !== undefined && header.bm) {
        sub.lastBookmark = header.bm;
        sub.onPosition?.(header.bm);
      }
      this._emit("persisted", header);
      return;
    }
    const s = header.s;
    if (typeof s !== "number") return;
    if (failed) {
      // a failed publish is reported alone, with its own sequence number
      const waiter = this._persistWaiters.find((w) => w.seq === s);
      const err = new SpoolError(header.reason ?? "failure", header.detail ?? "", header);
      if (waiter !== undefined) this._failPublish(waiter, err);
      else this._emit("error", err);
      return;
    }
    if (s > this.lastPersistedSeq) this.lastPersistedSeq = s;
    this._learnPubHash(header.bm);
    // conflated: one ack covers every sequence up to s
    const waiters = this._persistWaiters;
    let n = 0;
    while (n < waiters.length && waiters[n].seq <= s) n++;
    for (const w of waiters.splice(0, n)) {
      w.persisted = { seq: w.seq, bookmark: this._bookmarkOf(w.seq) };
      this._settlePublish(w);
    }
    this._emit("persisted", header);
  }
}
