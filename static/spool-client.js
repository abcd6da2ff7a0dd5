// Spool client: the protocol of docs/protocol.md over a WebSocket, as an ES module (browsers, Node, Deno).
//
// The module has three layers, each usable alone:
//
//   1. Codec (no I/O): encodeMessage / encodeFrame / parseFrame turn headers + bodies into
//      frame bytes and back. A frame holds one or more messages; a message is a compact JSON
//      header object immediately followed by its body, `l` giving the body length in BYTES.
//   2. Transport: WebSocketTransport moves whole frames (Uint8Array) over one WebSocket and
//      reports its closing. It knows nothing about commands.
//   3. Session: SpoolClient logs on, numbers commands (`cid`), matches acks to the promises
//      that wait for them, routes delivered messages to subscriptions by `sids`, keeps
//      heartbeats and tracks publish sequence numbers and subscription bookmarks.
//
// The session talks to its transport only through `transportFactory(url)`, and keeps for
// every subscription the last bookmark delivered, so the HA layer (a server list with
// reconnect backoff, resubscribe from the last bookmark) can be added around it without
// touching the codec.
//
// See docs/js-client.md for the API.

const encoder = new TextEncoder();
const decoder = new TextDecoder("utf-8");

/** Version string sent on logon. */
export const CLIENT_VERSION = "spool-js/1";

/** Long header keys accepted on input (docs/protocol.md), mapped to the short keys used here. */
const LONG_KEYS = Object.freeze({
  command: "c",
  command_id: "cid",
  topic: "t",
  query_id: "qid",
  bookmark: "bm",
  options: "o",
  filter: "f",
  ack_type: "a",
  seq: "s",
  timestamp: "ts",
  sow_key: "k",
  correlation_id: "x",
  msg_len: "l",
  lease_period: "lp",
  expiration: "e",
  heartbeat: "hb",
});

const BRACE_OPEN = 0x7b; // {
const BRACE_CLOSE = 0x7d; // }
const QUOTE = 0x22; // "
const BACKSLASH = 0x5c; // \

/** The largest header the parser looks at, as on the server (a header is ~100 bytes). */
export const MAX_HEADER_BYTES = 64 * 1024;

// ---------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------

/**
 * A failure reported by the broker (a failure ack) or met by the client.
 *
 * `reason` is one of the exact strings of docs/protocol.md ("bad filter", "invalid bookmark",
 * ...) for broker failures, or one of the client-side reasons "disconnected" (the
 * connection ended before the answer came), "timeout" (no answer in time), "closed" (the
 * client was closed by its owner) and "invalid message" (the broker sent bytes that do not
 * parse).
 */
export class SpoolError extends Error {
  /**
   * @param {string} reason the failure reason string
   * @param {string} [detail] a human-readable explanation, when there is one
   * @param {object} [header] the failure ack's header, when the broker sent one
   */
  constructor(reason, detail = "", header = null) {
    super(detail ? `${reason}: ${detail}` : reason);
    this.name = "SpoolError";
    this.reason = reason;
    this.detail = detail;
    this.header = header;
  }
}

// ---------------------------------------------------------------------------------------
// Codec (sans-I/O)
// ---------------------------------------------------------------------------------------

/** Body bytes of a value: strings are UTF-8, byte arrays pass through, anything else JSON. */
export function toBytes(data) {
  if (data === undefined || data === null) return new Uint8Array(0);
  if (data instanceof Uint8Array) return data;
  if (data instanceof ArrayBuffer) return new Uint8Array(data);
  if (ArrayBuffer.isView(data)) {
    return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  }
  if (typeof data === "string") return encoder.encode(data);
  return encoder.encode(JSON.stringify(data));
}

/**
 * Encode one message: the header (with `l` set to the body's byte length) then the body.
 *
 * @param {object} header header fields; `undefined` and `null` values are left out
 * @param {*} [body] string, bytes or a JSON-serialisable value
 * @returns {Uint8Array}
 */
export function encodeMessage(header, body) {
  const bytes = toBytes(body);
  // Object.fromEntries defines own properties, so even a "__proto__" key stays a key
  const clean = Object.fromEntries(
    Object.entries(header).filter(([key, value]) => value !== undefined && value !== null && key !== "l"),
  );
  clean.l = bytes.length;
  const head = encoder.encode(JSON.stringify(clean));
  const out = new Uint8Array(head.length + bytes.length);
  out.set(head, 0);
  out.set(bytes, head.length);
  return out;
}

