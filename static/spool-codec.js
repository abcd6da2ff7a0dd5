// Spool client, layer 1: the frame codec (no I/O), turning headers + bodies into frame bytes
// and back. A frame holds one or more messages; a message is a compact JSON header object
// immediately followed by its body, `l` giving the body length in BYTES
// (docs/protocol.md). It needs only `TextEncoder`.
//
// `parseFrame` and `splitFrame` are the fast twins of `parseFrameOneByOne`, the readable
// definition; tests/browser/test_js_codec.py holds them to it. All three stay in this module.
//
// static/spool-client.js is the entry module that re-exports the public API.

import { SpoolMessage, ascii } from "./spool-message.js";

const encoder = new TextEncoder();
const decoder = new TextDecoder("utf-8");

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
