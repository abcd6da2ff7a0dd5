// Spool browser HA client, part 2 of 3: publish stores and bookmark stores.
//
// A publish store keeps every message the HA client published until the broker confirms it
// (a conflated persisted ack, or the logon ack's `s`; while failing over from the broker is
// unsafe, a replicated ack), so that a reconnect can publish the rest again in order. It
// holds at most `capacity` messages (default DEFAULT_CAPACITY, null: no bound): the HA
// client's publish() waits for room (docs/js-client.md "Failover safety"). A bookmark store keeps, per subscription, which
// messages were received and which the application discarded (finished with), so that a
// resubscription starts right after the last message of the discarded prefix and what was
// received already is dropped when it comes again (by exact membership, late messages
// below a publisher's highest included: SubscriptionBookmarks).
//
// Each kind has a memory store and an IndexedDB store (the IndexedDB one survives a page
// reload or a crash of the tab). An IndexedDB store has one owner at a time: it holds a
// Web Locks API lock named after the store while open, and a second tab opening the same
// store is refused with StoreLockedError. The state machines are plain classes with no
// I/O (PublishLedger, SubscriptionBookmarks); the IndexedDB stores add a write-behind
// journal (one transaction per task) and recovery; the IndexedDB / Web Locks plumbing is
// in static/spool-ha-idb.js. See docs/js-client.md.

import { SpoolError } from "./spool-client.js";
import {
  StoreWriteError,
  SyncTail,
  WriteBehind,
  openDatabase,
  request,
  requireBrowserStorage,
  takeLock,
} from "./spool-ha-idb.js";

export { StoreLockedError, StoreUnavailableError, StoreWriteError } from "./spool-ha-idb.js";

/** Bookmark: replay from the start of the log. */
export const EPOCH = "0";
/** Bookmark: live messages only. */
export const NOW = "0|1|";
/** Bookmark: resume from the bookmark store's resume point (EPOCH when it has none). */
export const MOST_RECENT = "recent";

/** Messages a publish store holds at most unless told otherwise. */
export const DEFAULT_CAPACITY = 1_000_000;

function checkCapacity(what, capacity) {
  if (capacity !== null && !(Number.isInteger(capacity) && capacity >= 1)) {
    throw new TypeError(`${what}: capacity must be a whole number >= 1 or null, not ${capacity}`);
  }
  return capacity;
}

/** `PUBHASH|PUBSEQ|` -> {pub, seq}, or null for anything else (EPOCH, a moment, ...). */
export function parseBookmark(bookmark) {
  if (typeof bookmark !== "string") return null;
  const parts = bookmark.split("|");
  if (parts.length !== 3 || parts[2] !== "" || !/^\d+$/.test(parts[0]) || !/^\d+$/.test(parts[1])) return null;
  return { pub: parts[0], seq: Number(parts[1]) };
}

// ---------------------------------------------------------------------------------------
// Publish stores
// ---------------------------------------------------------------------------------------

/**
 * One message a publish store holds: the HA client numbered it `seq` (its sequence number
 * under the client name: it is sent, and sent again after a reconnect, under that number
 * only), `command` "publish" or "delta_publish", `body` the bytes sent.
 * @typedef {object} PublishStoreEntry
 * @property {number} seq
 * @property {"publish" | "delta_publish"} command
 * @property {string} topic
 * @property {Uint8Array} body
 * @property {string} [correlationId]
 * @property {number} [expiration]
 * @property {string} [sowKey]
 */

/**
 * The publish store's state (no I/O): the messages not yet persisted, in sequence order,
 * the highest sequence number ever stored and the highest one discarded.
 */
export class PublishLedger {
  constructor() {
    this._entries = [];
    this.lastSeq = 0;
    this.lastDiscarded = 0;
  }

  add(entry) {
    if (!Number.isInteger(entry.seq) || entry.seq <= this.lastSeq) {
      throw new RangeError(`publish store: sequence ${entry.seq} is not above the last one stored (${this.lastSeq})`);
    }
    this._entries.push(entry);
    this.lastSeq = entry.seq;
  }

  /** Drop every entry up to `seq` (persisted); returns how many were dropped. */
  discardUpTo(seq) {
    let n = 0;
    while (n < this._entries.length && this._entries[n].seq <= seq) n++;
    if (n > 0) this._entries.splice(0, n);
    if (seq > this.lastDiscarded) this.lastDiscarded = seq;
    if (seq > this.lastSeq) this.lastSeq = seq;
    return n;
  }

