// Spool browser HA client, part 3 of 3: HAClient, which keeps a session alive across lost
// connections, server restarts and failovers without losing or doubling messages.
//
// It composes the small parts of static/spool-ha-reconnect.js (server chooser, delay
// strategies) and static/spool-ha-stores.js (publish and bookmark stores) around one
// SpoolClient (static/spool-client.js), whose transport it reopens for each attempt. A
// reconnect runs these steps in order:
//
//   chooser (which URI) -> delay (how long to wait) -> connect -> logon -> report success
//   -> trim the publish store with the logon ack's `s` (what the broker already persisted;
//   not from a broker that confirms replication) -> publish the rest again, in order ->
//   resubscribe (a bookmark subscription from the bookmark store's resume point, under the
//   SAME sub_id; others as they were).
//
// Failover safety: every logon asks for the broker's failover notices and replicated acks
// (`o=failover,replicated`). While failing over from the broker is unsafe (an async or
// downgraded link) only replicated acks empty the publish store, so a message stays until
// it has reached every destination. A resumed bookmark subscription whose server lacks its
// resume point waits for it (catching up) instead of starting at NOW.
//
// See docs/js-client.md, "High availability".

import { SpoolClient, SpoolError, toBytes } from "./spool-client.js";
import { ExponentialDelayStrategy } from "./spool-ha-reconnect.js";
import { EPOCH, MOST_RECENT, NOW } from "./spool-ha-stores.js";

/** @typedef {import("./spool-client.js").SpoolMessage} SpoolMessage */

export * from "./spool-ha-reconnect.js";
export * from "./spool-ha-stores.js";

/** States reported to connection state listeners, with an `info` object. */
export const ConnectionState = Object.freeze({
  /** the socket is open ({uri}) */
  CONNECTED: "connected",
  /** the logon was accepted ({uri, ack}) */
  LOGGED_ON: "logged_on",
  /** the publish store's messages were sent again ({count}) */
  PUBLISH_REPLAYED: "publish_replayed",
  /** every subscription is placed again ({count}) */
  RESUBSCRIBED: "resubscribed",
  /** the connection ended ({code, reason, error}) */
  DISCONNECTED: "disconnected",
  /** the reconnect handler is running */
  RECONNECTING: "reconnecting",
  /** logged on to another URI than the previous connection's ({uri, from}) */
  FAILED_OVER: "failed_over",
  /** reconnection gave up ({error}) */
  GAVE_UP: "gave_up",
  /** a resumed bookmark subscription's server lacks its resume point ({subId}) */
  CATCHING_UP: "catching_up",
  /** it has it now, or the catch-up policy resumed it elsewhere ({subId}) */
  CAUGHT_UP: "caught_up",
  /** close() was called */
  CLOSED: "closed",
});

/** The reconnect handler stopped trying; `cause` says why, `chooserError` what failed. */
export class ReconnectGaveUpError extends SpoolError {
  constructor(cause, chooserError) {
    super("gave up", `${cause.message}${chooserError ? `; ${chooserError}` : ""}`);
    this.name = "ReconnectGaveUpError";
    this.cause = cause;
    this.chooserError = chooserError;
  }
}

/**
 * The broker's last persisted sequence for this client name is below what the publish
 * store already discarded as persisted: messages would be missing (another server that
 * never had them, or a log that lost them). Raised only with `errorOnPublishGap`.
 */
export class PublishGapError extends SpoolError {
  constructor(serverSeq, storeDiscarded) {
    super("publish gap",
      `the server's last persisted sequence is ${serverSeq}, but the publish store already ` +
        `discarded up to ${storeDiscarded} as persisted`);
    this.name = "PublishGapError";
    this.serverSeq = serverSeq;
    this.storeDiscarded = storeDiscarded;
  }
}

/** The broker refused a stored publish ("not entitled", "duplicate", ...): it is dropped
 * from the publish store (publishing it again would be refused again). */
export class PublishFailedError extends SpoolError {
  constructor(seq, topic, error) {
    super(error.reason, `publish ${seq} to '${topic}' refused${error.detail ? `: ${error.detail}` : ""}`, error.header);
    this.name = "PublishFailedError";
    this.seq = seq;
    this.topic = topic;
  }
}

/**
 * A resumed bookmark subscription's server lacked its resume point for longer than
 * `catchUpTimeoutMs` (a failover over an unsafe link); `policy` says what was done
 * ("epoch": resumed from the start of that server's log, dropping what was processed;
 * "now": resumed at NOW, an accepted gap; "fail": the subscription ended).
 */
export class CatchUpTimeoutError extends SpoolError {
  constructor(subId, uri, bookmark, waitedMs, policy) {
    super("catch up timeout",
      `subscription ${subId}: ${uri} still lacks the resume point ${bookmark} after ${waitedMs} ms; ` +
        { fail: "the subscription ends",
          epoch: "it resumes from the start of that server's log, dropping what it already processed",
          now: "it resumes at NOW: what lies between is skipped" }[policy]);
    this.name = "CatchUpTimeoutError";
    this.subId = subId;
    this.bookmark = bookmark;
    this.policy = policy;
  }
}

/** What a resumed bookmark subscription does once its server lacked its resume point for
 * `catchUpTimeoutMs`. */
const CATCH_UP_POLICIES = ["epoch", "now", "fail"];
/** Acked queue bookmarks a queue subscription remembers unless told otherwise. */
const ACKED_MEMORY = 100_000;

/** Client-side reasons of a publish that did not complete on this connection: the
 * message stays in the store and goes again after the reconnect. */
const CONNECTION_REASONS = new Set(["disconnected", "closed", "timeout", "heartbeat", "invalid message"]);

const SUBSCRIBE_METHODS = Object.freeze({
  subscribe: "subscribe",
  delta_subscribe: "deltaSubscribe",
  sow_and_subscribe: "sowAndSubscribe",
});

const SUBSCRIBE_OPTIONS = ["filter", "bookmark", "options", "subId", "onCompleted", "onError", "onPosition",
  "onBatch", "topN", "orderby", "batchSize", "delta", "onSnapshot"];

