// Spool client: the protocol of docs/protocol.md over a WebSocket, as ES modules (browsers,
// Node, Deno). This is the entry module: it re-exports the public API of the modules below,
// so applications, the dashboard and the npm package's main entry import this one file.
//
// Three layers, each usable alone:
//
//   1. Codec (no I/O), static/spool-codec.js: encodeMessage / encodeFrame / parseFrame turn
//      headers + bodies into frame bytes and back. A frame holds one or more messages; a
//      message is a compact JSON header object immediately followed by its body, `l`
//      giving the body length in BYTES. splitFrame hands deliveries to the application as
//      SpoolMessage (static/spool-message.js).
//   2. Transport, static/spool-transport.js: WebSocketTransport moves whole frames
//      (Uint8Array) over one WebSocket and reports its closing. It knows nothing about
//      commands.
//   3. Session, static/spool-session.js: SpoolClient logs on, numbers commands (`cid`),
//      matches acks to the promises that wait for them, routes delivered messages to
//      subscriptions by `sids`, keeps heartbeats and tracks publish sequence numbers and
//      subscription bookmarks.
//
// SpoolError (static/spool-error.js) is what every layer reports. The HA client
// (static/spool-ha.js and its parts) is built around the session.
//
// See docs/js-client.md for the API.

export { SpoolError } from "./spool-error.js";
export {
  MAX_HEADER_BYTES,
  encodeFrame,
  encodeMessage,
  findHeaderEnd,
  joinFrame,
  parseFrame,
  parseFrameOneByOne,
  splitFrame,
  toBytes,
} from "./spool-codec.js";
export { SpoolMessage } from "./spool-message.js";
export { WebSocketTransport } from "./spool-transport.js";
export { CLIENT_VERSION, publishOptions, SpoolClient } from "./spool-session.js";

/** @typedef {import("./spool-transport.js").Transport} Transport */
/** @typedef {import("./spool-transport.js").WebSocketClass} WebSocketClass */
