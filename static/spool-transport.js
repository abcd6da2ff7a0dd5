// Spool client, layer 2: the transport. WebSocketTransport moves whole frames (Uint8Array)
// over one WebSocket and reports its closing; it knows nothing about commands.
//
// static/spool-client.js is the entry module that re-exports the public API.

import { SpoolError } from "./spool-error.js";

const encoder = new TextEncoder();

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
export function resolveWebSocket(what, given) {
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