/**
 * The subscriptions to place again after a reconnect, in the order they were made.
 *
 * Replaceable (`HAClient.setSubscriptionManager`): any object with `add(record)`,
 * `remove(subId)`, `get(subId)`, `records()` and `async resubscribe(place)`, where
 * `place(record)` puts one subscription back (it resolves once the broker accepted it,
 * reports a refusal itself, and throws only when the connection is lost again).
 */
export class DefaultSubscriptionManager {
  constructor() {
    this._records = new Map();
  }

  add(record) {
    this._records.set(record.subId, record);
  }

  remove(subId) {
    this._records.delete(subId);
  }

  get(subId) {
    return this._records.get(subId);
  }

  records() {
    return [...this._records.values()];
  }

  async resubscribe(place) {
    for (const record of this.records()) await place(record);
  }
}

function refuseUnknown(what, opts, known) {
  for (const key of Object.keys(opts)) {
    if (!known.includes(key)) throw new TypeError(`${what}: unknown option '${key}' (known: ${known.join(", ")})`);
  }
}

let subCounter = 0;

/**
 * Where to connect next (DefaultServerChooser, or any object with these methods).
 * @typedef {object} ServerChooser
 * @property {() => (string | null | undefined)} getCurrentURI the URI to try now (null: give up)
 * @property {() => (Authenticator | null | undefined | Promise<Authenticator | null | undefined>)} [getCurrentAuthenticator]
 * @property {(error: unknown, uri: string) => void} reportFailure
 * @property {(uri: string) => void} reportSuccess
 * @property {(uri: string, safe: boolean | null) => void} [reportSafety]
 * @property {() => string} [getError]
 */

/**
 * Credentials for one server.
 * @typedef {{userId?: string, password?: string}} Authenticator
 */

/**
 * How long to wait before the next attempt (FixedDelayStrategy, ExponentialDelayStrategy).
 * @typedef {object} DelayStrategy
 * @property {(uri: string) => number} getConnectWaitDuration ms; throws to give up
 * @property {() => void} reset
 */

/**
 * Options of HAClient.publish and deltaPublish.
 * @typedef {object} PublishOptions
 * @property {string} [correlationId]
 * @property {number} [expiration] seconds
 * @property {string} [sowKey]
 */

/**
 * @typedef {object} HAClientOptions
 * @property {ServerChooser} chooser e.g. `new DefaultServerChooser([uri, ...])`
 * @property {DelayStrategy} [delay] default `new ExponentialDelayStrategy()`
 * @property {import("./spool-ha-stores.js").MemoryPublishStore} [publishStore]
 *   MemoryPublishStore or IndexedDBPublishStore
 * @property {import("./spool-ha-stores.js").MemoryBookmarkStore} [bookmarkStore]
 *   MemoryBookmarkStore or IndexedDBBookmarkStore
 * @property {boolean} [errorOnPublishGap] refuse a server whose last persisted sequence is
 *   below what the publish store discarded (PublishGapError)
 * @property {number} [heartbeat] seconds (see setHeartbeat)
 * @property {number} [heartbeatIdle] seconds
 * @property {number} [timeoutMs] connect + logon timeout per attempt
 * @property {import("./spool-client.js").WebSocketClass} [WebSocket] the WebSocket class, as
 *   SpoolClient's (on Node 20: the `ws` package's)
 * @property {(url: string) => import("./spool-client.js").Transport} [transportFactory] as SpoolClient's
 * @property {{setTimeout: (fn: () => void, ms: number) => any, clearTimeout: (timer: any) => void}} [timers]
 *   for the waits between attempts (tests inject a virtual clock)
 * @property {number} [catchUpTimeoutMs] how long a resumed bookmark subscription waits for a
 *   server that lacks its resume point (default 60000)
 * @property {"epoch" | "now" | "fail"} [catchUpPolicy] then: "epoch" (default), "now" or "fail"
 * @property {number} [catchUpRetryMs] between two attempts meanwhile (default 500)
 * @property {(restored: RestoredPublishes) => (void | Promise<void>)} [onRestore] called once,
 *   when connectAndLogon() has opened the publish store and before the first connection
 *   (so before anything is sent again), with what the store holds: see RestoredPublishes.
 *   connectAndLogon() waits for a promise it returns; if it throws, connectAndLogon()
 *   rejects with that error and closes the stores again.
 */

/**
 * What a publish store held when the HA client opened it (HAClientOptions.onRestore): the
 * messages an earlier page (or run) stored and the broker has not confirmed, in sequence
 * order. The client sends each again under its own sequence number after the logon (the
 * broker acks those it already has as duplicates): they are published, or on their way,
 * even when their `publish()` never resolved (a reload came between the store's write and
 * the resolve). An application that keeps its own record of what it published marks them
 * in flight instead of publishing them again, which would send them twice under new
 * sequence numbers.
 * @typedef {object} RestoredPublishes
 * @property {import("./spool-ha-stores.js").PublishStoreEntry[]} pending copies of the
 *   entries (`seq`, `command`, `topic`, `body` bytes, `correlationId`, `expiration`, `sowKey`)
 * @property {number} lastSeq the highest sequence number the store used: the next publish
 *   is numbered above it
 */

/**
 * A client that reconnects on its own. See the module comment and docs/js-client.md.
 *
 * ```js
 * const ha = new HAClient("blotter", {
 *   chooser: new DefaultServerChooser(["ws://a:9007/amps/json", "ws://b:9007/amps/json"]),
 *   delay: new ExponentialDelayStrategy({ initial: 200, maximum: 5000 }),
 *   publishStore: new IndexedDBPublishStore("blotter"),
 *   bookmarkStore: new IndexedDBBookmarkStore("blotter"),
 * });
 * await ha.connectAndLogon();
 * ```
 */