  /** Drop one entry (the broker refused it). */
  remove(seq) {
    const i = this._entries.findIndex((e) => e.seq === seq);
    if (i >= 0) this._entries.splice(i, 1);
    return i >= 0;
  }

  /** Entries with a sequence above `seq`, in order. */
  entriesAfter(seq) {
    return this._entries.slice(this._firstAbove(seq));
  }

  /** How many entries have a sequence above `seq`. */
  countAfter(seq) {
    return this._entries.length - this._firstAbove(seq);
  }

  _firstAbove(seq) {
    let lo = 0;
    let hi = this._entries.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (this._entries[mid].seq <= seq) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }

  get count() {
    return this._entries.length;
  }
}

/** A publish store in memory: survives reconnects, not a page reload. */
export class MemoryPublishStore {
  /**
   * @param {object} [opts]
   * @param {number|null} [opts.capacity] the most messages it holds (null: no bound)
   */
  constructor(opts = {}) {
    for (const key of Object.keys(opts)) {
      if (key !== "capacity") throw new TypeError(`MemoryPublishStore: unknown option '${key}'`);
    }
    this._ledger = new PublishLedger();
    this.capacity = checkCapacity("MemoryPublishStore", opts.capacity === undefined ? DEFAULT_CAPACITY : opts.capacity);
  }

  /** Make the store ready (the HA client calls it in connectAndLogon; a persistent store
   * loads what it held). Calling it again does nothing. */
  async open() {}

  /** The highest sequence number stored or confirmed so far: the HA client numbers the
   * next publish `lastSeq + 1`. */
  get lastSeq() {
    return this._ledger.lastSeq;
  }

  /** The highest sequence number discarded as confirmed by the broker. */
  get lastDiscarded() {
    return this._ledger.lastDiscarded;
  }

  /**
   * Copies of the messages the store holds, in sequence order: those the broker has not
   * confirmed yet, which the HA client sends (again, after a reconnect or at the first
   * logon after a reload) under these sequence numbers unless the broker confirms them
   * first. After `open()` of a persistent store these are what an earlier page stored,
   * including messages whose `publish` never resolved (a reload came between the store's
   * write and the resolve): an application that keeps its own record of what it published
   * reconciles it with them (HAClient's `onRestore`) rather than publishing them again.
   * @returns {PublishStoreEntry[]}
   */
  pending() {
    return this._ledger.entriesAfter(0).map((e) => ({ ...e, body: e.body.slice() }));
  }

  /**
   * Keep `entry` (the HA client calls it); resolves once it is stored (durably, for a
   * persistent store).
   * @param {PublishStoreEntry} entry
   * @returns {Promise<void>}
   */
  store(entry) {
    this._ledger.add(entry);
    return Promise.resolve();
  }

  /** Drop every message up to `seq` (confirmed by the broker); returns how many.
   * @param {number} seq
   * @returns {number} */
  discardUpTo(seq) {
    return this._ledger.discardUpTo(seq);
  }

  /** Drop message `seq` (the broker refused it); whether the store held it.
   * @param {number} seq
   * @returns {boolean} */
  remove(seq) {
    return this._ledger.remove(seq);
  }

  /** The messages above `seq` the HA client may send now, in order (the store's own
   * objects: do not change them).
   * @param {number} seq
   * @returns {PublishStoreEntry[]} */
  entriesAfter(seq) {
    return this._ledger.entriesAfter(seq);
  }

  /** How many messages the store holds.
   * @returns {number} */
  unpersistedCount() {
    return this._ledger.count;
  }

  /** How many messages above `seq` the store holds.
   * @param {number} seq
   * @returns {number} */
  countAfter(seq) {
    return this._ledger.countAfter(seq);
  }

  /** Release the store (a persistent one waits for its writes to commit). */
  async close() {}
}

/**
 * A publish store in IndexedDB (database `spool-publish-store/NAME`): the messages not yet
 * persisted survive a page reload or crash. `open()` (the HA client calls it) takes the
 * store's Web Lock, or fails with StoreLockedError.
 */