/** Concatenate encoded messages into one frame. */
export function joinFrame(parts) {
  if (parts.length === 1) return parts[0];
  let size = 0;
  for (const p of parts) size += p.length;
  const out = new Uint8Array(size);
  let pos = 0;
  for (const p of parts) {
    out.set(p, pos);
    pos += p.length;
  }
  return out;
}

/**
 * Encode several messages into one frame (every message carries `l`).
 *
 * @param {Array<[object, *]>} messages `[header, body]` pairs
 * @returns {Uint8Array}
 */
export function encodeFrame(messages) {
  return joinFrame(messages.map(([h, b]) => encodeMessage(h, b)));
}

/**
 * Index just past the `}` that closes the JSON object starting at `start`, or -1.
 *
 * Scans bytes, not characters: every structural character of JSON is ASCII and every byte
 * of a multi-byte UTF-8 sequence is >= 0x80, so a byte scan cannot be fooled by the text
 * inside strings. Braces inside strings (and escaped quotes) are skipped; nested objects
 * are counted, so the scan stops at the end of the TOP-LEVEL object.
 */
export function findHeaderEnd(bytes, start = 0) {
  const limit = Math.min(bytes.length, start + MAX_HEADER_BYTES);
  if (start >= limit || bytes[start] !== BRACE_OPEN) return -1;
  let depth = 0;
  let inString = false;
  for (let i = start; i < limit; i++) {
    const b = bytes[i];
    if (inString) {
      if (b === BACKSLASH) i++;
      else if (b === QUOTE) inString = false;
    } else if (b === QUOTE) {
      inString = true;
    } else if (b === BRACE_OPEN) {
      depth++;
    } else if (b === BRACE_CLOSE) {
      depth--;
      if (depth === 0) return i + 1;
    }
  }
  return -1;
}

function normalizeHeader(header) {
  const keys = Object.keys(header);
  if (!keys.some((key) => Object.hasOwn(LONG_KEYS, key))) return header;
  const entries = [];
  for (const key of keys) {
    const short = Object.hasOwn(LONG_KEYS, key) ? LONG_KEYS[key] : key;
    // both forms given: the short (canonical) one wins
    if (short !== key && Object.hasOwn(header, short)) continue;
    entries.push([short, header[key]]);
  }
  return Object.fromEntries(entries);
}

/**
 * Split a frame into messages, one header at a time (the definition; `parseFrame` gives
 * the same result faster and falls back to this whenever it is not sure).
 *
 * Readable twin of `parseFrame` and `splitFrame`: tests/browser/test_js_codec.py checks
 * them against each other.
 *
 * Never throws: a malformed message ends parsing and is reported in `error`; the messages
 * before it are returned (a stream parser would have delivered them already).
 *
 * @param {Uint8Array} bytes the frame
 * @returns {{messages: Array<{header: object, body: Uint8Array}>, error: string|null}}
 */
export function parseFrameOneByOne(bytes) {
  const messages = [];
  const end = bytes.length;
  if (end === 0) return { messages, error: "empty frame" };
  let pos = 0;
  while (pos < end) {
    const one = parseOne(bytes, pos, end);
    if (one.error !== undefined) return { messages, error: one.error };
    messages.push({ header: one.header, body: one.body });
    pos = one.next;
  }
  return { messages, error: null };
}

/** The message at `pos`: `{header, body, next}`, or `{error}` (the definition). */
function parseOne(bytes, pos, end) {
  const hend = findHeaderEnd(bytes, pos);
  if (hend < 0) {
    const what = bytes[pos] === BRACE_OPEN ? "unterminated JSON header" : "expected a JSON header";
    return { error: `${what} at byte ${pos}` };
  }
  let header;
  try {
    header = JSON.parse(decoder.decode(bytes.subarray(pos, hend)));
  } catch (exc) {
    return { error: `header is not JSON: ${exc instanceof Error ? exc.message : exc}` };
  }
  if (header === null || typeof header !== "object" || Array.isArray(header)) {
    return { error: "header is not a JSON object" };
  }
  header = normalizeHeader(header);
  const length = header.l;
  if (length === undefined || length === null) {
    return { header, body: bytes.subarray(hend), next: end };
  }
  if (!Number.isInteger(length) || length < 0) {
    return { error: "'l' must be a non-negative integer" };
  }
  if (hend + length > end) {
    return { error: `'l' is ${length} but only ${end - hend} body bytes follow` };
  }
  return { header, body: bytes.subarray(hend, hend + length), next: hend + length };
}

