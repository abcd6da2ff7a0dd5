"""static/spool-client.js in Chromium against a real broker: publish, subscribe, filters,
replay, failure acks, unsubscribe, and a disconnect made by the admin API."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from playwright.sync_api import Page

from tests.support.server import SpoolProcess

pytestmark = pytest.mark.browser

# Shared by every scenario: the module, and `within(promise, ms)` so that a message that
# never comes fails the test with a clear reason instead of hanging it.
PRELUDE = """
const { SpoolClient, SpoolError } = await import('/static/spool-client.js');
const within = (promise, ms, what) => Promise.race([promise, new Promise((_, reject) =>
  setTimeout(() => reject(new Error(`timed out: ${what}`)), ms))]);
const collector = (count) => {
  const got = [];
  let resolve;
  const done = new Promise((r) => { resolve = r; });
  const onMessage = (m) => {
    got.push({ topic: m.topic, data: m.data, bookmark: m.bookmark, subIds: m.subIds,
      timestamp: m.timestamp ?? null });
    if (got.length >= count) resolve(got);
  };
  return { got, done, onMessage };
};
"""


def scenario(body: str) -> str:
    return f"async ({{url}}) => {{ {PRELUDE}\n{body} }}"


@pytest.fixture
def client_page(page: Page, dashboard_server: SpoolProcess) -> Iterator[Page]:
    """A page of the broker's own origin (the module is imported from /static/)."""
    page.goto(f"{dashboard_server.http_url}/query")
    yield page


def run(page: Page, server: SpoolProcess, body: str) -> Any:
    return page.evaluate(scenario(body), {"url": server.ws_url})


def test_publish_with_persisted_acks_and_a_live_subscriber(
    client_page: Page, dashboard_server: SpoolProcess
) -> None:
    result = run(
        client_page,
        dashboard_server,
        """
        const sub = new SpoolClient(url, { name: 'js-live-sub' });
        const pub = new SpoolClient(url, { name: 'js-live-pub' });
        const logon = await sub.connect();
        await pub.connect();
        const c = collector(3);
        const subId = await sub.subscribe('js-live', { options: 'timestamp' }, c.onMessage);
        const bodies = ['{"id":1,"note":"héllo € 😀"}', '{"id":2,"s":"{\\\\"}"}', 'plain text'];
        const acks = [];
        for (const b of bodies) acks.push(await pub.publish('js-live', b, { ackPersisted: true }));
        const got = await within(c.done, 5000, 'three messages');
        sub.close(); pub.close();
        return { logon, subId, got, acks, bodies, persisted: pub.lastPersistedSeq };
        """,
    )
    assert result["logon"]["client_name"] == "js-live-sub"
    assert [m["data"] for m in result["got"]] == result["bodies"]
    assert [a["seq"] for a in result["acks"]] == [1, 2, 3]
    assert result["persisted"] == 3
    # the bookmark a publisher learns from its persisted ack is the one subscribers see
    assert [m["bookmark"] for m in result["got"]] == [a["bookmark"] for a in result["acks"]]
    assert all(m["subIds"] == [result["subId"]] for m in result["got"])
    assert all(m["topic"] == "js-live" and m["timestamp"] for m in result["got"])


def test_a_filter_delivers_only_matching_messages(
    client_page: Page, dashboard_server: SpoolProcess
) -> None:
    got = run(
        client_page,
        dashboard_server,
        """
        const client = new SpoolClient(url, { name: 'js-filter' });
        await client.connect();
        const c = collector(3);
        await client.subscribe('js-filtered', { filter: '/qty > 10' }, c.onMessage);
        for (const qty of [5, 20, 10, 11, 3, 999]) {
          await client.publish('js-filtered', { qty }, { ack: 'processed' });
        }
        const got = await within(c.done, 5000, 'matching messages');
        client.close();
        return got.map((m) => JSON.parse(m.data).qty);
        """,
    )
    assert got == [20, 11, 999]


def test_failure_acks_reject_with_the_protocol_reason(
    client_page: Page, dashboard_server: SpoolProcess
) -> None:
    reasons = run(
        client_page,
        dashboard_server,
        """
        const client = new SpoolClient(url, { name: 'js-failures' });
        await client.connect();
        const attempt = async (fn) => {
          try { await fn(); return 'accepted'; }
          catch (e) { return e instanceof SpoolError ? e.reason : `not a SpoolError: ${e}`; }
        };
        const out = {
          filter: await attempt(() => client.subscribe('t', { filter: '/qty >' })),
          bookmark: await attempt(() => client.subscribe('t', { bookmark: '[20240101T000000Z' })),
          options: await attempt(() => client.subscribe('t', { options: 'pause' })),
          regex: await attempt(() => client.subscribe('(unclosed', {})),
          unknownSub: await attempt(() => client.unsubscribe('no-such-sub')),
          ok: await attempt(() => client.subscribe('t', { subId: 'x' })),
        };
        out.inUse = await attempt(() => client.subscribe('t', { subId: 'x' }));
        client.close();
        return out;
        """,
    )
    assert reasons == {
        "filter": "bad filter",
        "bookmark": "invalid bookmark",
        "options": "invalid options",
        "regex": "bad regex topic",
        "unknownSub": "subid not found",
        "ok": "accepted",
        "inUse": "subid in use",
    }