export class IndexedDBPublishStore extends MemoryPublishStore {
  /**
   * @param {string} name the store's name (one per publishing client name, usually that name)
   * @param {object} [opts]
   * @param {function(Error): void} [opts.onError] an IndexedDB write failed (default: console.error)
   * @param {number|null} [opts.capacity] the most messages it holds (null: no bound)
   */
  constructor(name, opts = {}) {
    if (typeof name !== "string" || name === "") throw new TypeError("IndexedDBPublishStore needs a name");
    for (const key of Object.keys(opts)) {
      if (key !== "onError" && key !== "capacity") throw new TypeError(`IndexedDBPublishStore: unknown option '${key}'`);
    }
    super({ capacity: opts.capacity });
    this.name = name;
    this.onError = opts.onError ?? ((exc) => console.error("IndexedDBPublishStore:", exc));
    this._db = null;
    this._release = null;
    this._writer = null;
    /** the highest sequence whose write committed: entries above it are not sent yet */
    this._written = 0;
  }

  get dbName() {
    return `spool-publish-store/${this.name}`;
  }

  async open() {
    if (this._db !== null) return;
    requireBrowserStorage("IndexedDBPublishStore");
    this._release = await takeLock("publish store", this.name, `spool:${this.dbName}`);
    try {
      this._db = await openDatabase(this.dbName, { messages: { keyPath: "seq" }, meta: {} });
      const tx = this._db.transaction(["messages", "meta"], "readonly");
      const [entries, meta] = await Promise.all([
        request(tx.objectStore("messages").getAll()),
        request(tx.objectStore("meta").get("state")),
      ]);
      const ledger = new PublishLedger();
      ledger.lastDiscarded = meta?.lastDiscarded ?? 0;
      ledger.lastSeq = meta?.lastSeq ?? ledger.lastDiscarded;
      for (const e of entries) {
        if (e.seq > ledger.lastDiscarded) {
          ledger._entries.push(e);
          if (e.seq > ledger.lastSeq) ledger.lastSeq = e.seq;
        }
      }
      this._ledger = ledger;
      this._written = ledger.lastSeq;
      this._writer = new WriteBehind(this._db, ["messages", "meta"], (exc) => this.onError(exc));
    } catch (exc) {
      this._db?.close();
      this._db = null;
      this._release();
      this._release = null;
      throw exc;
    }
  }

  /** The open store's writer (SpoolError "closed" when it is not open). */
  _requireOpen() {
    if (this._writer === null) throw new SpoolError("closed", `publish store '${this.name}' is not open`);
    return this._writer;
  }

  _saveMeta(tx) {
    tx.objectStore("meta").put({ lastSeq: this._ledger.lastSeq, lastDiscarded: this._ledger.lastDiscarded }, "state");
  }

  /**
   * Keep `entry`; resolves once its write committed. A failed write refuses it: it leaves
   * the store (it is never sent) and the promise rejects with StoreWriteError.
   */
  store(entry) {
    const writer = this._requireOpen();
    this._ledger.add(entry);
    return writer.write((tx) => {
      tx.objectStore("messages").put(entry);
      this._saveMeta(tx);
    }).then(
      () => {
        if (entry.seq > this._written) this._written = entry.seq;
      },
      (exc) => {
        this._ledger.remove(entry.seq);
        throw new StoreWriteError("publish store", this.name, exc);
      },
    );
  }

  /** Entries above `seq` whose write committed, in order (a message is in IndexedDB
   * before it is on the wire). */
  entriesAfter(seq) {
    const entries = this._ledger.entriesAfter(seq);
    const unwritten = entries.findIndex((e) => e.seq > this._written);
    return unwritten < 0 ? entries : entries.slice(0, unwritten);
  }

  discardUpTo(seq) {
    const writer = this._requireOpen();
    const n = this._ledger.discardUpTo(seq);
    writer.write((tx) => {
      tx.objectStore("messages").delete(IDBKeyRange.upperBound(seq));
      this._saveMeta(tx);
    }).catch(() => {}); // reported through onError
    return n;
  }

  remove(seq) {
    const writer = this._requireOpen();
    const removed = this._ledger.remove(seq);
    if (removed) writer.write((tx) => tx.objectStore("messages").delete(seq)).catch(() => {});
    return removed;
  }

  /** Wait for every write to commit, close the database and release the lock. */
  async close() {
    if (this._db === null || this._writer === null) return;
    await this._writer.settled();
    this._db.close();
    this._db = null;
    this._writer = null;
    this._release?.();
    this._release = null;
  }
}

// ---------------------------------------------------------------------------------------
// Bookmark stores
// ---------------------------------------------------------------------------------------

