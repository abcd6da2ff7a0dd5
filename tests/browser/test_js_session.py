"""The session layer of static/spool-client.js over a scripted transport, in Chromium.

The client reaches its transport only through ``transportFactory`` (the seam the HA layer
will use), so a transport that plays the broker's part from a script can drive the cases
a healthy broker does not produce on demand: conflated persisted acks, a refusal of a
fire-and-forget publish, a malformed frame, a failure arriving after a subscription was
accepted.
"""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import Page

pytestmark = pytest.mark.browser

# A transport that answers the logon itself and records every frame the client sends;
# the test then plays the broker with `push(header, body)`.
SCRIPTED = """
const { SpoolClient, SpoolError, encodeMessage, parseFrame } = window.spool;
class ScriptedTransport {
  constructor(logonAck) {
    this.frames = []; this.isOpen = false; this.bufferedAmount = 0; this.closed = null;
    this.logonAck = logonAck; this.onFrame = () => {}; this.onClose = () => {};
  }
  async open() { this.isOpen = true; }
  send(frame) {
    const headers = parseFrame(frame).messages.map((m) => m.header);
    this.frames.push(headers);
    for (const h of headers) {
      if (h.c === 'logon') queueMicrotask(() => this.push({ c: 'ack', a: 'processed', cid: h.cid,
        status: 'success', client_name: h.client_name, ...this.logonAck }));
    }
  }
  push(header, body) { this.onFrame(encodeMessage(header, body)); }
  pushRaw(text) { this.onFrame(new TextEncoder().encode(text)); }
  close(code, reason) {
    if (!this.isOpen) return;
    this.isOpen = false; this.closed = { code, reason };
    queueMicrotask(() => this.onClose({ code, reason, wasClean: true }));
  }
}
const settle = (p) => p.then((v) => ({ ok: v }), (e) => ({ reason: e.reason }));
const tick = () => new Promise((r) => setTimeout(r, 0));
"""


def run(page: Page, body: str) -> Any:
    return page.evaluate(f"async () => {{ {SCRIPTED}\n{body} }}")


def test_sequences_continue_and_one_persisted_ack_settles_every_earlier_publish(
    static_origin: Page,
) -> None:
    result = run(
        static_origin,
        """
        let t;
        const client = new SpoolClient('ws://scripted', { name: 'pub',
          transportFactory: () => (t = new ScriptedTransport({ s: 5, bm: '777|5|' })) });
        await client.connect();
        const plain = client.publish('orders', { a: 1 });
        const p7 = client.publish('orders', 'x', { ackPersisted: true });
        const p8 = client.publish('orders', 'y', { ackPersisted: true });
        await tick();
        const sent = t.frames[t.frames.length - 1];
        t.push({ c: 'ack', a: 'persisted', status: 'success', s: 8, bm: '777|8|' });
        return { plain: await plain, acks: [await p7, await p8], sent,
          lastPersisted: client.lastPersistedSeq };
        """,
    )
    assert result["plain"] == 6
    assert result["acks"] == [{"seq": 7, "bookmark": "777|7|"}, {"seq": 8, "bookmark": "777|8|"}]
    assert result["lastPersisted"] == 8
    # the three publishes of one task left in one frame
    assert [(h["c"], h["s"]) for h in result["sent"]] == [
        ("publish", 6),
        ("publish", 7),
        ("publish", 8),
    ]
    assert [h.get("a") for h in result["sent"]] == [None, "persisted", "persisted"]


def test_refusals_reach_the_waiting_publish_or_the_error_event(static_origin: Page) -> None:
    result = run(
        static_origin,
        """
        let t;
        const client = new SpoolClient('ws://scripted', { name: 'pub',
          transportFactory: () => (t = new ScriptedTransport({ s: 0 })) });
        await client.connect();
        const errors = [];
        client.on('error', (e) => errors.push(e.reason));
        const waited = settle(client.publish('secret', 'x', { ackPersisted: true }));
        await client.publish('secret', 'fire-and-forget');
        await tick();
        const [first, second] = t.frames[t.frames.length - 1];
        const fail = (h) => t.push({ c: 'ack', a: 'processed', cid: h.cid, status: 'failure',
          reason: 'not entitled', detail: "user 'pub' may not publish to 'secret'" });
        fail(first);
        fail(second);
        const dup = settle(client.publish('orders', 'again', { seq: 1, ack: 'processed' }));
        await tick();
        const [third] = t.frames[t.frames.length - 1];
        t.push({ c: 'ack', a: 'processed', cid: third.cid, status: 'failure', reason: 'duplicate' });
        return { waited: await waited, errors, dup: await dup };
        """,
    )
    assert result == {
        "waited": {"reason": "not entitled"},
        "errors": ["not entitled"],
        "dup": {"reason": "duplicate"},
    }