export class HAClient {
  /**
   * @param {string} name the client name (publisher identity; keep it stable)
   * @param {HAClientOptions} opts
   */
  constructor(name, opts) {
    if (opts === null || typeof opts !== "object") {
      throw new TypeError("HAClient needs options with a chooser (e.g. new DefaultServerChooser([uri, ...]))");
    }
    if (typeof name !== "string" || name === "") throw new TypeError("HAClient needs a client name");
    refuseUnknown("HAClient", opts, ["chooser", "delay", "publishStore", "bookmarkStore", "errorOnPublishGap",
      "heartbeat", "heartbeatIdle", "timeoutMs", "WebSocket", "transportFactory", "timers", "catchUpTimeoutMs",
      "catchUpPolicy", "catchUpRetryMs", "onRestore"]);
    if (opts.onRestore !== undefined && typeof opts.onRestore !== "function") {
      throw new TypeError("HAClient: onRestore must be a function");
    }
    this._onRestore = opts.onRestore ?? null;
    if (!CATCH_UP_POLICIES.includes(opts.catchUpPolicy ?? "epoch")) {
      throw new TypeError(`catchUpPolicy must be one of ${CATCH_UP_POLICIES.join(", ")}, not ${JSON.stringify(opts.catchUpPolicy)}`);
    }
    this.catchUpTimeoutMs = opts.catchUpTimeoutMs ?? 60000;
    this.catchUpPolicy = opts.catchUpPolicy ?? "epoch";
    this.catchUpRetryMs = opts.catchUpRetryMs ?? 500;
    if (!opts.chooser || typeof opts.chooser.getCurrentURI !== "function") {
      throw new TypeError("HAClient needs a chooser (e.g. new DefaultServerChooser([uri, ...]))");
    }
    this.name = name;
    this.chooser = opts.chooser;
    this.delay = opts.delay ?? new ExponentialDelayStrategy();
    this.publishStore = opts.publishStore ?? null;
    this.bookmarkStore = opts.bookmarkStore ?? null;
    this.errorOnPublishGap = Boolean(opts.errorOnPublishGap);
    this._timers = opts.timers ?? { setTimeout: (f, ms) => setTimeout(f, ms), clearTimeout: (t) => clearTimeout(t) };
    this._client = new SpoolClient("ws://unset.invalid/amps/json", {
      name,
      heartbeat: opts.heartbeat,
      heartbeatIdle: opts.heartbeatIdle,
      timeoutMs: opts.timeoutMs,
      WebSocket: opts.WebSocket,
      transportFactory: opts.transportFactory,
      logonOptions: "failover,replicated",
      reusedSeq: "allow", // resends on purpose
    });
    this._client.on("disconnect", (info) => this._onDisconnect(info));
    this._client.on("error", (err) => {
      // a command in flight when the connection ended (a queue ack): the reconnect handles it
      if (!(err instanceof SpoolError && (err.reason === "disconnected" || err.reason === "closed"))) {
        this._exception(err);
      }
    });
    this._client.on("persisted", (header) => this._onPersisted(header));
    this._client.on("replicated", (header) => this._onReplicated(header));
    this._client.on("failover", (safety) => this._safetyKnown(safety));
    this._manager = new DefaultSubscriptionManager();
    this._exceptionListener = (err) => console.error("HAClient:", err);
    this._stateListeners = new Set();
    /** the running reconnect loop (a promise of the logon ack), or null */
    this._connecting = null;
    /** logged on, publish store replayed and subscriptions placed */
    this._ready = false;
    this._loggedOnOnce = false;
    this._closed = false;
    this._lastUri = null;
    /** highest sequence handed to the connection (the publish store's entries above it wait) */
    this._sentUpTo = 0;
    this._flushWaiters = [];
    this._sleeping = null;
    this._opening = null;
    this._failoverListeners = new Set();
    /** the current broker's failover safety (null: it does not replicate) */
    this._safety = null;
    /** the current broker gives replicated acks */
    this._replicatedAcks = false;
    /** the highest sequence the current broker persisted for this client name */
    this._persistedSeq = 0;
    /** publishes waiting for room in the publish store */
    this._roomWaiters = [];
    /** the lowest stored sequence the current broker refused for now ("txlog full") and
     * not sent again yet (null: none): no ack discards it or anything after it */
    this._refusedFrom = null;
    /** the timer of the next resend of refused publishes, or null */
    this._resendTimer = null;
    /** the first sequence of the last resend, until an ack confirms it */
    this._resentFrom = null;
  }

  // -- listeners -------------------------------------------------------------------------

  /** `fn(error)` for errors no caller awaits (refused publishes, give-up, store failures). */
  setExceptionListener(fn) {
    this._exceptionListener = fn;
  }

  /** `fn(state, info)` for every ConnectionState; returns a function that removes it. */
  addConnectionStateListener(fn) {
    this._stateListeners.add(fn);
    return () => this._stateListeners.delete(fn);
  }

  /**
   * `fn(uri, safety)` hears what each server says of failing over from it: at every logon
   * (`safety.detail` "logon") and at every notice on the open connection. `safety` is
   * `{failover, safe, asyncLinks, downLinks, detail}`. Returns a function that removes it.
   */
  addFailoverListener(fn) {
    this._failoverListeners.add(fn);
    return () => this._failoverListeners.delete(fn);
  }

  /** How safe failing over from the current (or last) server is; null when it does not
   * replicate. */
  get safety() {
    return this._safety;
  }

  /** A persisted ack may empty the store: failover from the broker is safe, or it cannot
   * say more (it does not replicate, or gives no replicated acks). */
  _trustPersisted() {
    return this._safety === null || this._safety.safe || !this._replicatedAcks;
  }

  _safetyKnown(safety) {
    this._safety = safety;
    const uri = this._lastUri;
    if (uri === null) return;
    this.chooser.reportSafety?.(uri, safety === null ? null : safety.safe);
    if (safety === null) return;
    for (const fn of [...this._failoverListeners]) {
      try {
        fn(uri, safety);
      } catch (exc) {
        this._exception(exc);
      }
    }
  }

  /** Replace the subscription manager (before subscribing). */
  setSubscriptionManager(manager) {
    for (const method of ["add", "remove", "get", "records", "resubscribe"]) {
      if (typeof manager?.[method] !== "function") throw new TypeError(`a subscription manager needs ${method}()`);
    }
    this._manager = manager;
  }

