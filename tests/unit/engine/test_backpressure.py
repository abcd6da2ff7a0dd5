"""Back-pressure as engine scenarios on the virtual clock.

A burst a live subscriber cannot take at once spills its subscription to a catch-up read of
the log and back, with every message delivered once and in order; what cannot be read back
disconnects; a client that takes nothing for ``SlowClientTimeout`` is disconnected,
whatever kind of subscription it has. The readers are fake transports that take frames at
a steady pace of virtual time, or stop taking them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from tests.support.engine import EngineHarness, FakeClient, scenario
from tests.support.faults import GatedSeam
from tests.support.server import sow_topic

LIMIT = 256 * 1024  # spill at 128 KB, replays paced at 64 KB, frames of at most 64 KB
TUNING = (
    "<SlowClientBufferLimit>256KB</SlowClientBufferLimit><SlowClientTimeout>5s</SlowClientTimeout>"
)
TRANSPORT = "<MaxMessageSize>64KB</MaxMessageSize>"
PAD = b"x" * 1000


def harness(tmp_path: Path, **kw: Any) -> EngineHarness:
    kw.setdefault("tuning", TUNING)
    kw.setdefault("transport_extra", TRANSPORT)
    return EngineHarness(tmp_path, **kw)


def body(i: int, **extra: Any) -> bytes:
    return orjson.dumps({"i": i, **extra, "pad": PAD.decode()})


def burst(pub: FakeClient, topic: str, first: int, count: int, per_frame: int = 50) -> None:
    """Publish ``count`` messages numbered from ``first`` in frames of ``per_frame``, all in
    this loop turn (nothing reaches a subscriber's connection in between)."""
    for start in range(first, first + count, per_frame):
        end = min(first + count, start + per_frame)
        pub.send(*(({"c": "publish", "t": topic}, body(i)) for i in range(start, end)))


def ids(client: FakeClient, sub_id: str) -> list[int]:
    return [orjson.loads(b)["i"] for _, b in client.deliveries(sub_id)]


@scenario
async def test_two_queries_of_large_records_never_pass_half_the_limit(tmp_path: Path) -> None:
    """Two SOW queries of 10 KB records on one connection under a 128 KB limit, with
    heartbeats: each query queues pieces of at most L/4, whatever its batch size in
    records (a piece of 100 such records is eight times the limit, and the heartbeat ack
    after it disconnected the client as slow), so every record arrives once, in order."""
    async with harness(
        tmp_path, tuning=SMALL, sow=sow_topic("s", "/id", durability="transient")
    ) as h:
        pub = await h.logon("pub")
        pub.send(*(({"c": "publish", "t": "s"}, body(i, id=i, big="y" * 9000)) for i in range(100)))
        await h.commit()
        sub = await h.logon("reader", hb=1)
        sub.transport.rate = 400_000.0
        sub.send(*(({"c": "sow", "t": "s", "qid": q, "a": "processed"}, b"") for q in ("q1", "q2")))
        depths: list[int] = []

        def ended() -> int:
            return sum(1 for hd, _ in sub.received() if hd.get("c") == "group_end")

        def done() -> bool:
            depths.append(sub.session.queue_depth)
            sub.send(({"c": "heartbeat", "o": "beat"}, b""))
            return sub.closed or ended() == 2

        await pump(h, done)
        assert not sub.closed, sub.transport.close_reason
        for q in ("q1", "q2"):
            got = [
                orjson.loads(b)["id"]
                for hd, b in sub.received()
                if hd.get("qid") == q and hd["c"] == "sow"
            ]
            assert got == list(range(100))
        assert max(depths) <= SMALL_LIMIT // 2 + 4096


async def pump(h: EngineHarness, cond: Callable[[], bool], step: float = 0.01) -> None:
    """Move virtual time in small steps (and let log reads in threads finish) until
    ``cond()`` holds; fails after 30 s of real time."""
    deadline = time.monotonic() + 30
    while not cond():
        assert time.monotonic() < deadline, "condition never reached"
        await h.clock.advance(step)
        await asyncio.sleep(0.001)  # catch-up reads of journal files run in threads


async def subscriber(h: EngineHarness, name: str, *subs: dict[str, Any]) -> FakeClient:
    c = await h.logon(name)
    for sub in subs:
        c.send(({"c": "subscribe", "a": "processed", **sub}, b""))
    await h.settle()
    assert all(a["status"] == "success" for a in c.acks("processed"))
    c.skip = len(c.received())
    return c


def spills(h: EngineHarness) -> dict[str, Any]:
    snap = h.broker.operations.metrics_snapshot()
    return {**snap["spills"], "disconnects": snap["disconnects"]}


# -- a burst against a slow but steady reader --------------------------------------------


@scenario
async def test_a_burst_spills_to_the_log_and_is_delivered_whole_in_order(tmp_path: Path) -> None:
    seam = GatedSeam()
    seam.gate.set()
    async with harness(tmp_path, journal_size="1MB", files=seam) as h:
        sub = await subscriber(h, "reader", {"t": "md", "sub_id": "s"})
        sub.transport.rate = 2_000_000.0  # 2 MB/s of virtual time
        pub = await h.logon("pub")
        burst(pub, "md", 0, 3000)  # 3 MB, over three 1 MB journals
        await h.settle()
        state = sub.session.subs["s"].progress
        assert state.feed.catching_up and state.state == "replaying"
        # live delivery stopped at half the limit: the rest waits in the log
        assert sub.session.queue_depth <= LIMIT // 2
        await pump(h, lambda: len(sub.deliveries("s")) == 3000)
        assert ids(sub, "s") == list(range(3000))
        assert not sub.closed
        await pump(h, lambda: not state.feed.catching_up)
        assert state.state == "live"
        # back on the live path: the next message is delivered at once, before the group
        # commit makes it durable, as live delivery always is (the reader takes it at once);
        # the closed gate keeps its journal write from finishing meanwhile
        sub.transport.rate = None
        seam.gate.clear()
        pub.send(({"c": "publish", "t": "md"}, body(3000)))
        await h.settle()
        assert ids(sub, "s")[-1] == 3000
        assert h.durable_seq < h.last_seq
        seam.gate.set()
        await h.commit()
        counters = spills(h)
        assert (counters["spills"], counters["rejoins"], counters["catching_up"]) == (1, 1, 0)
        assert counters["seconds"] > 0
        assert counters["disconnects"]["slow_client_buffer"] == 0
        # the catch-up's journal pin is gone
        assert h.broker.txlog is not None and h.broker.txlog.pins() == []
        events = [
            e["event"] for e in h.broker.events.recent(500) if e["category"] == "subscription"
        ]
        assert events == ["spilled", "caught_up"]


@scenario
async def test_spills_and_rejoins_repeat_without_gap_or_duplicate(tmp_path: Path) -> None:
    """Bursts and pauses interleave with the reader: several spills and rejoins, each edge
    at a different point of the stream."""
    async with harness(tmp_path, flush_interval="20ms") as h:
        sub = await subscriber(h, "reader", {"t": "md", "sub_id": "s"})
        sub.transport.rate = 1_000_000.0
        pub = await h.logon("pub")
        state = sub.session.subs["s"].progress.feed
        sent = 0
        for n, round_size in enumerate((400, 30, 700, 5, 300, 1, 900, 250)):
            burst(pub, "md", sent, round_size, per_frame=round_size % 47 + 1)
            sent += round_size
            if n % 2:
                # let the reader catch up (and the subscription rejoin) before the next
                await pump(h, lambda: not state.catching_up)
            else:
                await h.clock.advance(0.01)
                await asyncio.sleep(0.001)
        await pump(h, lambda: len(sub.deliveries("s")) >= sent)
        assert ids(sub, "s") == list(range(sent))
        await pump(h, lambda: not state.catching_up)
        assert state.spills >= 3 and state.caught_up == state.spills
        assert not sub.closed


@scenario
async def test_the_catch_up_reads_records_appended_but_not_yet_durable(tmp_path: Path) -> None:
    """A live subscription is served before the group commit; its catch-up too: with a
    group commit far away, the whole burst is delivered from the log's tail."""
    async with harness(tmp_path, flush_interval="100ms") as h:
        sub = await subscriber(h, "reader", {"t": "md", "sub_id": "s"})
        sub.transport.rate = 50_000_000.0
        pub = await h.logon("pub")
        # a group commit now: the next one is due a whole interval later
        pub.send(({"c": "publish", "t": "other"}, b"{}"))
        await h.until(lambda: h.durable_seq == 1)
        burst(pub, "md", 0, 1000)
        await h.settle()
        assert sub.session.subs["s"].progress.feed.catching_up
        # less than a group-commit interval of virtual time: nothing more is durable yet
        for _ in range(9):
            await h.clock.advance(0.009)
            await asyncio.sleep(0.001)
        assert h.durable_seq == 1
        assert ids(sub, "s") == list(range(1000))
        assert not sub.session.subs["s"].progress.feed.catching_up


@scenario
async def test_filters_and_regex_topics_catch_up_with_the_same_selection(tmp_path: Path) -> None:
    async with harness(tmp_path) as h:
        sub = await subscriber(
            h,
            "reader",
            {"t": "md", "sub_id": "even", "f": "/i % 2 = 0"},
            {"t": "^fx\\.", "sub_id": "fx"},
        )
        sub.transport.rate = 3_000_000.0
        pub = await h.logon("pub")
        for start in range(0, 1200, 100):
            burst(pub, "md", start, 50)
            burst(pub, "fx.eur" if start % 200 else "fx.usd", start + 50, 50)
        await pump(h, lambda: len(sub.deliveries()) == 300 + 600)
        await pump(
            h, lambda: not any(s.progress.feed.catching_up for s in sub.session.subs.values())
        )
        assert ids(sub, "even") == [
            i for s in range(0, 1200, 100) for i in range(s, s + 50) if i % 2 == 0
        ]
        assert ids(sub, "fx") == [i for s in range(0, 1200, 100) for i in range(s + 50, s + 100)]
        topics = {hd["t"] for hd, _ in sub.deliveries("fx")}
        assert topics == {"fx.eur", "fx.usd"}
        assert spills(h)["spills"] >= 2


@scenario
async def test_a_message_two_subscriptions_take_reaches_each_once(tmp_path: Path) -> None:
    """One message for two subscriptions of one connection leaves as one delivery with
    ``sids`` "a,b" on the live path; while one catches up it arrives once under each id."""
    async with harness(tmp_path) as h:
        sub = await subscriber(h, "reader", {"t": "md", "sub_id": "a"}, {"t": "md", "sub_id": "b"})
        sub.transport.rate = 2_000_000.0
        pub = await h.logon("pub")
        burst(pub, "md", 0, 800)
        await pump(h, lambda: len(ids(sub, "a")) == 800 and len(ids(sub, "b")) == 800)
        assert ids(sub, "a") == list(range(800)) and ids(sub, "b") == list(range(800))
        await pump(
            h, lambda: not any(s.progress.feed.catching_up for s in sub.session.subs.values())
        )
        sub.transport.rate = None
        pub.send(({"c": "publish", "t": "md"}, body(800)))
        await h.settle()
        assert sub.deliveries()[-1][0]["sids"] == "a,b"


@scenario
async def test_a_topic_the_log_does_not_record_keeps_arriving_while_another_catches_up(
    tmp_path: Path,
) -> None:
    async with harness(tmp_path, topics=("^md$",)) as h:
        sub = await subscriber(
            h, "reader", {"t": "md", "sub_id": "rec"}, {"t": "news", "sub_id": "un"}
        )
        sub.transport.rate = 2_000_000.0
        pub = await h.logon("pub")
        burst(pub, "md", 0, 600)
        await h.settle()
        assert sub.session.subs["rec"].progress.feed.catching_up
        # the buffer stopped taking "md" at half the limit: "news" still has room
        pub.send(({"c": "publish", "t": "news"}, body(-1)))
        await h.settle()
        assert sub.session.subs["rec"].progress.feed.catching_up
        assert not sub.closed
        await pump(h, lambda: len(ids(sub, "rec")) == 600 and len(ids(sub, "un")) == 1)
        assert ids(sub, "rec") == list(range(600)) and ids(sub, "un") == [-1]
        assert not sub.closed


# -- what cannot be read back --------------------------------------------------------------


@scenario
async def test_a_burst_on_a_topic_not_recorded_disconnects_at_the_limit(tmp_path: Path) -> None:
    async with harness(tmp_path, topics=("^md$",)) as h:
        sub = await subscriber(h, "reader", {"t": "news", "sub_id": "s"})
        sub.transport.stop_reading()
        pub = await h.logon("pub")
        burst(pub, "news", 0, 400)
        await h.settle()
        assert sub.closed
        assert sub.transport.close_reason == "slow client"
        assert sub.session.close_cause == "slow_client_buffer"
        assert spills(h)["disconnects"]["slow_client_buffer"] == 1
        # the buffer was dropped at the overflow and nothing of the rest of the burst was
        # queued for a connection on its way out: at most the frame being written is held
        assert sub.session.queue_depth <= LIMIT // 4
        events = [e for e in h.broker.events.recent(500) if e["event"] == "slow_client"]
        assert len(events) == 1 and events[0]["cause"] == "buffer"


@scenario
async def test_a_filter_on_the_publishers_name_cannot_be_read_back_and_disconnects(
    tmp_path: Path,
) -> None:
    """Records do not keep the publisher's name, so ``CLIENT_NAME()`` would see "" in a
    catch-up read: such a subscription is cut at the limit rather than given wrong data."""
    async with harness(tmp_path) as h:
        sub = await subscriber(
            h, "reader", {"t": "md", "sub_id": "s", "f": "CLIENT_NAME() = 'pub'"}
        )
        sub.transport.stop_reading()
        pub = await h.logon("pub")
        burst(pub, "md", 0, 400)
        await h.settle()
        assert sub.closed and sub.session.close_cause == "slow_client_buffer"
        assert spills(h)["spills"] == 0


@scenario
async def test_a_publisher_that_does_not_read_its_acks_is_disconnected_at_the_limit(
    tmp_path: Path,
) -> None:
    async with harness(tmp_path) as h:
        pub = await h.logon("pub")
        pub.transport.stop_reading()
        for start in range(0, 20_000, 500):
            pub.send(
                *(
                    ({"c": "publish", "t": "t", "a": "processed", "cid": f"c{i}"}, b"{}")
                    for i in range(start, start + 500)
                )
            )
            await h.settle()
            if pub.closed:
                break
        assert pub.closed and pub.session.close_cause == "slow_client_buffer"


# -- a client that takes nothing ---------------------------------------------------------


async def _stalled_after(h: EngineHarness, client: FakeClient) -> float:
    """Virtual seconds from the writer's first stuck send until the client is closed."""
    await h.settle()
    started = client.session.send_started
    assert started is not None, "the writer is not waiting on the client"
    await h.clock.advance(4.999 - (h.clock.monotonic() - started))
    assert not client.closed
    await h.clock.advance(0.001)
    await h.settle()
    assert client.closed
    return h.clock.monotonic() - started


@scenario
async def test_a_live_subscriber_that_stops_reading_is_cut_after_slow_client_timeout(
    tmp_path: Path,
) -> None:
    async with harness(tmp_path) as h:
        sub = await subscriber(h, "reader", {"t": "md", "sub_id": "s"})
        sub.transport.stop_reading()
        pub = await h.logon("pub")
        burst(pub, "md", 0, 1000)
        await h.settle()
        # it spilled (a burst alone never cuts a recorded topic's subscriber)...
        assert sub.session.subs["s"].progress.feed.catching_up and not sub.closed
        # ...but taking nothing at all for SlowClientTimeout does
        assert await _stalled_after(h, sub) == 5.0
        assert sub.transport.close_reason == "slow client"
        assert sub.session.close_cause == "slow_client_stalled"
        counters = spills(h)
        assert counters["disconnects"]["slow_client_stalled"] == 1
        assert counters["catching_up"] == 0
        assert h.broker.txlog is not None and h.broker.txlog.pins() == []


@scenario
async def test_a_live_bookmark_subscriber_that_stops_reading_is_cut_too(tmp_path: Path) -> None:
    async with harness(tmp_path) as h:
        pub = await h.logon("pub")
        burst(pub, "md", 0, 1000)
        await h.commit()
        sub = await h.logon("reader")
        sub.transport.stop_reading()
        sub.send(({"c": "subscribe", "t": "md", "sub_id": "s", "bm": "0", "o": "live"}, b""))
        await h.until(lambda: sub.session.send_started is not None)
        assert await _stalled_after(h, sub) == 5.0
        assert sub.session.close_cause == "slow_client_stalled"


@scenario
async def test_a_bookmark_replay_to_a_reader_that_stopped_is_cut_too(tmp_path: Path) -> None:
    async with harness(tmp_path) as h:
        pub = await h.logon("pub")
        burst(pub, "md", 0, 1000)
        await h.commit()
        sub = await h.logon("reader")
        sub.transport.stop_reading()
        sub.send(({"c": "subscribe", "t": "md", "sub_id": "s", "bm": "0"}, b""))
        await h.until(lambda: sub.session.send_started is not None)
        assert await _stalled_after(h, sub) == 5.0


@scenario
async def test_a_reader_that_takes_a_frame_within_the_timeout_is_never_cut(tmp_path: Path) -> None:
    """Progress is one frame: frames are at most a quarter of the limit (or one piece of
    about 64 KB of messages when that is more), so a reader that needs most of a 5 s
    timeout for each keeps its connection however long it takes in all."""
    async with harness(tmp_path) as h:
        sub = await subscriber(h, "reader", {"t": "md", "sub_id": "s"})
        sub.transport.rate = 72 * 1024 / 4.8  # the largest frame (a 64 KB piece) takes 4.8 s
        pub = await h.logon("pub")
        burst(pub, "md", 0, 400, per_frame=10)
        await pump(h, lambda: len(sub.deliveries("s")) == 400, step=0.5)
        assert ids(sub, "s") == list(range(400))
        assert not sub.closed
        assert h.clock.monotonic() > 20  # it took several timeouts in all


@scenario
async def test_unsubscribing_or_leaving_while_catching_up_stops_the_read(tmp_path: Path) -> None:
    async with harness(tmp_path) as h:
        sub = await subscriber(h, "reader", {"t": "md", "sub_id": "a"}, {"t": "md", "sub_id": "b"})
        sub.transport.rate = 100_000.0
        pub = await h.logon("pub")
        burst(pub, "md", 0, 600)
        await h.settle()
        assert spills(h)["catching_up"] == 2
        await h.clock.advance(0.5)
        sub.send(({"c": "unsubscribe", "sub_id": "a"}, b""))
        await h.settle()
        assert spills(h)["catching_up"] == 1
        assert h.broker.txlog is not None
        assert [p.owner for p in h.broker.txlog.pins()] == ["catch-up:reader:b"]
        await sub.session.close("bye")
        assert spills(h)["catching_up"] == 0
        assert h.broker.txlog.pins() == []
        assert spills(h)["seconds"] > 0


# -- several paced producers on one connection ---------------------------------------------

SMALL_LIMIT = 128 * 1024  # paced below 32 KB, in pieces of at most 32 KB
SMALL = (
    "<SlowClientBufferLimit>128KB</SlowClientBufferLimit><SlowClientTimeout>5s</SlowClientTimeout>"
)
BIG_PAD = "y" * 2000


def two_kb(i: int) -> bytes:
    return orjson.dumps({"i": i, "pad": BIG_PAD})


def burst_2kb(pub: FakeClient, topic: str, first: int, count: int) -> None:
    """2 KB messages numbered from ``first``, each frame of 25 followed in the log by 100
    small messages nobody here takes (a read's average record is small then)."""
    for start in range(first, first + count, 25):
        pub.send(*(({"c": "publish", "t": topic}, two_kb(i)) for i in range(start, start + 25)))
        pub.send(*(({"c": "publish", "t": "other"}, b"{}") for _ in range(100)))


@scenario
async def test_two_catch_ups_of_one_connection_never_pass_the_limit_together(
    tmp_path: Path,
) -> None:
    """Two subscriptions of one connection spill at once under a small limit, with 2 KB
    messages among small ones of another topic (a piece sized by a read's average record
    was several times L/4): the catch-ups take turns, together they keep the buffer under
    half the limit, and the heartbeats that keep coming are never refused."""
    async with harness(tmp_path, tuning=SMALL) as h:
        sub = await h.logon("reader", hb=1)
        for t in ("a", "b"):
            sub.send(({"c": "subscribe", "a": "processed", "t": t, "sub_id": t}, b""))
        await h.settle()
        sub.skip = len(sub.received())
        sub.transport.rate = 400_000.0
        pub = await h.logon("pub")
        depths: list[int] = []
        for round_ in range(4):
            for t in ("a", "b"):
                burst_2kb(pub, t, round_ * 300, 300)
            await h.settle()
            assert all(s.progress.feed.catching_up for s in sub.session.subs.values())

            def done(n: int = (round_ + 1) * 300) -> bool:
                depths.append(sub.session.queue_depth)
                sub.send(({"c": "heartbeat", "o": "beat"}, b""))
                return sub.closed or (len(ids(sub, "a")) == n and len(ids(sub, "b")) == n)

            await pump(h, done)
            assert not sub.closed, sub.transport.close_reason
        assert ids(sub, "a") == list(range(1200)) and ids(sub, "b") == list(range(1200))
        assert spills(h)["disconnects"]["slow_client_buffer"] == 0
        assert max(depths) <= SMALL_LIMIT // 2 + 4096


@scenario
async def test_a_replay_and_a_catch_up_of_one_connection_never_cut_a_steady_reader(
    tmp_path: Path,
) -> None:
    """A bookmark replay of 2 KB messages and a catch-up on one connection under a 128 KB
    limit, with heartbeats: each piece is at most L/4, so together they leave the
    heartbeats room, and each subscription gets every message once, in order."""
    async with harness(tmp_path, tuning=SMALL) as h:
        pub = await h.logon("pub")
        for start in range(0, 600, 25):
            pub.send(*(({"c": "publish", "t": "old"}, two_kb(i)) for i in range(start, start + 25)))
        await h.commit()
        sub = await h.logon("reader", hb=1)
        sub.transport.rate = 400_000.0
        sub.send(({"c": "subscribe", "t": "new", "sub_id": "n"}, b""))
        await h.settle()
        burst_2kb(pub, "new", 0, 300)
        await h.settle()
        assert sub.session.subs["n"].progress.feed.catching_up
        sub.send(({"c": "subscribe", "t": "old", "sub_id": "o", "bm": "0"}, b""))
        depths: list[int] = []

        def done() -> bool:
            depths.append(sub.session.queue_depth)
            sub.send(({"c": "heartbeat", "o": "beat"}, b""))
            return sub.closed or (len(ids(sub, "o")) == 600 and len(ids(sub, "n")) == 300)

        await pump(h, done)
        assert not sub.closed, sub.transport.close_reason
        assert ids(sub, "o") == list(range(600)) and ids(sub, "n") == list(range(300))
        assert spills(h)["disconnects"]["slow_client_buffer"] == 0
        assert max(depths) <= SMALL_LIMIT * 3 // 4