const COLON = 0x3a; // :
const COMMA = 0x2c; // ,
const LETTER_L = 0x6c; // l
const DIGIT_0 = 0x30;
const DIGIT_9 = 0x39;
const BRACKET_OPEN = 0x5b; // [
const BRACKET_CLOSE = 0x5d; // ]

/**
 * Where the header at `start` ends, and its `l` when the header holds it as `"l":DIGITS`
 * at the top level; one pass over the bytes, no allocation. `length` is -1 when no such
 * `l` was seen (no `l`, or a form this scan does not read: the caller then checks).
 */
function scanHeader(bytes, start, out) {
  const limit = Math.min(bytes.length, start + MAX_HEADER_BYTES);
  out.end = -1;
  out.length = -1;
  if (start >= limit || bytes[start] !== BRACE_OPEN) return;
  let depth = 0;
  let inString = false;
  for (let i = start; i < limit; i++) {
    const b = bytes[i];
    if (inString) {
      if (b === BACKSLASH) i++;
      else if (b === QUOTE) inString = false;
    } else if (b === QUOTE) {
      // a top-level key "l" followed by ':' and digits
      if (depth === 1 && bytes[i + 1] === LETTER_L && bytes[i + 2] === QUOTE &&
          bytes[i + 3] === COLON && (bytes[i - 1] === BRACE_OPEN || bytes[i - 1] === COMMA)) {
        let j = i + 4;
        let n = 0;
        let digits = 0;
        while (j < limit && bytes[j] >= DIGIT_0 && bytes[j] <= DIGIT_9 && digits < 15) {
          n = n * 10 + (bytes[j] - DIGIT_0);
          j++;
          digits++;
        }
        if (digits > 0) out.length = n;
        i = j - 1;
        continue;
      }
      inString = true;
    } else if (b === BRACE_OPEN) {
      depth++;
    } else if (b === BRACE_CLOSE) {
      depth--;
      if (depth === 0) {
        out.end = i + 1;
        return;
      }
    }
  }
}

const scratch = { end: -1, length: -1 };

/**
 * Split a frame into messages.
 *
 * Never throws: a malformed message ends parsing and is reported in `error`; the messages
 * before it are returned (a stream parser would have delivered them already).
 *
 * The headers of a frame are found with one byte scan each (which also reads `l`), copied
 * into one JSON array and decoded with ONE TextDecoder pass and ONE JSON.parse for the
 * whole frame: a replay frame of a thousand deliveries is two native calls, not two
 * thousand. Whenever the result could differ from the one-header-at-a-time definition
 * (`parseFrameOneByOne`: a malformed header, an `l` this scan does not read, long keys),
 * that definition runs instead, so both always agree.
 *
 * Fast twin of `parseFrameOneByOne`: tests/browser/test_js_codec.py checks them against
 * each other (the same messages, header keys in the same order, and the same error).
 *
 * @param {Uint8Array} bytes the frame
 * @returns {{messages: Array<{header: object, body: Uint8Array}>, error: string|null}}
 */
