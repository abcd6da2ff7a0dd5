// Spool client: the error every layer reports (static/spool-client.js is the entry module).

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