  get subscriptionManager() {
    return this._manager;
  }

  _exception(err) {
    try {
      this._exceptionListener(err);
    } catch (exc) {
      console.error("HAClient: the exception listener threw", exc);
    }
  }

  _state(state, info = {}) {
    for (const fn of [...this._stateListeners]) {
      try {
        fn(state, info);
      } catch (exc) {
        this._exception(exc);
      }
    }
  }

  // -- connection ------------------------------------------------------------------------

  /** Logged on with the stores replayed and the subscriptions placed. */
  get connected() {
    return this._ready;
  }

  /** The URI of the current (or last) connection. */
  get uri() {
    return this._lastUri;
  }

  /**
   * Open the stores (taking their locks: StoreLockedError if another tab has one), call
   * `onRestore` with what the publish store holds, then run the reconnect steps until a
   * server takes the logon. Resolves to the logon ack;
   * rejects with ReconnectGaveUpError when the delay strategy or the chooser gives up.
   */
  async connectAndLogon() {
    if (this._closed) throw new SpoolError("closed", "the HA client was closed");
    if (this._ready) throw new SpoolError("invalid command", "already connected");
    // one opening for concurrent calls (a second open would find the lock taken by the first)
    this._opening ??= (async () => {
      try {
        await this.publishStore?.open();
        await this.bookmarkStore?.open();
        // before the first connection: nothing of the store has been sent again yet
        if (this._onRestore !== null && this.publishStore !== null) {
          const store = this.publishStore;
          await this._onRestore({ pending: store.pending(), lastSeq: store.lastSeq });
        }
      } catch (exc) {
        this._opening = null;
        await this.publishStore?.close();
        await this.bookmarkStore?.close();
        throw exc;
      }
    })();
    await this._opening;
    return this._reconnect();
  }

  /** Set the heartbeat: the broker beats every `seconds`; `idleSeconds` of silence
   * (default two intervals) mean the connection is dead and the reconnect handler runs. */
  setHeartbeat(seconds, idleSeconds = 2 * seconds) {
    this._client.setHeartbeat(seconds, idleSeconds);
  }

  /** Close the connection and the stores (releasing their locks). */
  async close() {
    if (this._closed) return;
    this._closed = true;
    this._ready = false;
    this._sleeping?.();
    this._stopResend();
    this._client.close();
    this._failFlushes(new SpoolError("closed", "the HA client was closed"));
    await this.publishStore?.close();
    await this.bookmarkStore?.close();
    this._state(ConnectionState.CLOSED);
  }

  _reconnect() {
    if (this._connecting === null) {
      this._connecting = this._connectLoop();
      // the loop resets _connecting itself, synchronously with its outcome
    }
    return this._connecting;
  }

  _sleep(ms) {
    return /** @type {Promise<void>} */ (new Promise((resolve) => {
      const timer = this._timers.setTimeout(() => {
        this._sleeping = null;
        resolve();
      }, ms);
      this._sleeping = () => {
        this._timers.clearTimeout(timer);
        this._sleeping = null;
        resolve();
      };
    }));
  }

  async _connectLoop() {
    try {
      for (;;) {
        if (this._closed) throw new SpoolError("closed", "the HA client was closed");
        const uri = this.chooser.getCurrentURI();
        if (uri === null || uri === undefined) {
          throw this._giveUp(new SpoolError("no server", "the server chooser has no URI to try"));
        }
        let wait;
        try {
          wait = this.delay.getConnectWaitDuration(uri);
        } catch (exc) {
          throw this._giveUp(exc);
        }
        if (wait > 0) await this._sleep(wait);
        if (this._closed) throw new SpoolError("closed", "the HA client was closed");
        let ack;
        try {
          ack = await this._attempt(uri);
        } catch (exc) {
          if (this._closed) throw new SpoolError("closed", "the HA client was closed");
          if (exc instanceof PublishGapError) this._exception(exc);
          if (this._client.connected) this._client.close();
          this.chooser.reportFailure(exc, uri);
          continue;
        }
        this._connecting = null;
        return ack;
      }
    } catch (exc) {
      this._connecting = null;
      throw exc;
    }
  }

  /** One attempt: connect, logon, recover. Throws on any failure (the loop goes on). */
  async _attempt(uri) {
    const credentials = await this.chooser.getCurrentAuthenticator?.();
    const client = this._client;
    client.url = uri;
    client.userId = credentials?.userId;
    client.password = credentials?.password;
    const ack = await client.connect();
    this._state(ConnectionState.CONNECTED, { uri });
    this._state(ConnectionState.LOGGED_ON, { uri, ack });
    // a server that lacks messages the store already dropped is a failed attempt (the
    // delay strategy is not reset: with maxTotal the client gives up)
    const persisted = typeof ack.s === "number" ? ack.s : 0;
    const store = this.publishStore;
    if (store !== null && this.errorOnPublishGap && persisted < store.lastDiscarded) {
      throw new PublishGapError(persisted, store.lastDiscarded);
    }
    this.chooser.reportSuccess(uri);
    this.delay.reset();
    const from = this._lastUri;
    this._lastUri = uri;
    if (from !== null && from !== uri) this._state(ConnectionState.FAILED_OVER, { uri, from });
    this._loggedOnOnce = true;
    await this._recover(ack);
    // subscriptions made while the others were being placed again
    for (;;) {
      const pending = this._manager.records().filter((r) => !r.placed && !r.catchingUp);
      if (pending.length === 0) break;
      for (const record of pending) await this._place(record);
    }
    if (!client.connected) throw new SpoolError("disconnected", "the connection ended during recovery");
    this._ready = true;
    // messages published while the subscriptions were being placed again
    if (this.publishStore !== null) {
      for (const entry of this.publishStore.entriesAfter(this._sentUpTo)) this._send(entry);
    }
    return ack;
  }