/**
 * Gap intervals a bookmark store keeps per publisher and subscription by default (option
 * `maxGaps`). A gap stays open for each message of a publisher still to come below its
 * highest received: a late record after a failover, or a delayed message (protocol.md
 * "Delayed delivery") while later ones of its publisher are handed over before it; a
 * publisher with thousands pending holds thousands. Each costs some tens of bytes (a few
 * MB for a publisher at the bound). The bound only guards against unbounded growth: past
 * it the oldest gaps are forgotten and their sequences count as received, so a message
 * still to come in one is dropped as a duplicate.
 */
export const MAX_GAPS = 65536;

/** `maxGaps` checked: a positive integer (default MAX_GAPS). */
function checkMaxGaps(owner, maxGaps) {
  if (!Number.isInteger(maxGaps) || maxGaps < 1) {
    throw new TypeError(`${owner}: maxGaps must be a positive integer, not ${maxGaps}`);
  }
  return maxGaps;
}

/** Verdicts of SubscriptionBookmarks.log(). */
const DUPLICATE = 0;
const NEW = 1;
const REDELIVERED = 2;
const UNTRACKED = 3;

/** The index of the last gap whose low end is at or below `seq` (-1: none). */
function gapAtOrBelow(gaps, seq) {
  let lo = 0;
  let hi = gaps.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (gaps[mid][0] <= seq) lo = mid + 1;
    else hi = mid;
  }
  return lo - 1;
}

/**
 * One subscription's bookmark state (no I/O), the same rules as the Python client's
 * ResumeState (server/client/ha/resume.py, docs/ha-client.md). Each message is *received*
 * (handed to the application) and later *discarded* (the application is done with it).
 *
 * - `prefix`: the recovery point: the last message, in arrival order, such that it and
 *   every message before it are discarded (or a durable position the broker reported while
 *   nothing was outstanding). A resubscription starts right after it.
 * - `contig`: per publisher, the highest sequence such that every received message of
 *   that publisher up to it (in arrival order) is discarded.
 * - `high` and `gaps`: per publisher, which sequences were received: the highest, and the
 *   sorted `[low, high]` intervals below it never received (those skipped when the next
 *   message jumped, and those below the first one), at most `maxGaps`. Duplicates are found
 *   by **exact membership**, as in the broker's log: a publisher's sequences need not grow
 *   in a log (after its publisher failed over, an instance can hold its 101 before its
 *   100, which came late by another route), so a sequence at or below the highest is new
 *   when it lies in a gap.
 * - `records`: the messages after the prefix, in arrival order, discarded or not.
 *
 * A record recovered from a journal (a page reload) is delivered again once, since the
 * application did not finish with it; within one session a message already handed over is
 * not handed over twice.
 */
export class SubscriptionBookmarks {
  /**
   * @param {object} [opts]
   * @param {number} [opts.maxGaps] gap intervals kept per publisher (default MAX_GAPS);
   *   past it the oldest are forgotten
   */
  constructor(opts = {}) {
    this.maxGaps = checkMaxGaps("SubscriptionBookmarks", opts.maxGaps ?? MAX_GAPS);
    this.prefix = null;
    this.contig = new Map();
    this.high = new Map();
    this.gaps = new Map();
    this.records = [];
    this._byBookmark = new Map();
    /** per publisher, its records after its discarded prefix, in arrival order */
    this._byPub = new Map();
  }

  isDiscarded(bookmark) {
    const record = this._byBookmark.get(bookmark);
    if (record !== undefined) return record.discarded;
    const parsed = parseBookmark(bookmark);
    return parsed !== null && this._seen(parsed.pub, parsed.seq); // received, out of the records: discarded
  }

  /**
   * A message arrived: 0 when it is a duplicate to drop, 1 when it is new, 2 when it is a
   * message recovered from a journal and not discarded (handed over again, once), 3 when
   * its bookmark is not a log bookmark (handed over, nothing to track).
   */
  log(bookmark) {
    const known = this._byBookmark.get(bookmark);
    if (known !== undefined) {
      if (known.discarded || !known.redeliver) return DUPLICATE;
      known.redeliver = false;
      return REDELIVERED;
    }
    const parsed = parseBookmark(bookmark);
    if (parsed === null) return UNTRACKED;
    if (this._seen(parsed.pub, parsed.seq)) return DUPLICATE;
    this._note(parsed.pub, parsed.seq);
    this._add(bookmark, parsed, false, false);
    return NEW;
  }

  /** Replay of a journal's `r` entry (idempotent: what is known already is skipped). */
  recover(bookmark) {
    if (this._byBookmark.has(bookmark)) return;
    const parsed = parseBookmark(bookmark);
    if (parsed === null || this._seen(parsed.pub, parsed.seq)) return;
    this._note(parsed.pub, parsed.seq);
    this._add(bookmark, parsed, true, false);
  }

