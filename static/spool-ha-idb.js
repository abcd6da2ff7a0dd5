// Spool browser HA client: the IndexedDB and Web Locks plumbing of the persistent stores
// (static/spool-ha-stores.js): one owner per store (a Web Lock held while open), batched
// write-behind transactions, and a synchronous localStorage tail for journal entries not
// yet committed. No store logic here.

import { SpoolError } from "./spool-client.js";

/** An IndexedDB store is already open in another tab (or by another client of this one). */
export class StoreLockedError extends SpoolError {
  constructor(kind, name) {
    super("store locked", `the ${kind} '${name}' is in use by another tab or client of this origin`);
    this.name = "StoreLockedError";
    this.store = name;
  }
}

/**
 * A store's IndexedDB write failed (the origin's storage quota is used up, the transaction
 * was aborted, ...): what it was to keep was refused. `cause` is the browser's error.
 */
export class StoreWriteError extends SpoolError {
  constructor(kind, name, cause) {
    const why = cause?.name === "QuotaExceededError" ? "QuotaExceededError (the origin's storage quota is used up)"
      : `${cause?.name ?? "Error"}${cause?.message ? `: ${cause.message}` : ""}`;
    super("store write failed", `the ${kind} '${name}' could not write: ${why}`);
    this.name = "StoreWriteError";
    this.store = name;
    this.cause = cause;
  }
}

/** The browser cannot host an IndexedDB store (no IndexedDB, or no Web Locks API). */
export class StoreUnavailableError extends SpoolError {
  constructor(detail) {
    super("store unavailable", detail);
    this.name = "StoreUnavailableError";
  }
}

// ---------------------------------------------------------------------------------------
// IndexedDB and Web Locks plumbing
// ---------------------------------------------------------------------------------------

export function requireBrowserStorage(kind) {
  if (typeof indexedDB === "undefined") throw new StoreUnavailableError(`${kind}: this context has no IndexedDB`);
  if (typeof navigator === "undefined" || !navigator.locks) {
    throw new StoreUnavailableError(
      `${kind}: the Web Locks API is unavailable (it needs a secure context: https:// or localhost), ` +
        "so the store could not be kept to one owner");
  }
}

/**
 * Take the Web Lock `name` without waiting; resolves to a function that releases it, or
 * rejects with StoreLockedError when another holder has it.
 */
export async function takeLock(kind, storeName, lockName) {
  let release;
  const held = new Promise((resolve) => {
    release = resolve;
  });
  const acquired = await new Promise((resolve, reject) => {
    navigator.locks
      .request(lockName, { ifAvailable: true }, (lock) => {
        if (lock === null) {
          resolve(false);
          return undefined;
        }
        resolve(true);
        return held; // the lock is held until release() settles this
      })
      .catch(reject);
  });
  if (!acquired) throw new StoreLockedError(kind, storeName);
  return () => release();
}

export function request(req) {
  return new Promise((resolve, reject) => {
    req.onsuccess = () => resolve(req.result);
    req.onerror = () => reject(req.error);
  });
}

function transactionDone(tx) {
  return /** @type {Promise<void>} */ (new Promise((resolve, reject) => {
    tx.oncomplete = () => resolve();
    tx.onerror = () => reject(tx.error);
    tx.onabort = () => reject(tx.error ?? new DOMException("transaction aborted", "AbortError"));
  }));
}

export function openDatabase(dbName, stores) {
  const req = indexedDB.open(dbName, 1);
  req.onupgradeneeded = () => {
    for (const [store, options] of Object.entries(stores)) {
      if (!req.result.objectStoreNames.contains(store)) req.result.createObjectStore(store, options);
    }
  };
  return request(req);
}

/**
 * Batches writes into IndexedDB transactions, one transaction at a time: the writes made
 * while one commits go into the next (a publish loop of a thousand messages is one or two
 * commits). `write(fn)` adds `fn(tx)` to the batch and resolves when the batch's
 * transaction has committed. As no transaction starts before the one before it has
 * settled, `onError` hears a failed one before any write made after it can commit: a store
 * can then keep what followed out of the database until it has rewritten its whole state.
 */