  /** After logon: trim the publish store, publish the rest again, resubscribe. */
  async _recover(ack) {
    this._stopResend(); // the whole store goes again on this connection
    const persisted = typeof ack.s === "number" ? ack.s : 0;
    this._replicatedAcks = (typeof ack.o === "string" ? ack.o.split(",") : []).includes("replicated");
    this._persistedSeq = persisted;
    this._safetyKnown(this._client.safety);
    const store = this.publishStore;
    if (store !== null) {
      // a broker that confirms replication is never trusted on its logon's word: what it
      // has it acks as duplicates (docs/js-client.md "Failover safety")
      let from = store.lastDiscarded;
      if (!this._replicatedAcks) {
        store.discardUpTo(persisted);
        from = persisted;
      }
      const entries = store.entriesAfter(from);
      this._sentUpTo = from;
      for (const entry of entries) this._send(entry);
      this._checkFlushes();
      this._state(ConnectionState.PUBLISH_REPLAYED, { count: entries.length });
    }
    const records = this._manager.records();
    await this._manager.resubscribe((record) => this._place(record));
    this._state(ConnectionState.RESUBSCRIBED, { count: records.length });
  }

  _onDisconnect(info) {
    const wasReady = this._ready;
    this._ready = false;
    this._stopResend();
    this._state(ConnectionState.DISCONNECTED, info);
    // during an attempt the loop sees the failure itself
    if (this._closed || this._connecting !== null || !wasReady) return;
    this._state(ConnectionState.RECONNECTING);
    this._reconnect().catch(() => {}); // a give-up reached the exception listener
  }

  _giveUp(cause) {
    const error = new ReconnectGaveUpError(cause, this.chooser.getError?.() ?? "");
    this._state(ConnectionState.GAVE_UP, { error });
    this._exception(error);
    this._failFlushes(error);
    return error;
  }

  // -- publishing ------------------------------------------------------------------------

  /**
   * Publish one message. With a publish store it resolves to its sequence number once the
   * store holds it (sent now when connected, else after the reconnect); it is dropped
   * from the store when the broker reports it persisted. Without a store it needs a
   * connection (SpoolError "disconnected" otherwise).
   *
   * @param {string} topic
   * @param {*} data
   * @param {PublishOptions} [opts]
   * @returns {Promise<number>}
   */
  publish(topic, data, opts = {}) {
    return this._publish("publish", topic, data, opts);
  }

  /** A delta publish (see SpoolClient.deltaPublish), stored like `publish`.
   * @param {string} topic
   * @param {*} data
   * @param {PublishOptions} [opts]
   * @returns {Promise<number>} */
  deltaPublish(topic, data, opts = {}) {
    return this._publish("delta_publish", topic, data, opts);
  }

  async _publish(command, topic, data, opts) {
    refuseUnknown("HAClient.publish", opts, ["correlationId", "expiration", "sowKey"]);
    if (this._closed) throw new SpoolError("closed", "the HA client was closed");
    if (!this._loggedOnOnce) throw new SpoolError("invalid command", "call connectAndLogon() first");
    const store = this.publishStore;
    if (store === null) {
      if (!this._ready) throw new SpoolError("disconnected", "not connected (no publish store to keep the message)");
      const method = command === "publish" ? "publish" : "deltaPublish";
      return this._client[method](topic, data, opts);
    }
    while (store.capacity !== null && store.unpersistedCount() >= store.capacity) {
      // back-pressure: the broker confirms what the store holds (or the client closes)
      await new Promise((resolve, reject) => {
        this._roomWaiters.push({ resolve, reject });
      });
      if (this._closed) throw new SpoolError("closed", "the HA client was closed");
    }
    const entry = {
      seq: store.lastSeq + 1,
      command,
      topic,
      body: toBytes(data).slice(), // the caller may reuse its buffer
      correlationId: opts.correlationId,
      expiration: opts.expiration,
      sowKey: opts.sowKey,
    };
    try {
      await store.store(entry);
    } catch (exc) {
      // refused by the store (StoreWriteError): it is not kept, so it is never sent
      this._roomFreed();
      throw exc;
    }
    // entries stored while disconnected (or replayed meanwhile) are sent by _recover
    if (this._ready && entry.seq > this._sentUpTo) this._send(entry);
    return entry.seq;
  }

  _send(entry) {
    this._sentUpTo = Math.max(this._sentUpTo, entry.seq);
    const method = entry.command === "publish" ? "publish" : "deltaPublish";
    this._client[method](entry.topic, entry.body, {
      seq: entry.seq,
      ackPersisted: true,
      correlationId: entry.correlationId,
      expiration: entry.expiration,
      sowKey: entry.sowKey,
    }).catch((err) => this._onPublishRejected(entry, err));
  }

  _onPublishRejected(entry, err) {
    if (!(err instanceof SpoolError) || CONNECTION_REASONS.has(err.reason)) return; // goes again
    if (err.reason === "txlog full") {
      // refused for now (the broker's log refuses writes): kept, and sent again
      this._exception(new PublishFailedError(entry.seq, entry.topic, err));
      this._refusedForNow(entry.seq);
      return;
    }
    this.publishStore?.remove(entry.seq);
    this._exception(new PublishFailedError(entry.seq, entry.topic, err));
    this._checkFlushes();
  }

  _onPersisted(header) {
    if (header.sub_id !== undefined || header.status === "failure" || typeof header.s !== "number") return;
    if (this.publishStore === null) return;
    const seq = this._confirmed(header.s);
    this._persistedSeq = Math.max(this._persistedSeq, seq);
    if (this._trustPersisted()) this._discarded(seq);
    else this._checkFlushes();
    if (this._resentFrom !== null && seq >= this._resentFrom) {
      this._resentFrom = null; // the resend went through: a fresh schedule next time
      this.delay.reset();
    }
  }

  _onReplicated(header) {
    if (this.publishStore === null || typeof header.s !== "number") return;
    this._discarded(this._confirmed(header.s));
  }

  // -- publishes refused for now (docs/js-client.md "When a broker refuses writes") ------