  _add(bookmark, parsed, redeliver, discarded) {
    const record = { bookmark, pub: parsed.pub, seq: parsed.seq, discarded, redeliver };
    this.records.push(record);
    this._byBookmark.set(bookmark, record);
    let queue = this._byPub.get(parsed.pub);
    if (queue === undefined) this._byPub.set(parsed.pub, (queue = []));
    queue.push(record);
  }

  /** Whether `pub`'s `seq` was received before (it need not be in the records any more). */
  _seen(pub, seq) {
    const high = this.high.get(pub);
    if (high === undefined || seq > high) return false;
    const gaps = this.gaps.get(pub);
    if (gaps === undefined || gaps.length === 0) return true;
    const i = gapAtOrBelow(gaps, seq);
    return i < 0 || gaps[i][1] < seq;
  }

  /** `pub`'s `seq` (not received before) is received now. */
  _note(pub, seq) {
    const high = this.high.get(pub);
    if (high === undefined || seq > high) {
      const below = high ?? 0; // a first message: everything below it is a gap
      if (seq > below + 1) {
        let gaps = this.gaps.get(pub);
        if (gaps === undefined) this.gaps.set(pub, (gaps = []));
        gaps.push([below + 1, seq - 1]);
        if (gaps.length > this.maxGaps) gaps.shift();
      }
      this.high.set(pub, seq);
      return;
    }
    const gaps = this.gaps.get(pub); // _seen said seq lies in a gap
    const i = gapAtOrBelow(gaps, seq);
    const [low, up] = gaps[i];
    if (low === up) gaps.splice(i, 1);
    else if (seq === low) gaps[i][0] = seq + 1;
    else if (seq === up) gaps[i][1] = seq - 1;
    else {
      gaps[i][1] = seq - 1;
      gaps.splice(i + 1, 0, [seq + 1, up]);
      if (gaps.length > this.maxGaps) gaps.shift();
    }
  }

  /** The application finished with a message; true when the state changed. */
  discard(bookmark) {
    const record = this._byBookmark.get(bookmark);
    if (record === undefined || record.discarded) return false;
    record.discarded = true;
    const queue = this._byPub.get(record.pub);
    if (queue[0] === record) this._foldPublisher(record.pub, queue);
    this._advance();
    return true;
  }

  /** Fold the discarded head of `pub`'s records into its contiguous point. */
  _foldPublisher(pub, queue) {
    let contig = this.contig.get(pub) ?? -1;
    let n = 0;
    while (n < queue.length && queue[n].discarded) {
      if (queue[n].seq > contig) contig = queue[n].seq;
      n++;
    }
    if (n === 0) return;
    queue.splice(0, n);
    this.contig.set(pub, contig);
    if (queue.length === 0) this._byPub.delete(pub);
  }

  /** A durable position from the broker: the resume point when nothing is outstanding. */
  persisted(bookmark) {
    if (this.records.length > 0 || bookmark === this.prefix || parseBookmark(bookmark) === null) return false;
    this.prefix = bookmark;
    return true;
  }

  _advance() {
    let n = 0;
    while (n < this.records.length && this.records[n].discarded) {
      this.prefix = this.records[n].bookmark;
      this._byBookmark.delete(this.prefix);
      n++;
    }
    if (n > 0) this.records.splice(0, n);
  }

  /**
   * Where a resubscription starts: null when nothing was discarded yet; else a bookmark
   * list of the resume point and, per publisher, its contiguous point. The broker starts
   * after the OLDEST of them found in its log: on this instance that is at or before the
   * resume point (what comes again and was received is dropped here), and on a replica
   * that interleaves publishers differently nothing is skipped.
   */
  resumeBookmark() {
    if (this.prefix === null) return null;
    const list = [this.prefix];
    for (const [pub, seq] of this.contig) {
      const bookmark = `${pub}|${seq}|`;
      if (bookmark !== this.prefix) list.push(bookmark);
    }
    return list.join(",");
  }