def test_replay_from_epoch_then_live_with_a_completed_ack(
    client_page: Page, dashboard_server: SpoolProcess
) -> None:
    result = run(
        client_page,
        dashboard_server,
        """
        const pub = new SpoolClient(url, { name: 'js-replay-pub' });
        await pub.connect();
        for (let i = 1; i <= 5; i++) await pub.publish('js-replay', { i }, { ackPersisted: true });
        const sub = new SpoolClient(url, { name: 'js-replay-sub' });
        await sub.connect();
        const c = collector(6);
        let completed;
        const reachedLive = new Promise((r) => { completed = r; });
        const subId = await sub.subscribe('js-replay', { bookmark: '0', onCompleted: completed },
          c.onMessage);
        await within(reachedLive, 5000, 'completed ack');
        const ack = await pub.publish('js-replay', { i: 6 }, { ackPersisted: true });
        const got = await within(c.done, 5000, 'six messages');
        const resumeFrom = sub.lastBookmarkOf(subId);
        sub.close(); pub.close();
        return { order: got.map((m) => JSON.parse(m.data).i), last: ack.bookmark, resumeFrom,
          bookmarks: got.map((m) => m.bookmark) };
        """,
    )
    assert result["order"] == [1, 2, 3, 4, 5, 6]
    assert len(set(result["bookmarks"])) == 6
    assert result["resumeFrom"] == result["last"] == result["bookmarks"][-1]


def test_unsubscribe_stops_delivery_to_that_subscription_only(
    client_page: Page, dashboard_server: SpoolProcess
) -> None:
    result = run(
        client_page,
        dashboard_server,
        """
        const client = new SpoolClient(url, { name: 'js-unsub' });
        await client.connect();
        const first = collector(1);
        const second = collector(2);
        const a = await client.subscribe('js-unsub', {}, first.onMessage);
        await client.subscribe('js-unsub', {}, second.onMessage);
        await client.publish('js-unsub', 'one', { ackPersisted: true });
        await within(first.done, 5000, 'first message');
        await client.unsubscribe(a);
        await client.publish('js-unsub', 'two', { ackPersisted: true });
        await within(second.done, 5000, 'second subscription');
        const held = client.subscriptions;
        client.close();
        return { first: first.got.map((m) => m.data), second: second.got.map((m) => m.data),
          held: held.length };
        """,
    )
    assert result == {"first": ["one"], "second": ["one", "two"], "held": 1}


def test_an_admin_disconnect_fails_what_waits_and_emits_disconnect(
    client_page: Page, dashboard_server: SpoolProcess
) -> None:
    client_page.evaluate(
        scenario(
            """
            const client = new SpoolClient(url, { name: 'js-kicked' });
            await client.connect();
            window.kicked = new Promise((resolve) => client.on('disconnect', (info) =>
              resolve({ reason: info.error.reason, connected: client.connected })));
            window.kickedClient = client;
            """
        ),
        {"url": dashboard_server.ws_url},
    )
    response = httpx.post(f"{dashboard_server.http_url}/api/clients/js-kicked/disconnect")
    assert response.status_code == 200, response.text
    info = client_page.evaluate("() => window.kicked")
    assert info == {"reason": "disconnected", "connected": False}
    after = client_page.evaluate(
        """async () => {
          try { await window.kickedClient.publish('t', 'x'); return 'sent'; }
          catch (e) { return e.reason; }
        }"""
    )
    assert after == "disconnected"


def test_a_batch_callback_gets_each_frame_s_messages_in_order(
    client_page: Page, dashboard_server: SpoolProcess
) -> None:
    result = run(
        client_page,
        dashboard_server,
        """
        const pub = new SpoolClient(url, { name: 'js-batch-pub' });
        await pub.connect();
        for (let i = 0; i < 2000; i++) pub.publish('js-batch', `{"i":${i}}`);
        await pub.publish('js-batch', '{"i":2000}', { ackPersisted: true });
        pub.close();
        const client = new SpoolClient(url, { name: 'js-batch-sub' });
        await client.connect();
        const got = [];
        let calls = 0;
        let single = 0;
        let completedAfter = -1;
        let resolve;
        const done = new Promise((r) => { resolve = r; });
        await client.subscribe('js-batch', {
          bookmark: '0',
          onBatch: (batch) => {
            calls++;
            for (const m of batch) got.push(JSON.parse(m.data).i);
            if (got.length >= 2001) resolve();
          },
          onCompleted: () => { completedAfter = got.length; },
        }, () => { single++; });
        await within(done, 10000, 'the replay');
        client.close();
        return { got, calls, single, completedAfter };
        """,
    )
    assert result["got"] == list(range(2001))
    assert result["single"] == 0
    assert 0 < result["calls"] < 2001  # messages came a frame at a time
    # the completed ack came after every replayed message, as on the wire
    assert result["completedAfter"] in (-1, 2001)