  /** What an ack saying `seq` is persisted (or replicated) may discard: never a refused
   * publish not sent again, nor anything after it. */
  _confirmed(seq) {
    return this._refusedFrom === null ? seq : Math.min(seq, this._refusedFrom - 1);
  }

  /** The broker refused `seq` for now: keep it, and send the store again from the lowest
   * refused sequence, in order, on this connection, after the delay strategy's wait. */
  _refusedForNow(seq) {
    const store = this.publishStore;
    if (store === null || seq <= store.lastDiscarded) return;
    this._refusedFrom = this._refusedFrom === null ? seq : Math.min(this._refusedFrom, seq);
    if (this._resendTimer !== null || !this._ready) return;
    let wait;
    try {
      wait = this.delay.getConnectWaitDuration(this._lastUri ?? "");
    } catch {
      // retried as long as the strategy allows: the connection ends, and the reconnect
      // loop (with the same strategy) gives up in turn or finds another server
      this._client.close();
      this._onDisconnect({ code: 1000, reason: "txlog full: gave up resending refused publishes" });
      return;
    }
    this._resendTimer = this._timers.setTimeout(() => {
      this._resendTimer = null;
      this._resendRefused();
    }, wait);
  }

  _resendRefused() {
    const from = this._refusedFrom;
    if (from === null || !this._ready || this.publishStore === null) return;
    this._refusedFrom = null;
    this._resentFrom = from;
    for (const entry of this.publishStore.entriesAfter(from - 1)) this._send(entry);
  }

  _stopResend() {
    if (this._resendTimer !== null) this._timers.clearTimeout(this._resendTimer);
    this._resendTimer = null;
    this._refusedFrom = null;
    this._resentFrom = null;
  }

  _discarded(seq) {
    this.publishStore?.discardUpTo(seq);
    this._roomFreed();
  }

  /** The store holds fewer messages: flushes may be done, held publishes may go on. */
  _roomFreed() {
    this._checkFlushes();
    const waiters = this._roomWaiters;
    this._roomWaiters = [];
    for (const w of waiters) w.resolve();
  }

  /** Messages the current broker has not reported persisted (0 without a store). */
  unpersistedCount() {
    return this.publishStore?.countAfter(this._persistedSeq) ?? 0;
  }

  /** Messages the publish store still holds: not persisted yet, or (while failover is
   * unsafe) persisted but not yet on every replication destination. */
  unreplicatedCount() {
    return this.publishStore?.unpersistedCount() ?? 0;
  }

  /**
   * Resolves when everything published so far is persisted by the broker (with
   * `{replicated: true}`: when the publish store is empty, i.e. while failover is unsafe,
   * on every replication destination); without a store, when the broker processed every
   * earlier command (`flush`). Rejects with SpoolError("timeout") after `timeoutMs` (0: no
   * limit), or the give-up error.
   */
  publishFlush(timeoutMs = 0, { replicated = false } = {}) {
    if (this.publishStore === null) return this._client.flush(timeoutMs);
    const count = () => (replicated ? this.unreplicatedCount() : this.unpersistedCount());
    if (count() === 0) return Promise.resolve();
    if (this._closed) return Promise.reject(new SpoolError("closed", "the HA client was closed"));
    return new Promise((resolve, reject) => {
      const waiter = { resolve, reject, timer: null, count };
      if (timeoutMs > 0) {
        waiter.timer = this._timers.setTimeout(() => {
          this._flushWaiters = this._flushWaiters.filter((w) => w !== waiter);
          reject(new SpoolError("timeout",
            `${count()} messages not ${replicated ? "replicated" : "persisted"} after ${timeoutMs} ms`));
        }, timeoutMs);
      }
      this._flushWaiters.push(waiter);
    });
  }

  _checkFlushes() {
    if (this._flushWaiters.length === 0) return;
    const done = this._flushWaiters.filter((w) => w.count() === 0);
    if (done.length === 0) return;
    this._flushWaiters = this._flushWaiters.filter((w) => w.count() !== 0);
    for (const w of done) {
      if (w.timer !== null) this._timers.clearTimeout(w.timer);
      w.resolve();
    }
  }

  _failFlushes(error) {
    const waiters = this._flushWaiters;
    this._flushWaiters = [];
    for (const w of waiters) {
      if (w.timer !== null) this._timers.clearTimeout(w.timer);
      w.reject(error);
    }
    const room = this._roomWaiters;
    this._roomWaiters = [];
    for (const w of room) w.reject(error);
  }

  // -- subscriptions ---------------------------------------------------------------------

  /**
   * Subscribe (options and callback as SpoolClient.subscribe). The subscription is placed
   * again after every reconnect; with a `bookmark` it is a bookmark subscription: with a
   * bookmark store it resumes from the store's resume point under the same sub id, and the
   * messages the application already discarded are dropped if they come again. Pass
   * `bookmark: MOST_RECENT` (with `subId`, the key of its resume point) to start from the
   * store's resume point, or EPOCH when it has none. Messages have `discard()`.
   *
   * Resolves to the sub id once the broker accepted it, or at once when disconnected (it is
   * placed by the reconnect).
   *
   * @param {string} topic
   * @param {{filter?: string, bookmark?: string, options?: string, subId?: string,
   *   onCompleted?: (ack: object) => void, onError?: (error: Error) => void,
   *   onPosition?: (bookmark: string) => void,
   *   onBatch?: (messages: SpoolMessage[]) => void}} [opts]
   * @param {(message: SpoolMessage) => void} [onMessage]
   * @returns {Promise<string>}
   */
  subscribe(topic, opts = {}, onMessage = () => {}) {
    return this._subscribe("subscribe", topic, opts, onMessage);
  }

  /** As SpoolClient.deltaSubscribe, kept across reconnects. */
  deltaSubscribe(topic, opts = {}, onMessage = () => {}) {
    return this._subscribe("delta_subscribe", topic, opts, onMessage);
  }

  /** As SpoolClient.sowAndSubscribe, kept across reconnects (the snapshot comes again). */
  sowAndSubscribe(topic, opts = {}, onMessage = () => {}) {
    return this._subscribe("sow_and_subscribe", topic, opts, onMessage);
  }

