// Spool client: the message delivered to the application (a lazy view over the frame when
// splitFrame in static/spool-codec.js read it without building a header object).
//
// static/spool-client.js is the entry module that re-exports the public API.

import { SpoolError } from "./spool-error.js";

const decoder = new TextDecoder("utf-8");

/**
 * The text of `bytes[start:stop]`, which splitFrame checked holds only ASCII (no decoding
 * needed). static/spool-codec.js reads topics and `sids` with it too.
 */
export function ascii(bytes, start, stop) {
  return String.fromCharCode.apply(null, bytes.subarray(start, stop));
}

/** `sids` values already split (a client has a few subscriptions; bounded). */
const SIDS_CACHE = new Map();

/** One message from the broker (a delivered publish, sow record, oof, ...). */
export class SpoolMessage {
  constructor(header, body) {
    this._header = header;
    this._body = body;
    this._text = null;
    this._frame = null;
    /** set by the HA client: marks the message discarded in its bookmark store
     * @type {Array<() => void> | null} */
    this._discards = null;
    // a delivery read by splitFrame (fromFrame): offsets into `_frame` (-1: absent)
    /** @type {string | undefined} */
    this._topic = undefined;
    /** @type {string | undefined} */
    this._sids = undefined;
    this._bmS = -1;
    this._bmE = -1;
    this._tsS = -1;
    this._tsE = -1;
    this._xS = -1;
    this._xE = -1;
    this._bodyStart = 0;
    this._bodyLen = 0;
  }

  /**
   * A delivery read by `splitFrame`: its fields stay offsets into the frame until used
   * (the header object, the bookmark string and the body view are made on first access).
   */
  static fromFrame(frame, topic, sids, bmS, bmE, tsS, tsE, xS, xE, bodyStart, bodyLen) {
    const m = new SpoolMessage(null, null);
    m._frame = frame;
    m._topic = topic;
    m._sids = sids;
    m._bmS = bmS;
    m._bmE = bmE;
    m._tsS = tsS;
    m._tsE = tsE;
    m._xS = xS;
    m._xE = xE;
    m._bodyStart = bodyStart;
    m._bodyLen = bodyLen;
    return m;
  }

  /** The header with short keys, as received. */
  get header() {
    if (this._header === null) {
      const f = this._frame;
      const h = { c: "publish", t: this._topic, sids: this._sids };
      if (this._bmS >= 0) h.bm = ascii(f, this._bmS, this._bmE);
      if (this._tsS >= 0) h.ts = ascii(f, this._tsS, this._tsE);
      if (this._xS >= 0) h.x = ascii(f, this._xS, this._xE);
      h.l = this._bodyLen;
      this._header = h;
    }
    return this._header;
  }

  /** The body bytes (a view into the frame; copy it to keep it past the callback). */
  get body() {
    if (this._body === null) {
      this._body = this._frame.subarray(this._bodyStart, this._bodyStart + this._bodyLen);
    }
    return this._body;
  }

  /** Command name: "publish", "sow", "oof", "group_begin", "group_end". */
  get command() {
    return this._header === null ? "publish" : this.header.c;
  }

  /** @returns {string} */
  get topic() {
    return this._header === null ? this._topic ?? "" : this.header.t;
  }

  /** The bookmark `PUBHASH|PUBSEQ|` (messages of recorded topics only).
   * @returns {string | undefined} */
  get bookmark() {
    if (this._header !== null) return this._header.bm;
    return this._bmS >= 0 ? ascii(this._frame, this._bmS, this._bmE) : undefined;
  }

  /** Server time the message was recorded (only with the `timestamp` option). */
  get timestamp() {
    return this.header.ts;
  }

  get correlationId() {
    return this.header.x;
  }

  get sowKey() {
    return this.header.k;
  }

  /** Why an `oof` message left the subscription's focus: "match", "deleted", "expired",
   * "entitlement" (undefined on other messages). */
  get reason() {
    return this._header === null ? undefined : this._header.reason;
  }

  /** The subscription ids this message matched (split once per distinct `sids`). */
  get subIds() {
    const sids = this._header === null ? this._sids : (this.header.sids ?? this.header.sub_id);
    if (typeof sids !== "string" || !sids) return [];
    let ids = SIDS_CACHE.get(sids);
    if (ids === undefined) {
      ids = Object.freeze(sids.split(","));
      if (SIDS_CACHE.size < 1024) SIDS_CACHE.set(sids, ids);
    }
    return ids;
  }

  /** The body as text (UTF-8, decoded once). */
  get data() {
    if (this._text === null) this._text = decoder.decode(this.body);
    return this._text;
  }

  /** The body parsed as JSON. */
  json() {
    return JSON.parse(this.data);
  }

  /**
   * Tell the bookmark store the application is done with this message: a resubscription
   * will not deliver it again (static/spool-ha.js; subscriptions with a bookmark store).
   */
  discard() {
    if (this._discards === null) {
      throw new SpoolError("invalid command",
        "this message has no bookmark store to be discarded from (subscribe through HAClient with a bookmarkStore)");
    }
    for (const discard of this._discards) discard();
  }
}