export function parseFrame(bytes) {
  const end = bytes.length;
  if (end === 0) return { messages: [], error: "empty frame" };
  const starts = [];
  const ends = [];
  const lengths = [];
  let total = 1;
  let pos = 0;
  while (pos < end) {
    scanHeader(bytes, pos, scratch);
    const hend = scratch.end;
    if (hend < 0) return parseFrameOneByOne(bytes);
    const length = scratch.length;
    starts.push(pos);
    ends.push(hend);
    lengths.push(length);
    total += hend - pos + 1;
    if (length < 0) {
      pos = end; // no readable `l`: the body runs to the end (checked after the parse)
    } else {
      if (hend + length > end) return parseFrameOneByOne(bytes);
      pos = hend + length;
    }
  }
  const joined = new Uint8Array(total);
  let at = 0;
  joined[at++] = BRACKET_OPEN;
  for (let k = 0; k < starts.length; k++) {
    if (k > 0) joined[at++] = COMMA;
    joined.set(bytes.subarray(starts[k], ends[k]), at);
    at += ends[k] - starts[k];
  }
  joined[at] = BRACKET_CLOSE;
  let headers;
  try {
    headers = JSON.parse(decoder.decode(joined));
  } catch {
    return parseFrameOneByOne(bytes);
  }
  if (!Array.isArray(headers) || headers.length !== starts.length) return parseFrameOneByOne(bytes);
  const messages = new Array(starts.length);
  for (let k = 0; k < starts.length; k++) {
    const header = headers[k];
    if (header === null || typeof header !== "object" || Array.isArray(header)) {
      return parseFrameOneByOne(bytes);
    }
    const length = lengths[k];
    const l = header.l;
    if (length < 0 ? l !== undefined && l !== null : l !== length) return parseFrameOneByOne(bytes);
    if (length < 0 && k !== starts.length - 1) return parseFrameOneByOne(bytes);
    for (const key in header) {
      if (Object.hasOwn(LONG_KEYS, key)) return parseFrameOneByOne(bytes);
    }
    const hend = ends[k];
    messages[k] = { header, body: length < 0 ? bytes.subarray(hend) : bytes.subarray(hend, hend + length) };
  }
  return { messages, error: null };
}

const PREFIX_PUBLISH = encoder.encode('{"c":"publish","t":"');
const KEY_SIDS = encoder.encode(',"sids":"');
const KEY_BM = encoder.encode(',"bm":"');
const KEY_TS = encoder.encode(',"ts":"');
const KEY_X = encoder.encode(',"x":"');
const KEY_L = encoder.encode(',"l":');

/** `i + lit.length` when `bytes` holds `lit` at `i`, else -1. */
function expect(bytes, i, end, lit) {
  if (i < 0 || end - i < lit.length) return -1;
  for (let k = 0; k < lit.length; k++) if (bytes[i + k] !== lit[k]) return -1;
  return i + lit.length;
}

/** Index of the quote closing a plain printable-ASCII string (no escape) from `i`, or -1. */
function plainStringEnd(bytes, i, end) {
  for (; i < end; i++) {
    const b = bytes[i];
    if (b === QUOTE) return i;
    if (b < 0x20 || b >= 0x80 || b === BACKSLASH) return -1;
  }
  return -1;
}

function sameBytes(bytes, a, b, n) {
  for (let k = 0; k < n; k++) if (bytes[a + k] !== bytes[b + k]) return false;
  return true;
}

function ascii(bytes, start, stop) {
  return String.fromCharCode.apply(null, bytes.subarray(start, stop));
}

/**
 * Split a frame from the broker for the session: a delivery in the broker's own header
 * layout (`{"c":"publish","t":T,"sids":S[,"bm":B][,"ts":TS][,"x":X],"l":N}` with plain
 * ASCII strings) becomes a lazy `SpoolMessage` read straight from the bytes (no string,
 * header object or body view allocated until asked for; the topic and `sids` strings are
 * shared by a frame's messages); any other message is `{header, body}` as
 * `parseFrameOneByOne` gives it, and so is the error. Fast twin of `parseFrameOneByOne`:
 * tests/browser/test_js_codec.py checks them against each other (every message's header
 * and body, lazy or not, and the error are exactly the definition's).
 *
 * @param {Uint8Array} bytes the frame
 * @returns {{items: Array<SpoolMessage|{header: object, body: Uint8Array}>, error: string|null}}
 */