  async _subscribe(command, topic, opts, onMessage) {
    refuseUnknown(`HAClient.${SUBSCRIBE_METHODS[command]}`, opts, SUBSCRIBE_OPTIONS);
    if (this._closed) throw new SpoolError("closed", "the HA client was closed");
    if (!this._loggedOnOnce) throw new SpoolError("invalid command", "call connectAndLogon() first");
    if (opts.bookmark === MOST_RECENT) {
      if (this.bookmarkStore === null) {
        throw new SpoolError("invalid bookmark", "MOST_RECENT needs a bookmark store (opts.bookmarkStore)");
      }
      if (opts.subId === undefined) {
        throw new SpoolError("invalid bookmark",
          "MOST_RECENT needs opts.subId: the sub id is the key of the resume point in the bookmark store");
      }
    }
    const subId = opts.subId ?? `ha${++subCounter}-${Date.now().toString(36)}`;
    if (this._manager.get(subId) !== undefined) {
      throw new SpoolError("subid in use", `sub_id ${subId} is already in use on this client`);
    }
    const record = { subId, command, topic, opts: { ...opts }, onMessage, placed: false };
    return this._add(record);
  }

  async _add(record) {
    this._manager.add(record);
    if (!this._ready) return record.subId;
    try {
      await this._place(record, { throwRefusal: true });
    } catch (exc) {
      if (exc instanceof SpoolError && CONNECTION_REASONS.has(exc.reason)) return record.subId; // placed on reconnect
      throw exc;
    }
    return record.subId;
  }

  // -- queues (docs/js-client.md "Queues") ------------------------------------------------

  /**
   * Consume a queue across reconnects. `onMessage(m)` gets each leased message with
   * `m.ack()`, `m.cancel()`, `m.expire()`, `m.reject(reason)`, `m.deliveryCount`, `m.leasePeriodMs` (as
   * SpoolClient.queueSubscribe). After a reconnect the subscription is placed again under
   * the same sub id and the broker delivers again what was leased and not acked (at least
   * once). A message the application acked, expired or rejected is never handed to it
   * again (its last `ackedMemory` are remembered: a redelivery is settled again the same
   * way, unseen; a cancelled one was given back and comes again), and a redelivery of a
   * message it still holds is not handed twice.
   *
   * @param {string} queue
   * @param {object} [opts] `filter`, `subId`, `maxBacklog`, `autoAck` (acked once
   *   onMessage returned or its promise resolved; cancelled if it threw), `ackedMemory`
   * @returns {Promise<string>} the sub id
   */
  queueSubscribe(queue, opts = {}, onMessage = () => {}) {
    refuseUnknown("HAClient.queueSubscribe", opts, ["filter", "subId", "maxBacklog", "autoAck", "ackedMemory"]);
    if (this._closed) return Promise.reject(new SpoolError("closed", "the HA client was closed"));
    if (!this._loggedOnOnce) return Promise.reject(new SpoolError("invalid command", "call connectAndLogon() first"));
    const subId = opts.subId ?? `ha${++subCounter}-${Date.now().toString(36)}`;
    if (this._manager.get(subId) !== undefined) {
      return Promise.reject(new SpoolError("subid in use", `sub_id ${subId} is already in use on this client`));
    }
    const memory = opts.ackedMemory ?? ACKED_MEMORY;
    if (!(Number.isInteger(memory) && memory >= 1)) throw new TypeError("ackedMemory must be a whole number >= 1");
    const record = { subId, command: "queue", topic: queue, opts: { ...opts }, onMessage, placed: false,
      done: new Map(), held: new Set(), reacked: 0, memory };
    return this._add(record);
  }

  /** Redeliveries of messages acked, expired or rejected that a queue subscription settled
   * again the same way without handing them to the application. */
  queueReacked(subId) {
    return this._manager.get(subId)?.reacked ?? 0;
  }

  async _placeQueue(record, throwRefusal) {
    const { subId, opts } = record;
    try {
      await this._client.queueSubscribe(record.topic, { filter: opts.filter, subId, maxBacklog: opts.maxBacklog },
        (m) => this._queueDelivered(record, m));
    } catch (exc) {
      if (exc instanceof SpoolError && CONNECTION_REASONS.has(exc.reason)) throw exc;
      this._refused(record, exc, throwRefusal);
      return;
    }
    record.placed = true;
  }

  _queueDelivered(record, m) {
    const bm = m.bookmark;
    const done = record.done.get(bm);
    if (done !== undefined) {
      record.reacked++;
      m[done.kind](...done.args); // on this connection: its lease is ours now
      return;
    }
    if (record.held.has(bm)) return; // the application holds a copy: its ack settles this lease
    record.held.add(bm);
    const send = { ack: m.ack, cancel: m.cancel, expire: m.expire, reject: m.reject };
    let settled = false;
    for (const kind of ["ack", "cancel", "expire", "reject"]) {
      m[kind] = (...args) => {
        if (settled) throw new SpoolError("invalid message", `queue message ${bm} was already settled`);
        settled = true;
        record.held.delete(bm);
        if (kind !== "cancel") { // settled for good: a redelivery is settled again the same way
          record.done.set(bm, { kind, args });
          if (record.done.size > record.memory) record.done.delete(record.done.keys().next().value);
        }
        // sent on the current connection; none while disconnected (the lease ended with the
        // connection: the redelivery is settled, or handed back, when it comes)
        if (this._ready) send[kind](...args);
        else m.settled = true;
      };
    }
    if (!record.opts.autoAck) {
      record.onMessage(m);
      return;
    }
    Promise.resolve()
      .then(() => record.onMessage(m))
      .then(() => { if (!settled) m.ack(); },
            (err) => { if (!settled) m.cancel(); this._exception(err); });
  }