  /**
   * Restore a checkpoint (see `checkpoint()`). One written before gaps were kept
   * (`{prefix, pubSeqs}`, its records as `r`/`d` entries after it) loads as it was read
   * then: every sequence of a publisher up to its `pubSeqs` counts as received, and the
   * records replayed after it make the gaps above. A publisher with more gaps than
   * `maxGaps` keeps the newest `maxGaps` (the oldest forgotten, as when they open).
   */
  restore(checkpoint) {
    this.records = [];
    this._byBookmark.clear();
    this._byPub.clear();
    this.gaps = new Map();
    this.prefix = checkpoint.prefix;
    if (checkpoint.high === undefined) {
      this.contig = new Map(Object.entries(checkpoint.pubSeqs).map(([p, s]) => [p, Number(s)]));
      this.high = new Map(this.contig);
      return;
    }
    this.contig = new Map(checkpoint.contig);
    this.high = new Map(checkpoint.high);
    this.gaps = new Map(
      checkpoint.gaps.map(([pub, gaps]) => [pub, gaps.slice(-this.maxGaps).map(([lo, up]) => [lo, up])]),
    );
    for (const [bookmark, discarded] of checkpoint.records) {
      const parsed = parseBookmark(bookmark);
      if (parsed !== null) this._add(bookmark, parsed, !discarded, discarded);
    }
    // a publisher's discarded head was folded into its contiguous point when written
    for (const [pub, queue] of [...this._byPub]) this._foldPublisher(pub, queue);
  }

  /**
   * The whole state, for a compacted journal: `prefix`, `contig`, `high`, `gaps` (as
   * `[publisher, value]` pairs, in their order) and `records` (`[bookmark, discarded]`),
   * plus `pubSeqs` (the contiguous points as an object) for a page still served the
   * script that wrote only `{prefix, pubSeqs}`.
   */
  checkpoint() {
    return {
      prefix: this.prefix,
      contig: [...this.contig],
      high: [...this.high],
      gaps: [...this.gaps].filter(([, gaps]) => gaps.length > 0),
      records: this.records.map((r) => [r.bookmark, r.discarded]),
      pubSeqs: Object.fromEntries(this.contig),
    };
  }
}

/** A bookmark store in memory: survives reconnects, not a page reload. */
export class MemoryBookmarkStore {
  /**
   * @param {object} [opts]
   * @param {number} [opts.maxGaps] gap intervals kept per publisher and subscription
   *   (default MAX_GAPS): the most messages of one publisher that can be on their way out
   *   of its order at once (delayed ones, late records) and still be handed over once
   */
  constructor(opts = {}) {
    for (const key of Object.keys(opts)) {
      if (key !== "maxGaps") throw new TypeError(`${new.target.name}: unknown option '${key}'`);
    }
    this._maxGaps = checkMaxGaps(new.target.name, opts.maxGaps ?? MAX_GAPS);
    /** subId -> SubscriptionBookmarks */
    this._subs = new Map();
  }

  async open() {}

  _sub(subId) {
    let sub = this._subs.get(subId);
    if (sub === undefined) {
      sub = new SubscriptionBookmarks({ maxGaps: this._maxGaps });
      this._subs.set(subId, sub);
    }
    return sub;
  }

  /** Record a message's arrival; false when it is a duplicate to drop. */
  log(subId, bookmark) {
    const verdict = this._sub(subId).log(bookmark);
    if (verdict === NEW) this._journal(subId, "r", bookmark);
    return verdict !== DUPLICATE;
  }

  isDiscarded(subId, bookmark) {
    return this._subs.get(subId)?.isDiscarded(bookmark) ?? false;
  }

  /** The application is done with this message (see also `message.discard()`). */
  discard(subId, bookmark) {
    const sub = this._subs.get(subId);
    if (sub !== undefined && sub.discard(bookmark)) this._journal(subId, "d", bookmark);
  }

  /** A durable position reported by the broker for the subscription. */
  persisted(subId, bookmark) {
    const sub = this._subs.get(subId);
    if (sub !== undefined && sub.persisted(bookmark)) this._journal(subId, "p", bookmark);
  }

  /** Where the subscription resumes (a bookmark list, see SubscriptionBookmarks), or null
   * when nothing was discarded yet. */
  resumePoint(subId) {
    return this._subs.get(subId)?.resumeBookmark() ?? null;
  }

  /** The MOST_RECENT bookmark of a subscription: its resume point, or EPOCH. */
  getMostRecent(subId) {
    return this.resumePoint(subId) ?? EPOCH;
  }

  /** Messages received and not yet discarded, for one subscription. */
  outstanding(subId) {
    return (this._subs.get(subId)?.records ?? []).filter((r) => !r.discarded).map((r) => r.bookmark);
  }

  /** Forget a subscription (or all). */
  purge(subId) {
    if (subId === undefined) this._subs.clear();
    else this._subs.delete(subId);
  }