export class WriteBehind {
  constructor(db, storeNames, onError) {
    this._db = db;
    this._storeNames = storeNames;
    this._onError = onError;
    this._ops = [];
    this._waiters = [];
    this._scheduled = false;
    /** the last transaction's outcome (always resolves) */
    this._last = Promise.resolve();
  }

  write(op) {
    this._ops.push(op);
    const done = new Promise((resolve, reject) => {
      this._waiters.push({ resolve, reject });
    });
    if (!this._scheduled) {
      this._scheduled = true;
      this._last.then(() => this._commit());
    }
    return done;
  }

  _commit() {
    this._scheduled = false;
    const ops = this._ops;
    const waiters = this._waiters;
    this._ops = [];
    this._waiters = [];
    let tx;
    try {
      tx = this._db.transaction(this._storeNames, "readwrite");
      for (const op of ops) op(tx);
    } catch (exc) {
      for (const w of waiters) w.reject(exc);
      this._onError(exc);
      return;
    }
    this._last = transactionDone(tx).then(
      () => {
        for (const w of waiters) w.resolve();
      },
      (exc) => {
        for (const w of waiters) w.reject(exc);
        this._onError(exc);
      },
    );
  }

  /** Resolves when everything written so far has committed (or failed). */
  async settled() {
    for (;;) {
      const last = this._last;
      await last;
      if (!this._scheduled && this._last === last) return;
      await Promise.resolve(); // the next batch starts from the same settlement
    }
  }
}

/**
 * The journal entries not yet committed to IndexedDB, kept synchronously in localStorage
 * (one key per entry) until their transaction commits.
 *
 * An IndexedDB write completes a few milliseconds after `discard()` returns; a page that
 * is reloaded or crashes in between would lose the discard and get the message again.
 * localStorage writes are synchronous for the page (they survive a reload or a crash of
 * the tab as soon as `setItem` returns), so a discard is as durable as anything the
 * application recorded synchronously before calling it. Without localStorage (a worker)
 * the tail is off, and a discard of the last milliseconds before a crash may be undone
 * (the message comes again; never a gap); the same holds for the entries localStorage
 * refuses when its quota is used up.
 */
export class SyncTail {
  constructor(prefix) {
    this._prefix = prefix;
    this._storage = typeof localStorage === "undefined" ? null : localStorage;
    this._next = 0;
    /** no entry before this id is kept any more (removeBefore) */
    this._first = 0;
  }

  /** The entries a previous owner left, in order; their keys are removed. */
  drain() {
    if (this._storage === null) return [];
    /** @type {Array<[number, string]>} */
    const found = [];
    for (let i = 0; i < this._storage.length; i++) {
      const key = this._storage.key(i);
      if (key !== null && key.startsWith(this._prefix)) found.push([Number(key.slice(this._prefix.length)), key]);
    }
    found.sort((a, b) => a[0] - b[0]);
    const entries = [];
    for (const [, key] of found) {
      try {
        entries.push(JSON.parse(this._storage.getItem(key) ?? "null"));
      } catch {
        // a torn value cannot happen with localStorage; skip anything unreadable
      }
      this._storage.removeItem(key);
    }
    return entries;
  }

  /**
   * Keep `entry` until `remove(id)`; returns its id, or -1 when localStorage refused it
   * (its quota is used up): the entry is then durable when its IndexedDB transaction
   * commits, as without localStorage. `onRefused(error)` hears each refusal.
   */
  /**
   * @param {*} entry
   * @param {(error: unknown) => void} [onRefused]
   */
  append(entry, onRefused = () => {}) {
    if (this._storage === null) return -1;
    const id = this._next++;
    try {
      this._storage.setItem(this._prefix + id, JSON.stringify(entry));
    } catch (exc) {
      onRefused(exc);
      return -1;
    }
    return id;
  }

  remove(id) {
    if (id >= 0 && this._storage !== null) this._storage.removeItem(this._prefix + id);
  }

  /** The id the next entry gets: entries before it were appended already. */
  get nextId() {
    return this._next;
  }

  /** Remove every entry appended before `id` (their state is committed another way). */
  removeBefore(id) {
    if (this._storage === null) return;
    for (let i = this._first; i < id; i++) this._storage.removeItem(this._prefix + i);
    this._first = Math.max(this._first, id);
  }
}
