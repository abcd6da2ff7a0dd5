"""The dashboard's live stream (web/dashboard.py) without a browser.

Rates from snapshot deltas, the shared feed (history, points, event-log entries, idle stop,
shutdown, slow readers) on a virtual clock, and the SSE response at the ASGI level.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

import orjson
import pytest

from spool.server.alerts import Alert
from spool.server.clock import VirtualClock, wait_all_blocked
from spool.server.eventlog import EventLog
from spool.server.stats.histogram import LatencyHistogram
from spool.server.stats.series import snapshot_values
from spool.server.stats.snapshot import MetricsSnapshot
from spool.web.dashboard import (
    SUBSCRIBER_QUEUE,
    DashboardFeed,
    EventStreamResponse,
    LivePointBuilder,
    LiveSubscriber,
    sse_event,
)
from tests.support.snapshots import (
    client_counters,
    metrics_snapshot,
    spill_counters,
    subscription_lag,
    txlog_counters,
)

# -- LivePointBuilder -------------------------------------------------------------------


def test_the_first_snapshot_is_only_a_baseline() -> None:
    assert LivePointBuilder().update(metrics_snapshot(msgs_in=10), now=5.0) is None


def test_rates_are_deltas_over_the_elapsed_time() -> None:
    builder = LivePointBuilder()
    builder.update(
        metrics_snapshot(msgs_in=100, msgs_out=10, bytes_in=1000, bytes_out=50), now=10.0
    )
    point = builder.update(
        metrics_snapshot(
            time=1_700_000_002.5,
            msgs_in=600,
            msgs_out=310,
            bytes_in=5000,
            bytes_out=50,
            connections=3,
            subscriptions=4,
            clients={
                "a": client_counters(queue_depth=100),
                "b": client_counters(queue_depth=23),
            },
            subscriptions_detail=[
                subscription_lag("a", "1", seconds_behind=0.5),
                subscription_lag("b", "1", seconds_behind=2.25),
            ],
            txlog=txlog_counters(durable_seq=77, bytes=4096.0),
            spills=spill_counters(catching_up=2, spills=5, rejoins=3, seconds=1.23456),
            disconnects={"slow_client_stalled": 1, "client": 4},
        ),
        now=12.0,
    )
    assert point is not None
    assert point["time"] == 1_700_000_002.5
    assert (point["msgs_in"], point["msgs_out"]) == (250.0, 150.0)
    assert (point["bytes_in"], point["bytes_out"]) == (2000.0, 0.0)
    assert (point["connections"], point["subscriptions"]) == (3, 4)
    assert point["queue_depth"] == 123
    assert point["lag_max"] == 2.25
    assert (point["durable_seq"], point["txlog_bytes"]) == (77, 4096)
    assert (point["catching_up"], point["spills"], point["catch_up_seconds"]) == (2, 5, 1.235)
    assert point["disconnects"] == {"slow_client_stalled": 1, "client": 4}


def test_a_counter_that_went_down_was_reset_and_counts_from_zero() -> None:
    builder = LivePointBuilder()
    builder.update(metrics_snapshot(msgs_out=1000), now=0.0)
    point = builder.update(metrics_snapshot(msgs_out=400), now=2.0)
    assert point is not None and point["msgs_out"] == 200.0


def test_live_points_and_stored_series_agree_on_an_interval() -> None:
    """The live chart and the stats database use one counter rule (server/stats/rates.py)."""
    before = metrics_snapshot(msgs_in=500, msgs_out=9000, bytes_in=70, bytes_out=123_456)
    after = metrics_snapshot(msgs_in=800, msgs_out=300, bytes_in=70, bytes_out=123_999)
    builder = LivePointBuilder()
    builder.update(before, now=100.0)
    point = builder.update(after, now=104.0)
    stored = snapshot_values(after, before, 4.0)
    assert point is not None
    for key in ("msgs_in", "msgs_out", "bytes_in", "bytes_out"):
        assert point[key] == round(stored[f"instance/{key}_rate"], 2), key


def test_ack_percentiles_cover_only_the_acks_of_the_interval() -> None:
    hist = LatencyHistogram()
    for _ in range(1000):
        hist.observe(0.050)  # old, slow acks: must not show in the next interval
    builder = LivePointBuilder()
    builder.update(metrics_snapshot(persisted_ack_latency=hist), now=0.0)
    for _ in range(99):
        hist.observe(0.001)
    hist.observe(0.010)
    point = builder.update(metrics_snapshot(persisted_ack_latency=hist), now=1.0)
    assert point is not None
    assert point["acks"] == 100
    assert point["ack_p50_ms"] == pytest.approx(1.0, rel=0.13)
    assert point["ack_p99_ms"] == pytest.approx(1.0, rel=0.13)
    quiet = builder.update(metrics_snapshot(persisted_ack_latency=hist), now=2.0)
    assert quiet is not None
    assert (quiet["acks"], quiet["ack_p50_ms"], quiet["ack_p99_ms"]) == (0, None, None)


def test_without_a_transaction_log_the_log_fields_are_null() -> None:
    builder = LivePointBuilder()
    builder.update(metrics_snapshot(), now=0.0)
    point = builder.update(metrics_snapshot(), now=1.0)
    assert point is not None
    assert (point["durable_seq"], point["txlog_bytes"]) == (None, None)


def test_reset_forgets_the_baseline() -> None:
    builder = LivePointBuilder()
    builder.update(metrics_snapshot(msgs_in=0), now=0.0)
    builder.reset()
    assert builder.update(metrics_snapshot(msgs_in=1_000_000), now=600.0) is None


def test_sse_events_are_framed_by_a_blank_line() -> None:
    assert sse_event(b'{"a":1}') == b'data: {"a":1}\n\n'
    assert sse_event(b"[]", "log") == b"event: log\ndata: []\n\n"


# -- LiveFeed ---------------------------------------------------------------------------


class Source:
    """The broker surface the feed reads: a clock, an event log, counters."""

    def __init__(self) -> None:
        self.clock = VirtualClock()
        self.events = EventLog(None, "test", console=False, clock=self.clock)
        self.stopping = False
        self.msgs_in = 0
        self.snapshots = 0
        self.current_alerts: list[Alert] = []

    def metrics_snapshot(self) -> MetricsSnapshot:
        self.snapshots += 1
        return metrics_snapshot(time=self.clock.time(), msgs_in=self.msgs_in, connections=1)

    def alerts(self) -> list[Alert]:
        return list(self.current_alerts)


def run(coro: Coroutine[Any, Any, None]) -> None:
    asyncio.run(asyncio.wait_for(coro, 30))


def parse(item: bytes | None) -> list[tuple[str, Any]]:
    """(event name, decoded data) for every SSE event in a queued item."""
    assert item is not None
    out: list[tuple[str, Any]] = []
    for block in item.decode().split("\n\n"):
        if not block:
            continue
        name = "message"
        data = ""
        for line in block.split("\n"):
            field, _, value = line.partition(": ")
            if field == "event":
                name = value
            elif field == "data":
                data = value
        out.append((name, orjson.loads(data)))
    return out


async def next_item(sub: LiveSubscriber) -> bytes | None:
    return await asyncio.wait_for(sub.queue.get(), 5)


def test_a_stream_starts_with_history_then_gets_one_point_per_interval() -> None:
    async def scenario() -> None:
        src = Source()
        src.events.emit("info", "session", "logon", client="a")
        feed = DashboardFeed(src, interval=1.0, idle_grace=10.0)
        sub = feed.subscribe()
        [(name, history)] = parse(await next_item(sub))
        assert name == "history"
        assert history["points"] == []
        assert [i["entry"]["event"] for i in history["log"]] == ["logon"]
        src.msgs_in = 300
        await src.clock.advance(1.0)
        [(name, point)] = parse(await next_item(sub))
        assert name == "message"
        assert point["msgs_in"] == 300.0
        assert point["time"] == src.clock.time()
        # a second stream shares the sampler and gets the point in its history
        late = feed.subscribe()
        [(_, history)] = parse(await next_item(late))
        assert [p["msgs_in"] for p in history["points"]] == [300.0]
        feed.close()

    run(scenario())


def test_every_point_carries_the_alerts_of_its_moment() -> None:
    """The banner of every open page follows the conditions second by second: a write
    outage shows up in the next point, and its end too (no reload needed)."""

    async def scenario() -> None:
        src = Source()
        feed = DashboardFeed(src, interval=1.0, idle_grace=10.0)
        sub = feed.subscribe()
        await next_item(sub)
        await src.clock.advance(1.0)
        [(_, point)] = parse(await next_item(sub))
        assert point["alerts"] == []
        outage: Alert = {
            "id": "txlog-refusing-writes", "level": "error", "title": "Transaction log refusing writes",
            "message": "journal write failed on x: No space left on device", "since": "2026-01-01T00:00:00Z",
        }  # fmt: skip
        src.current_alerts = [outage]
        await src.clock.advance(1.0)
        [(_, point)] = parse(await next_item(sub))
        assert point["alerts"] == [outage]
        src.current_alerts = []
        await src.clock.advance(1.0)
        [(_, point)] = parse(await next_item(sub))
        assert point["alerts"] == []
        feed.close()

    run(scenario())


def test_new_event_log_entries_are_sent_once_with_increasing_ids() -> None:
    async def scenario() -> None:
        src = Source()
        feed = DashboardFeed(src, interval=1.0)
        sub = feed.subscribe()
        await next_item(sub)
        src.events.emit("warning", "session", "slow_client", client="x")
        src.events.emit("info", "admin", "login", user="ops")
        await src.clock.advance(1.0)
        events = dict(parse(await next_item(sub)))
        log = events["log"]
        assert [i["entry"]["event"] for i in log] == ["slow_client", "login"]
        assert log[1]["id"] == log[0]["id"] + 1
        await src.clock.advance(1.0)
        assert "log" not in dict(parse(await next_item(sub)))
        feed.close()

    run(scenario())


def test_the_sampler_stops_after_the_idle_grace_and_restarts_on_demand() -> None:
    async def scenario() -> None:
        src = Source()
        feed = DashboardFeed(src, interval=1.0, idle_grace=3.0)
        sub = feed.subscribe()
        feed.unsubscribe(sub)
        assert feed.running
        await src.clock.advance(2.999)
        assert feed.running  # idle, but not for the whole grace yet
        await src.clock.advance(0.001)
        assert not feed.running  # stopped at the first tick past the grace (t = 3)
        taken = src.snapshots
        await src.clock.advance(10.0)
        assert src.snapshots == taken
        again = feed.subscribe()
        assert feed.running
        [(name, history)] = parse(await next_item(again))
        assert name == "history" and history["points"] == []  # stale points were dropped
        feed.close()

    run(scenario())


def test_streams_end_when_the_broker_starts_stopping() -> None:
    async def scenario() -> None:
        src = Source()
        feed = DashboardFeed(src, interval=1.0)
        sub = feed.subscribe()
        await next_item(sub)
        src.stopping = True
        await src.clock.advance(1.0)
        assert await next_item(sub) is None
        assert not feed.running
        refused = feed.subscribe()
        assert await next_item(refused) is None

    run(scenario())


def test_a_reader_that_falls_behind_is_ended_and_dropped() -> None:
    async def scenario() -> None:
        src = Source()
        feed = DashboardFeed(src, interval=1.0)
        slow = feed.subscribe()  # never read: the history, then one point a second
        await src.clock.advance(SUBSCRIBER_QUEUE - 1)
        assert feed.subscribers == 1  # the history and SUBSCRIBER_QUEUE - 1 points: full
        assert slow.queue.full()
        await src.clock.advance(1.0)  # one point more
        assert feed.subscribers == 0
        assert slow.queue.qsize() == 1
        assert await next_item(slow) is None
        feed.close()

    run(scenario())


# -- EventStreamResponse ----------------------------------------------------------------


def test_the_response_streams_until_the_client_disconnects() -> None:
    async def scenario() -> None:
        src = Source()
        feed = DashboardFeed(src, interval=1.0)
        sent: list[dict[str, Any]] = []
        gone = asyncio.Event()

        async def receive() -> dict[str, Any]:
            await gone.wait()
            return {"type": "http.disconnect"}

        async def send(message: Any) -> None:
            sent.append(message)

        task = asyncio.create_task(EventStreamResponse(feed)({"type": "http"}, receive, send))
        await src.clock.wait_all_blocked()
        start, retry, history = sent
        assert start["status"] == 200
        assert (b"content-type", b"text/event-stream; charset=utf-8") in start["headers"]
        assert retry["body"].startswith(b"retry: ")
        assert history["body"].startswith(b"event: history\n")
        src.msgs_in = 42
        await src.clock.advance(1.0)
        assert len(sent) == 4
        assert parse(sent[3]["body"])[0][1]["msgs_in"] == 42.0
        gone.set()
        await task
        assert feed.subscribers == 0
        feed.close()

    run(scenario())


async def _stream_until_it_ends(
    feed: DashboardFeed, response: EventStreamResponse, close_feed: bool
) -> list[dict[str, Any]]:
    """Run a response whose client never leaves; returns what it sent."""
    never = asyncio.Event()
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        await never.wait()
        return {"type": "http.disconnect"}

    async def send(message: Any) -> None:
        sent.append(message)

    task = asyncio.create_task(response({"type": "http"}, receive, send))
    if close_feed:
        await wait_all_blocked()
        assert len(sent) == 3  # start, retry, history
        feed.close()
    await task
    return sent


END_OF_BODY = {"type": "http.response.body", "body": b"", "more_body": False}


def test_the_response_ends_cleanly_when_its_time_is_up() -> None:
    async def scenario() -> None:
        feed = DashboardFeed(Source(), interval=1.0)
        sent = await _stream_until_it_ends(feed, EventStreamResponse(feed, max_seconds=0.0), False)
        assert sent[-1] == END_OF_BODY
        assert feed.subscribers == 0
        feed.close()

    run(scenario())


def test_the_response_ends_cleanly_when_the_feed_closes() -> None:
    async def scenario() -> None:
        feed = DashboardFeed(Source(), interval=1.0)
        sent = await _stream_until_it_ends(feed, EventStreamResponse(feed), True)
        assert sent[-1] == END_OF_BODY
        assert feed.subscribers == 0

    run(scenario())