export function splitFrame(bytes) {
  const items = [];
  const end = bytes.length;
  if (end === 0) return { items, error: "empty frame" };
  let pos = 0;
  let topic = null;
  let topicAt = -1;
  let topicLen = -1;
  let sids = null;
  let sidsAt = -1;
  let sidsLen = -1;
  while (pos < end) {
    let message = null;
    const i = expect(bytes, pos, end, PREFIX_PUBLISH);
    if (i >= 0) {
      const limit = Math.min(end, pos + MAX_HEADER_BYTES);
      const tEnd = plainStringEnd(bytes, i, limit);
      const sStart = tEnd < 0 ? -1 : expect(bytes, tEnd + 1, limit, KEY_SIDS);
      const sEnd = sStart < 0 ? -1 : plainStringEnd(bytes, sStart, limit);
      if (sEnd >= 0) {
        if (tEnd - i !== topicLen || !sameBytes(bytes, topicAt, i, topicLen)) {
          topic = ascii(bytes, i, tEnd);
          topicAt = i;
          topicLen = tEnd - i;
        }
        if (sEnd - sStart !== sidsLen || !sameBytes(bytes, sidsAt, sStart, sidsLen)) {
          sids = ascii(bytes, sStart, sEnd);
          sidsAt = sStart;
          sidsLen = sEnd - sStart;
        }
        let at = sEnd + 1;
        let bmS = -1, bmE = -1, tsS = -1, tsE = -1, xS = -1, xE = -1;
        let j = expect(bytes, at, limit, KEY_BM);
        if (j >= 0) { bmS = j; bmE = plainStringEnd(bytes, j, limit); at = bmE < 0 ? -1 : bmE + 1; }
        j = expect(bytes, at, limit, KEY_TS);
        if (j >= 0) { tsS = j; tsE = plainStringEnd(bytes, j, limit); at = tsE < 0 ? -1 : tsE + 1; }
        j = expect(bytes, at, limit, KEY_X);
        if (j >= 0) { xS = j; xE = plainStringEnd(bytes, j, limit); at = xE < 0 ? -1 : xE + 1; }
        j = expect(bytes, at, limit, KEY_L);
        if (j >= 0 && j < limit && !(bytes[j] === DIGIT_0 && bytes[j + 1] >= DIGIT_0 && bytes[j + 1] <= DIGIT_9)) {
          let n = 0;
          let digits = 0;
          while (j < limit && bytes[j] >= DIGIT_0 && bytes[j] <= DIGIT_9 && digits < 15) {
            n = n * 10 + (bytes[j] - DIGIT_0);
            j++;
            digits++;
          }
          if (digits > 0 && bytes[j] === BRACE_CLOSE && j + 1 + n <= end) {
            message = SpoolMessage.fromFrame(bytes, topic, sids, bmS, bmE, tsS, tsE, xS, xE, j + 1, n);
            pos = j + 1 + n;
          }
        }
      }
    }
    if (message === null) {
      const one = parseOne(bytes, pos, end);
      if (one.error !== undefined) return { items, error: one.error };
      items.push({ header: one.header, body: one.body });
      pos = one.next;
    } else {
      items.push(message);
    }
  }
  return { items, error: null };
}

// ---------------------------------------------------------------------------------------
// Messages delivered to the application
// ---------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------
// Transport
// ---------------------------------------------------------------------------------------

/**
 * What the session needs of a transport (WebSocketTransport, or one passed through
 * `transportFactory`).
 * @typedef {object} Transport
 * @property {(timeoutMs: number) => Promise<void>} open
 * @property {(frame: Uint8Array) => void} send
 * @property {(code?: number, reason?: string) => void} close
 * @property {boolean} isOpen
 * @property {number} bufferedAmount bytes handed to the socket and not yet sent
 * @property {(frame: Uint8Array) => void} onFrame set by the session
 * @property {(info: {code: number, reason: string, wasClean: boolean}) => void} onClose set by the session
 */

/**
 * A WebSocket class: the browser's (and Node 22's, Deno's) global `WebSocket`, or one with
 * the same interface, such as the default export of the `ws` package on Node 20.
 * @typedef {new (url: string) => any} WebSocketClass
 */

/** WebSocket.OPEN (the same in every implementation). */
const OPEN = 1;

/** The global WebSocket class, or null where the runtime has none (Node before 22). */
function globalWebSocket() {
  return typeof globalThis.WebSocket === "function" ? globalThis.WebSocket : null;
}

/**
 * The WebSocket class a client uses: `given`, else the global one; a TypeError naming the
 * fix where there is neither (Node 20 has no global WebSocket).
 * @param {string} what the class whose options lack it
 * @param {WebSocketClass | undefined} given
 * @returns {WebSocketClass}
 */
function resolveWebSocket(what, given) {
  if (given !== undefined && given !== null) {
    if (typeof given !== "function") throw new TypeError(`${what}: the WebSocket option must be a WebSocket class`);
    return given;
  }
  const found = globalWebSocket();
  if (found === null) {
    throw new TypeError(
      `${what}: this runtime has no global WebSocket (Node before 22): install the ws package and pass ` +
        "its class, e.g. import WebSocket from \"ws\"; new SpoolClient(url, { WebSocket })");
  }
  return found;
}