  /** Place one subscription on the current connection (see DefaultSubscriptionManager).
   * `startAt`: a bookmark the catch-up policy chose (EPOCH or NOW) instead of the resume
   * point.
   * @param {*} record
   * @param {{throwRefusal?: boolean, startAt?: string}} [opts] */
  async _place(record, { throwRefusal = false, startAt = undefined } = {}) {
    if (record.command === "queue") return this._placeQueue(record, throwRefusal);
    const { subId, opts } = record;
    const store = this.bookmarkStore;
    let bookmark = opts.bookmark;
    let options = opts.options;
    let guarded = false;
    if (bookmark !== undefined) {
      const resume = store !== null ? store.resumePoint(subId) : this._client.lastBookmarkOf(subId);
      if (bookmark === MOST_RECENT) bookmark = resume ?? EPOCH;
      else if ((record.placed || record.catchingUp) && resume !== null) bookmark = resume;
      // resuming after what it processed: a server that lacks that point must say so
      // rather than start at NOW (unless the subscription's options decide themselves)
      guarded = resume !== null && bookmark === resume && startAt === undefined &&
        !(options ?? "").includes("bookmark_not_found");
      if (guarded) options = options ? `${options},bookmark_not_found=fail` : "bookmark_not_found=fail";
      if (startAt !== undefined) bookmark = startAt;
    }
    const tracked = store !== null && opts.bookmark !== undefined;
    const deliver = (message) => {
      if (tracked && message.command !== "sow") {
        const bm = message.bookmark;
        if (bm) {
          if (!store.log(subId, bm)) return false; // discarded already, or handed over already
          (message._discards ??= []).push(() => store.discard(subId, bm));
        }
      }
      return true;
    };
    const placed = {
      ...opts,
      subId,
      bookmark,
      options,
      onPosition: (bm) => {
        if (tracked) store.persisted(subId, bm);
        opts.onPosition?.(bm);
      },
      onError: (err) => {
        this._manager.remove(subId);
        if (opts.onError) opts.onError(err);
        else this._exception(err);
      },
      onBatch: opts.onBatch ? (batch) => {
        const kept = batch.filter(deliver);
        if (kept.length > 0) opts.onBatch(kept);
      } : undefined,
    };
    const method = SUBSCRIBE_METHODS[record.command];
    try {
      await this._client[method](record.topic, placed, (message) => {
        if (deliver(message)) record.onMessage(message);
      });
    } catch (exc) {
      if (exc instanceof SpoolError && CONNECTION_REASONS.has(exc.reason)) throw exc;
      if (guarded && exc instanceof SpoolError && exc.reason === "bookmark not found") {
        this._catchUp(record, bookmark);
        return;
      }
      // the broker refused it: it is not placed again
      this._refused(record, exc, throwRefusal);
      return;
    }
    record.placed = true;
    if (record.catchingUp) {
      record.catchingUp = false;
      record.waitedMs = 0;
      this._state(ConnectionState.CAUGHT_UP, { subId });
    }
  }

  _refused(record, exc, throwRefusal) {
    this._manager.remove(record.subId);
    if (record.catchUpTimer) this._timers.clearTimeout(record.catchUpTimer);
    if (throwRefusal) throw exc;
    if (record.opts.onError) record.opts.onError(exc);
    else this._exception(exc);
  }

  // -- catching up after an unsafe failover (docs/js-client.md) -------------------------

  /** The server lacks `record`'s resume point: try again every catchUpRetryMs, until it has
   * it or catchUpTimeoutMs ran out (then the catch-up policy). */
  _catchUp(record, bookmark) {
    record.placed = false;
    if (!record.catchingUp) {
      record.catchingUp = true;
      record.waitedMs = record.waitedMs ?? 0;
      this._state(ConnectionState.CATCHING_UP, { subId: record.subId });
    }
    if (record.catchUpTimer) this._timers.clearTimeout(record.catchUpTimer);
    const expired = record.waitedMs >= this.catchUpTimeoutMs;
    record.catchUpTimer = this._timers.setTimeout(() => {
      record.catchUpTimer = null;
      this._catchUpAttempt(record, bookmark, expired).catch((exc) => this._exception(exc));
    }, expired ? 0 : this.catchUpRetryMs);
  }

  async _catchUpAttempt(record, bookmark, expired) {
    if (this._closed || this._manager.get(record.subId) !== record || !record.catchingUp) return;
    if (!expired) record.waitedMs += this.catchUpRetryMs;
    if (!this._ready) return; // the next connection places it again (the wait goes on there)
    let startAt;
    if (record.waitedMs >= this.catchUpTimeoutMs) {
      const policy = this.catchUpPolicy;
      const error = new CatchUpTimeoutError(record.subId, this._lastUri, bookmark, record.waitedMs, policy);
      this._exception(error);
      if (policy === "fail") {
        record.catchingUp = false;
        this._refused(record, error, false);
        return;
      }
      startAt = policy === "epoch" ? EPOCH : NOW;
    }
    try {
      await this._place(record, { startAt });
    } catch (exc) {
      if (!(exc instanceof SpoolError && CONNECTION_REASONS.has(exc.reason))) throw exc;
    }
  }

  /** End a subscription (also while disconnected: it is then not placed again). */
  async unsubscribe(subId) {
    this._manager.remove(subId);
    if (this._ready) await this._client.unsubscribe(subId);
    else this._client._subs.delete(subId);
  }

  /** The application is done with a message (same as `message.discard()`). */
  discard(message) {
    message.discard();
  }

  /** Ids of the subscriptions kept across reconnects. */
  get subscriptions() {
    return this._manager.records().map((r) => r.subId);
  }

  // -- queries and plain commands --------------------------------------------------------

  /** As SpoolClient.sow (needs a connection). */
  sow(topic, opts = {}) {
    this._requireReady();
    return this._client.sow(topic, opts);
  }

  /** As SpoolClient.sowDelete (needs a connection). */
  sowDelete(topic, opts = {}) {
    this._requireReady();
    return this._client.sowDelete(topic, opts);
  }

  /** As SpoolClient.flush (needs a connection). */
  flush(timeoutMs = 0) {
    this._requireReady();
    return this._client.flush(timeoutMs);
  }

  _requireReady() {
    if (!this._ready) throw new SpoolError("disconnected", "not connected (the reconnect handler is running)");
  }
}