  /** Compact the store (the memory store is always compact). */
  async prune() {}

  /** Hook of persistent stores: one state change to write. */
  _journal(_subId, _kind, _bookmark) {}

  async close() {}
}

/** Journal entries past this many times the live records (plus a floor) trigger a prune. */
const PRUNE_RATIO = 4;
const PRUNE_FLOOR = 2000;

/** Milliseconds between two attempts to rewrite a bookmark store after a failed write. */
const REWRITE_RETRY_MS = 1000;

/**
 * A bookmark store in IndexedDB (database `spool-bookmark-store/NAME`): a journal of
 * received (`r`), discarded (`d`) and persisted (`p`) entries and per-subscription
 * checkpoints (`c`), replayed at `open()` and compacted by `prune()` (automatically when
 * the journal grows to several times the live state). `open()` takes the store's Web Lock,
 * or fails with StoreLockedError.
 *
 * Writes of one task go into one transaction, committed right after the task; until it
 * commits, the entries are also kept synchronously in localStorage (see SyncTail), so a
 * discard survives a reload or a crash of the tab as soon as `discard()` returns.
 *
 * A failed transaction lost its entries (the journal would hold what came after them
 * without them, and a resume point could pass a message whose arrival it never recorded):
 * from then on no entry goes into the journal. The state is kept in memory and rewritten
 * whole, as a prune does, every `retryMs` until a rewrite commits; then the journal goes
 * on. A reload before that finds the journal as it was before the failure, followed by the
 * localStorage tail: at worst messages come again, never a gap.
 */
export class IndexedDBBookmarkStore extends MemoryBookmarkStore {
  /**
   * @param {string} name
   * @param {object} [opts]
   * @param {function(Error): void} [opts.onError] an IndexedDB write failed: a StoreWriteError,
   *   once until a write commits again (default: console.error)
   * @param {number} [opts.retryMs] between two rewrites after a failed write (default 1000)
   * @param {number} [opts.maxGaps] as for MemoryBookmarkStore (a checkpoint with more gaps
   *   of a publisher loads its newest `maxGaps`)
   */
  constructor(name, opts = {}) {
    super(opts.maxGaps === undefined ? {} : { maxGaps: opts.maxGaps });
    if (typeof name !== "string" || name === "") throw new TypeError("IndexedDBBookmarkStore needs a name");
    for (const key of Object.keys(opts)) {
      if (key !== "onError" && key !== "retryMs" && key !== "maxGaps") {
        throw new TypeError(`IndexedDBBookmarkStore: unknown option '${key}'`);
      }
    }
    const retryMs = opts.retryMs ?? REWRITE_RETRY_MS;
    if (!Number.isFinite(retryMs) || retryMs <= 0) {
      throw new TypeError(`IndexedDBBookmarkStore: retryMs must be a positive number of milliseconds, not ${retryMs}`);
    }
    this.name = name;
    this.onError = opts.onError ?? ((exc) => console.error("IndexedDBBookmarkStore:", exc));
    this._retryMs = retryMs;
    /** a write failed and no rewrite of the whole state has committed since: why
     * @type {import("./spool-ha-idb.js").StoreWriteError | null} */
    this._failure = null;
    /** set while no entry may go into the journal (from a failure to a rewrite) */
    this._stale = false;
    this._retryTimer = null;
    this._db = null;
    this._release = null;
    this._writer = null;
    this._tail = null;
    this._journalSize = 0;
    this._tailFull = false;
    this._pruning = null;
    /** bumped by each prune when it writes the state: older entries not yet written are in it */
    this._generation = 0;
  }

  get dbName() {
    return `spool-bookmark-store/${this.name}`;
  }

  async open() {
    if (this._db !== null) return;
    requireBrowserStorage("IndexedDBBookmarkStore");
    this._release = await takeLock("bookmark store", this.name, `spool:${this.dbName}`);
    try {
      this._db = await openDatabase(this.dbName, { journal: { autoIncrement: true } });
      const entries = await request(this._db.transaction("journal", "readonly").objectStore("journal").getAll());
      this._subs = new Map();
      this._tail = new SyncTail(`${this.dbName}/tail/`);
      const tail = this._tail.drain();
      for (const e of [...entries, ...tail]) {
        const sub = this._sub(e.s);
        if (e.k === "c") sub.restore(e.c);
        else if (e.k === "r") sub.recover(e.b);
        else if (e.k === "d") sub.discard(e.b);
        else if (e.k === "p") sub.persisted(e.b);
      }
      this._journalSize = entries.length;
      this._failure = null;
      this._stale = false;
      this._writer = new WriteBehind(this._db, ["journal"], (exc) => this._writeFailed(exc));
      // entries that were only in the tail: into the journal now (they may repeat
      // committed ones when the tab died between a commit and its tail cleanup: replaying
      // an entry twice changes nothing)
      for (const e of tail) this._journal(e.s, e.k, e.b);
    } catch (exc) {
      this._db?.close();
      this._db = null;
      this._release();
      this._release = null;
      throw exc;
    }
  }