/**
 * Whole frames over one WebSocket (the global WebSocket, or the class given).
 *
 * Callbacks: `onFrame(Uint8Array)` for every frame received, `onClose({code, reason,
 * wasClean})` once when the socket is gone (whoever closed it).
 */
export class WebSocketTransport {
  /**
   * @param {string} url
   * @param {WebSocketClass} [WebSocketImpl] default: the global WebSocket
   */
  constructor(url, WebSocketImpl) {
    this.url = url;
    this._WebSocket = resolveWebSocket("WebSocketTransport", WebSocketImpl);
    /** @type {(frame: Uint8Array) => void} */
    this.onFrame = () => {};
    /** @type {(info: {code: number, reason: string, wasClean: boolean}) => void} */
    this.onClose = () => {};
    /** @type {WebSocket | null} */
    this._ws = null;
    this._closed = false;
  }

  /** Open the socket; resolves when it is open, rejects with SpoolError if it cannot. */
  open(timeoutMs = 10000) {
    return /** @type {Promise<void>} */ (new Promise((resolve, reject) => {
      let settled = false;
      /** @type {WebSocket} */
      let ws;
      try {
        ws = new this._WebSocket(this.url);
      } catch (exc) {
        reject(new SpoolError("disconnected", `cannot open ${this.url}: ${exc instanceof Error ? exc.message : exc}`));
        return;
      }
      ws.binaryType = "arraybuffer";
      this._ws = ws;
      const timer = setTimeout(() => {
        if (settled) return;
        settled = true;
        ws.close();
        reject(new SpoolError("timeout", `no connection to ${this.url} in ${timeoutMs} ms`));
      }, timeoutMs);
      ws.onopen = () => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        resolve();
      };
      ws.onmessage = (event) => {
        const data = event.data;
        this.onFrame(typeof data === "string" ? encoder.encode(data) : new Uint8Array(data));
      };
      ws.onclose = (event) => {
        clearTimeout(timer);
        this._closed = true;
        if (!settled) {
          settled = true;
          reject(new SpoolError("disconnected",
            `connection to ${this.url} failed (code ${event.code}${event.reason ? `, ${event.reason}` : ""})`));
          return;
        }
        this.onClose({ code: event.code, reason: event.reason, wasClean: event.wasClean });
      };
      // an error is always followed by close; close carries the information
      ws.onerror = () => {};
    }));
  }

  get isOpen() {
    return this._ws !== null && this._ws.readyState === OPEN;
  }

  /** Bytes handed to the socket and not yet sent. */
  get bufferedAmount() {
    return this._ws === null ? 0 : this._ws.bufferedAmount;
  }

  send(frame) {
    if (this._ws === null || !this.isOpen) throw new SpoolError("disconnected", "the connection is not open");
    this._ws.send(frame);
  }

  close(code = 1000, reason = "") {
    if (this._ws !== null && !this._closed) this._ws.close(code, reason);
  }
}

// ---------------------------------------------------------------------------------------
// Session
// ---------------------------------------------------------------------------------------

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
   * `m.expire()` to drop it (acks of one task leave as one `sow_delete`). With
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
    const settle = (m, option) => {
      if (m.settled) throw new SpoolError("invalid message", `queue message ${m.bookmark} was already settled`);
      m.settled = true;
      this._queueSettle(queue, m.bookmark, option);
    };
    const wrap = (m) => {
      m.deliveryCount = Number(m.header.dc ?? 1);
      m.leasePeriodMs = Number(m.header.lp ?? 0);
      m.settled = false;
      m.ack = () => settle(m, "");
      m.cancel = () => settle(m, "cancel");
      m.expire = () => settle(m, "expire");
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

  /** Queue an ack (option "" ), cancel or expire; sent with the others of this task. */
  _queueSettle(queue, bookmark, option) {
    if (!this._queueAcks) this._queueAcks = new Map();
    const key = `${option}\u0000${queue}`;
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
      const [option, queue] = key.split("\u0000");
      const cid = this._nextCid();
      const header = { c: "sow_delete", cid, t: queue, bm: bookmarks.join(","), a: "stats",
        o: option || undefined };
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