def test_a_malformed_frame_ends_the_session(static_origin: Page) -> None:
    result = run(
        static_origin,
        """
        let t;
        const client = new SpoolClient('ws://scripted', { name: 'victim',
          transportFactory: () => (t = new ScriptedTransport({ s: 0 })) });
        await client.connect();
        const gone = new Promise((r) => client.on('disconnect', (info) => r(info.error.reason)));
        const flushed = settle(client.flush());
        await tick();
        t.pushRaw('{"c":"publish","t":"x","l":99}short');
        return { event: await gone, flushed: await flushed, closed: t.closed,
          connected: client.connected };
        """,
    )
    assert result == {
        "event": "invalid message",
        "flushed": {"reason": "invalid message"},
        "closed": {"code": 4002, "reason": "invalid message"},
        "connected": False,
    }


def test_messages_route_by_sub_id_and_positions_move_resume_points(static_origin: Page) -> None:
    result = run(
        static_origin,
        """
        let t;
        const client = new SpoolClient('ws://scripted', { name: 'reader',
          transportFactory: () => (t = new ScriptedTransport({ s: 0 })) });
        await client.connect();
        const seen = { a: [], b: [], failed: null, positions: [] };
        const accept = async (subId, opts) => {
          const pending = client.subscribe('orders', { subId, ...opts },
            (m) => seen[subId].push([m.data, m.bookmark]));
          await tick();
          const h = t.frames[t.frames.length - 1][0];
          t.push({ c: 'ack', a: 'processed', cid: h.cid, status: 'success', sub_id: subId });
          await pending;
          return h;
        };
        const a = await accept('a', { bookmark: '0', onPosition: (bm) => seen.positions.push(bm),
          onError: (e) => { seen.failed = e.reason; } });
        await accept('b', {});
        t.push({ c: 'publish', t: 'orders', sids: 'a,b', bm: '9|1|' }, 'both');
        t.push({ c: 'publish', t: 'orders', sids: 'b', bm: '9|2|' }, 'only b');
        t.push({ c: 'ack', a: 'persisted', status: 'success', sub_id: 'a', bm: '9|5|' });
        const resumeA = client.lastBookmarkOf('a');
        t.push({ c: 'ack', a: 'processed', cid: a.cid, status: 'failure',
          reason: 'txlog full', detail: 'replay failed' });
        return { ...seen, resumeA, subs: client.subscriptions };
        """,
    )
    assert result["a"] == [["both", "9|1|"]]
    assert result["b"] == [["both", "9|1|"], ["only b", "9|2|"]]
    assert result["positions"] == ["9|5|"]
    assert result["resumeA"] == "9|5|"
    assert result["failed"] == "txlog full"
    assert result["subs"] == ["b"]


def test_delayed_publish_options_become_the_o_header(static_origin: Page) -> None:
    """``deliverAt`` (UTC, to the millisecond) and ``deliverAfterMs`` are written in the
    broker's grammar (docs/protocol.md "Publish options"); bad ones throw before a
    sequence number is taken."""
    result = run(
        static_origin,
        """
        const { publishOptions } = window.spool;
        let t;
        const client = new SpoolClient('ws://scripted', { name: 'pub',
          transportFactory: () => (t = new ScriptedTransport({ s: 0 })) });
        await client.connect();
        await client.publish('t', 'a', { deliverAt: new Date(Date.UTC(2030, 0, 2, 3, 4, 5, 67)) });
        await client.publish('t', 'b', { deliverAfterMs: 30000 });
        await client.publish('t', 'c');
        await tick();
        const sent = t.frames.flat().filter((h) => h.c === 'publish').map((h) => [h.s, h.o ?? null]);
        const thrown = async (opts) => {
          try { await client.publish('t', 'x', opts); return null; } catch (e) { return e.name; }
        };
        const bad = [
          await thrown({ deliverAfterMs: 0 }),
          await thrown({ deliverAfterMs: -5 }),
          await thrown({ deliverAfterMs: NaN }),
          await thrown({ deliverAfterMs: Infinity }),
          await thrown({ deliverAfterMs: '30' }),
          await thrown({ deliverAt: new Date(NaN) }),
          await thrown({ deliverAt: '2030-01-01' }),
          await thrown({ deliverAt: new Date(), deliverAfterMs: 5 }),
        ];
        return { sent, bad, lastSeq: client.lastSeq,
          fractions: [publishOptions({ deliverAfterMs: 1.5 }),
                      publishOptions({ deliverAfterMs: 0.000001 }),
                      publishOptions({})] };
        """,
    )
    assert result["sent"] == [
        [1, "deliver_at=20300102T030405.067Z"],
        [2, "deliver_after=30000ms"],
        [3, None],
    ]
    assert result["bad"] == ["TypeError"] * 8
    assert result["lastSeq"] == 3
    assert result["fractions"] == ["deliver_after=1.5ms", "deliver_after=0.000001ms", None]