  /** The open store's writer and tail (SpoolError "closed" when it is not open). */
  _requireOpen() {
    if (this._writer === null || this._tail === null) {
      throw new SpoolError("closed", `bookmark store '${this.name}' is not open`);
    }
    return { writer: this._writer, tail: this._tail };
  }

  _journal(subId, kind, bookmark) {
    const { writer, tail } = this._requireOpen();
    this._journalSize++;
    const entry = { s: subId, k: kind, b: bookmark };
    const tailId = tail.append(entry, (exc) => this._tailRefused(exc));
    if (tailId >= 0) this._tailFull = false;
    const generation = this._generation;
    let kept = false;
    writer.write((tx) => {
      if (this._stale) return; // after a failed write only the rewrite goes in (it holds this)
      kept = true;
      // a prune run earlier in this transaction wrote the state this entry belongs to
      if (generation === this._generation) tx.objectStore("journal").add(entry);
    }).then(() => { if (kept) tail.remove(tailId); }, () => {});
    let live = 0;
    for (const sub of this._subs.values()) live += sub.records.length + 1;
    if (!this._stale && this._pruning === null && this._journalSize > PRUNE_FLOOR + PRUNE_RATIO * live) {
      this._pruning = this.prune().finally(() => {
        this._pruning = null;
      });
    }
  }

  /** localStorage refused a tail entry: reported once until it takes one again. */
  _tailRefused(exc) {
    if (this._tailFull) return;
    this._tailFull = true;
    this.onError(new StoreWriteError("bookmark store's localStorage tail", this.name, exc));
  }

  /** A transaction failed: keep the journal closed to entries until a rewrite commits. */
  _writeFailed(exc) {
    this._stale = true;
    if (this._failure === null) {
      this._failure = new StoreWriteError("bookmark store", this.name, exc);
      this.onError(this._failure);
    }
    if (this._retryTimer === null && this._db !== null) {
      this._retryTimer = setTimeout(() => {
        this._retryTimer = null;
        if (this._db !== null && this._stale) this.prune().catch(() => {}); // a failure retries
      }, this._retryMs);
    }
  }

  /**
   * Resolves when every discard so far is in IndexedDB. After a failed write, rewrites
   * the whole state now; rejects with the StoreWriteError when that fails too.
   */
  async flush() {
    if (this._writer === null) return;
    await this._writer.settled();
    if (this._stale) {
      try {
        await this.prune();
      } catch {
        throw this._failure;
      }
    }
  }

  purge(subId) {
    super.purge(subId);
    if (this._db !== null) this.prune().catch((exc) => this.onError(exc));
  }

  /**
   * Rewrite the journal as the live state: one checkpoint per subscription (its whole
   * state, records and gaps included). One transaction: a crash keeps the old journal or the
   * new one, never a mix.
   */
  async prune() {
    const { writer, tail } = this._requireOpen();
    let size = 0;
    let upto = 0;
    await writer.write((tx) => {
      const journal = tx.objectStore("journal");
      journal.clear();
      this._generation++;
      this._stale = false; // entries after this one go in again (a failure sets it back)
      upto = tail.nextId; // the state written holds every entry appended so far
      for (const [subId, sub] of this._subs) {
        journal.add({ s: subId, k: "c", c: sub.checkpoint() });
        size++;
      }
    });
    this._journalSize = size;
    this._failure = null;
    tail.removeBefore(upto);
  }

  async close() {
    if (this._db === null || this._writer === null) return;
    if (this._retryTimer !== null) {
      clearTimeout(this._retryTimer);
      this._retryTimer = null;
    }
    await this._writer.settled();
    if (this._stale) await this.prune().catch(() => {}); // a last rewrite; the tail has the rest
    if (this._retryTimer !== null) clearTimeout(this._retryTimer);
    this._retryTimer = null;
    this._db.close();
    this._db = null;
    this._writer = null;
    this._release?.();
    this._release = null;
  }
}
