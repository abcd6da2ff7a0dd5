"""The async replay driver, with a virtual clock, over both log backends.

Tests that take the ``logs`` fixture run once over the in-memory ``FakeLog`` and once over
a real ``TransactionLog`` (columnar ``read_view`` batches, durable-only reads, the
engine's ``AppendedSource`` for ``live``). The few that run over the fake only say why.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson
import pytest

from spool.server.bookmarks import format_time_bookmark, parse_bookmark
from spool.server.clock import VirtualClock, time_us
from spool.server.protocol.errors import BookmarkNotFound
from spool.server.protocol.options import parse_subscribe_options
from spool.server.replay import (
    FunctionLimit,
    ReplayCursor,
    ReplayGapError,
    ReplaySource,
    build_member,
    resume_together,
)
from spool.server.txlog.format.batch import RecordBatch
from spool.server.txlog.format.record import RecordKind
from tests.support.wait import async_wait_until, run_turns, turns_until
from tests.unit.replay.backends import LogFactory, ReplayLog, TxlogLog, run_async
from tests.unit.replay.fakes import PUB, PUB_B, FakeLog, FakeSink


def cursor_for(
    log: ReplaySource,
    sink: FakeSink,
    spec: str = "0",
    options: str = "",
    *,
    clock: VirtualClock,
    accept: Any = None,
    **kwargs: Any,
) -> ReplayCursor:
    member = build_member(
        sink, parse_bookmark(spec), parse_subscribe_options(options), log, accept=accept
    )
    return ReplayCursor(log, [member], clock=clock, **kwargs)


def bm(seq: int, publisher: int = PUB) -> str:
    return f"{publisher}|{seq}|"


async def fill(log: ReplayLog, n: int, **kwargs: Any) -> None:
    for _ in range(n):
        log.append(**kwargs)
    await log.flush()


# -- start points, cut-over, completion --------------------------------------------------


@run_async
async def test_epoch_replays_then_follows_live_without_gap_or_duplicate(logs: LogFactory) -> None:
    clock = VirtualClock()
    log = await logs.open(clock)
    await fill(log, 5)
    sink = FakeSink(clock=clock)
    cursor = cursor_for(log, sink, "0", clock=clock)
    cursor.start()
    await turns_until(lambda: sink.count("caught_up") == 1)
    assert sink.seqs == [1, 2, 3, 4, 5]
    assert sink.events[-1] == ("caught_up", 5)
    log.append()
    log.append()
    await run_turns()
    assert sink.seqs == [1, 2, 3, 4, 5]  # not durable yet: not delivered
    await log.flush()
    await turns_until(lambda: len(sink.got) == 7)
    assert sink.seqs == list(range(1, 8))
    assert sink.count("caught_up") == 1
    cursor.close()
    await cursor.wait_closed()
    assert cursor.done and cursor.error is None


@run_async
async def test_now_delivers_only_what_comes_next(logs: LogFactory) -> None:
    clock = VirtualClock()
    log = await logs.open(clock)
    await fill(log, 3)
    sink = FakeSink(clock=clock)
    cursor = cursor_for(log, sink, "0|1|", clock=clock)
    cursor.start()
    await turns_until(lambda: sink.count("caught_up") == 1)
    assert sink.got == []
    await log.publish()
    await turns_until(lambda: sink.seqs == [4])
    cursor.close()
    await cursor.wait_closed()


@run_async
async def test_bookmark_resumes_after_it_and_list_after_the_oldest(logs: LogFactory) -> None:
    clock = VirtualClock()
    log = await logs.open(clock)
    await fill(log, 6)
    one, several = FakeSink("one"), FakeSink("several")
    c1 = cursor_for(log, one, bm(3), clock=clock)
    c2 = cursor_for(log, several, f"{bm(5)},{bm(2)},{bm(9, PUB_B)}", clock=clock)
    c1.start()
    c2.start()
    await turns_until(lambda: one.count("caught_up") == 1 and several.count("caught_up") == 1)
    assert one.seqs == [4, 5, 6]
    assert several.seqs == [3, 4, 5, 6]
    c1.close()
    await c1.wait_closed()
    c2.close()
    await c2.wait_closed()


@pytest.mark.parametrize(
    ("policy", "expected"), [("", [4]), ("bookmark_not_found=epoch", [1, 2, 3, 4])]
)
@run_async
async def test_unknown_bookmark_policies(
    policy: str, expected: list[int], logs: LogFactory
) -> None:
    clock = VirtualClock()
    log = await logs.open(clock)
    await fill(log, 3)
    sink = FakeSink()
    cursor = cursor_for(log, sink, bm(77, PUB_B), policy, clock=clock)
    cursor.start()
    await turns_until(lambda: sink.count("caught_up") == 1)
    await log.publish()
    await turns_until(lambda: len(sink.got) == len(expected))
    assert sink.seqs == expected
    cursor.close()
    await cursor.wait_closed()


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("[{b2}:{b5}]", [2, 3, 4, 5]),
        ("({b2}:{b5}]", [3, 4, 5]),
        ("[{b2}:{b5})", [2, 3, 4]),
        ("({b2}:{b5})", [3, 4]),
        ("[{b6},{b3}:{b5}]", [3, 4, 5]),
        ("({b6},{b3}:{b5})", [4]),
        ("[{b2}:{b4},{b6}]", [2, 3, 4, 5, 6]),
        ("[{b2}:{b4},{b6})", [2, 3, 4, 5]),
        ("({b2},{b3}:{b4},{b6})", [3, 4, 5]),
        ("[0:{b3}]", [1, 2, 3]),
        ("[0:0|1|]", [1, 2, 3, 4, 5, 6, 7, 8]),
        ("[{b5}:{b3}]", []),
        ("[{t2}:{t4}]", [3, 4, 5]),
        ("({t2}:{t4})", [4]),
        ("[{t2}:{b6}]", [3, 4, 5, 6]),
    ],
)
@run_async
async def test_ranges_over_a_static_log(
    template: str, expected: list[int], logs: LogFactory
) -> None:
    clock = VirtualClock()
    log = await logs.open(clock)
    for i in range(8):
        log.append(ts_us=1_000_000_000_000_000 + i * 1_000_000)  # record i+1 at t=i s
    await log.flush()
    names = {f"b{i}": bm(i) for i in range(1, 9)}
    names |= {
        f"t{i}": format_time_bookmark(1_000_000_000_000_000 + i * 1_000_000) for i in range(8)
    }
    sink = FakeSink()
    cursor = cursor_for(log, sink, template.format(**names), "", clock=clock)
    cursor.start()
    await asyncio.wait_for(cursor.wait_closed(), 5)
    assert sink.seqs == expected
    assert sink.count("completed") == 1
    assert sink.count("caught_up") == 0  # a range completes at its end only
    await log.publish()
    await run_turns()
    assert sink.seqs == expected


@run_async
async def test_range_end_bookmark_not_yet_in_the_log_waits_for_it(logs: LogFactory) -> None:
    clock = VirtualClock()
    log = await logs.open(clock)
    await fill(log, 2)
    sink = FakeSink()
    cursor = cursor_for(log, sink, f"[0:{bm(2, PUB_B)}]", clock=clock)
    cursor.start()
    await turns_until(lambda: len(sink.got) == 2)
    await log.publish(publisher=PUB_B)
    await log.publish()
    await log.publish(publisher=PUB_B)
    await log.publish()
    await asyncio.wait_for(cursor.wait_closed(), 5)
    assert sink.seqs == [1, 2, 3, 4, 5]
    assert sink.events[-1] == ("completed", 5)


@run_async
async def test_future_end_time_completes_when_the_clock_passes_it(logs: LogFactory) -> None:
    clock = VirtualClock()
    log = await logs.open(clock)
    await fill(log, 2)
    end = time_us(clock) + 10_000_000
    sink = FakeSink()
    cursor = cursor_for(log, sink, f"[0:{format_time_bookmark(end)}]", clock=clock)
    cursor.start()
    await turns_until(lambda: len(sink.got) == 2)
    await clock.advance(5)
    await log.publish()
    await turns_until(lambda: len(sink.got) == 3)
    await clock.advance(4.99)
    assert not cursor.done
    await clock.advance(0.02)  # past the end, no message needed
    await asyncio.wait_for(cursor.wait_closed(), 5)
    assert sink.events[-1] == ("completed", 3)
    await log.publish()
    await run_turns()
    assert sink.seqs == [1, 2, 3]


@run_async
async def test_future_end_time_includes_a_record_stamped_at_the_end(logs: LogFactory) -> None:
    clock = VirtualClock()
    log = await logs.open(clock)
    end = time_us(clock) + 2_000_000
    sink = FakeSink()
    cursor = cursor_for(log, sink, f"[0:{format_time_bookmark(end)}]", clock=clock)
    cursor.start()
    await run_turns()
    log.append(ts_us=end)  # appended just in time, flushed after the end passed
    await clock.advance(3)
    await run_turns()
    assert not cursor.done  # the end is settled but seq 1 is not durable yet
    log.append()
    await log.flush()
    await asyncio.wait_for(cursor.wait_closed(), 5)
    assert sink.seqs == [1]


@run_async
async def test_future_start_time_skips_what_comes_before_it(logs: LogFactory) -> None:
    clock = VirtualClock()
    log = await logs.open(clock)
    await fill(log, 2)
    start = time_us(clock) + 10_000_000
    sink = FakeSink()
    cursor = cursor_for(log, sink, format_time_bookmark(start), clock=clock)
    cursor.start()
    await turns_until(lambda: sink.count("caught_up") == 1)
    await log.publish()  # before the start time
    await clock.advance(10)
    await log.publish()  # at the start time
    await log.publish()
    await turns_until(lambda: len(sink.got) == 2)
    assert sink.seqs == [4, 5]
    cursor.close()
    await cursor.wait_closed()


# -- filters, top_n, kinds ---------------------------------------------------------------


def topic_is(name: str) -> Any:
    return lambda rec: rec.topic == name


@run_async
async def test_top_n_counts_delivered_messages(logs: LogFactory) -> None:
    clock = VirtualClock()
    log = await logs.open(clock)
    for i in range(20):
        log.append(topic="a" if i % 4 == 0 else "b")
    await log.flush()
    sink = FakeSink(accept=topic_is("a"))
    cursor = cursor_for(log, sink, "0", "top_n=3", clock=clock)
    cursor.start()
    await asyncio.wait_for(cursor.wait_closed(), 5)
    assert sink.seqs == [1, 5, 9]
    assert sink.events[-1] == ("completed", 3)


@run_async
async def test_top_n_after_catch_up_continues_live(logs: LogFactory) -> None:
    clock = VirtualClock()
    log = await logs.open(clock)
    await fill(log, 1)
    sink = FakeSink()
    cursor = cursor_for(log, sink, "0", "top_n=3", clock=clock)
    cursor.start()
    await turns_until(lambda: sink.count("caught_up") == 1)
    for _ in range(4):
        await log.publish()
    await asyncio.wait_for(cursor.wait_closed(), 5)
    assert sink.seqs == [1, 2, 3]
    assert [k for k, _ in sink.events if k != "deliver"] == ["caught_up", "completed"]


@run_async
async def test_filter_applies_during_replay_and_live(logs: LogFactory) -> None:
    clock = VirtualClock()
    log = await logs.open(clock)
    await fill(log, 3, topic="x")
    await fill(log, 1, topic="a")
    sink = FakeSink(accept=topic_is("a"))
    cursor = cursor_for(log, sink, "0", clock=clock)
    cursor.start()
    await turns_until(lambda: sink.count("caught_up") == 1)
    await fill(log, 2, topic="x")
    await fill(log, 1, topic="a")
    await turns_until(lambda: len(sink.got) == 2)
    assert sink.seqs == [4, 7]
    cursor.close()
    await cursor.wait_closed()


@run_async
async def test_only_message_kinds_are_delivered(logs: LogFactory) -> None:
    clock = VirtualClock()
    log = await logs.open(clock)
    log.append()
    log.append(kind=RecordKind.QUEUE_ACK)
    log.append(kind=RecordKind.DELTA_PUBLISH)
    await log.flush()
    sink = FakeSink()
    cursor = cursor_for(log, sink, "0", clock=clock)
    cursor.start()
    await turns_until(lambda: sink.count("caught_up") == 1)
    assert sink.seqs == [1, 3]
    cursor.close()
    await cursor.wait_closed()


# -- position acks -------------------------------------------------------------------


@run_async
async def test_periodic_position_ack_for_a_sparse_subscriber(logs: LogFactory) -> None:
    clock = VirtualClock()
    log = await logs.open(clock)
    await fill(log, 3, topic="x")
    sink = FakeSink(accept=topic_is("a"))
    cursor = cursor_for(log, sink, "0", clock=clock, position_interval=1.0)
    cursor.start()
    await turns_until(lambda: sink.count("caught_up") == 1)
    await clock.advance(0.5)
    assert sink.positions == []
    await clock.advance(0.5)
    await turns_until(lambda: sink.positions == [bm(3)])
    await clock.advance(3)
    assert sink.positions == [bm(3)]  # unchanged: not repeated
    await fill(log, 2, topic="x")
    await run_turns()
    assert sink.positions == [bm(3), bm(5)]  # the interval since the last ack passed
    await fill(log, 1, topic="x")
    await run_turns()
    assert sink.positions == [bm(3), bm(5)]
    await clock.advance(1)
    await turns_until(lambda: sink.positions == [bm(3), bm(5), bm(6)])
    cursor.close()
    await cursor.wait_closed()


@run_async
async def test_live_limit_delivers_before_persistence_but_acks_durable_positions(
    logs: LogFactory,
) -> None:
    clock = VirtualClock()
    log = await logs.open(clock)
    sink = FakeSink()
    cursor = cursor_for(log.live_source(), sink, "0", "live", clock=clock, limit=log.live_limit())
    cursor.start()
    await turns_until(lambda: sink.count("caught_up") == 1)
    log.append()
    await turns_until(lambda: sink.seqs == [1])
    await clock.advance(2)
    assert sink.positions == []  # nothing durable yet
    await log.flush()
    log.append()
    await turns_until(lambda: sink.seqs == [1, 2])
    await clock.advance(1)
    await turns_until(lambda: sink.positions == [bm(1)])  # 2 is not durable yet
    await log.flush()
    await clock.advance(1)
    await turns_until(lambda: sink.positions == [bm(1), bm(2)])
    cursor.close()
    await cursor.wait_closed()


@run_async
async def test_live_cursor_replays_durable_history_then_reads_ahead_of_disk(
    logs: LogFactory,
) -> None:
    clock = VirtualClock()
    log = await logs.open(clock)
    await fill(log, 3)
    sink = FakeSink()
    cursor = cursor_for(
        log.live_source(),
        sink,
        "0",
        "live",
        clock=clock,
        limit=log.live_limit(),
        batch_count=2,
    )
    cursor.start()
    await turns_until(lambda: sink.count("caught_up") == 1)
    assert sink.seqs == [1, 2, 3]
    log.append()
    log.append()
    await turns_until(lambda: sink.seqs == [1, 2, 3, 4, 5])
    assert log.durable_seq == 3
    assert sink.batches == sink.calls  # durable or not, each read reached the sink whole
    cursor.close()
    await cursor.wait_closed()


# -- pause / resume ------------------------------------------------------------------


@run_async
async def test_pause_keeps_the_position_and_resume_continues(logs: LogFactory) -> None:
    clock = VirtualClock()
    log = await logs.open(clock)
    await fill(log, 3)
    sink = FakeSink()
    cursor = cursor_for(log, sink, "0", clock=clock)
    cursor.start()
    await turns_until(lambda: sink.count("caught_up") == 1)
    await cursor.park()
    await fill(log, 3)
    await run_turns()
    assert sink.seqs == [1, 2, 3]
    cursor.resume()
    await turns_until(lambda: len(sink.got) == 6)
    assert sink.seqs == list(range(1, 7))
    cursor.close()
    await cursor.wait_closed()


@run_async
async def test_created_paused(logs: LogFactory) -> None:
    clock = VirtualClock()
    log = await logs.open(clock)
    await fill(log, 3)
    sink = FakeSink()
    cursor = cursor_for(log, sink, "0", "pause", clock=clock)
    cursor.start(paused=True)
    await run_turns()
    assert sink.got == [] and log.reads == 0
    cursor.resume()
    await turns_until(lambda: len(sink.got) == 3)
    cursor.close()
    await cursor.wait_closed()


@run_async
async def test_pause_mid_batch_under_pacing_loses_nothing(logs: LogFactory) -> None:
    clock = VirtualClock()
    log = await logs.open(clock)
    await fill(log, 10)
    sink = FakeSink(clock=clock)
    cursor = cursor_for(log, sink, "0", "rate=10", clock=clock)
    cursor.start()
    await turns_until(lambda: len(sink.got) == 1)
    await clock.advance(0.1)
    await turns_until(lambda: len(sink.got) == 2)
    await cursor.park()
    await clock.advance(5)
    assert sink.seqs == [1, 2]
    cursor.resume()
    for _ in range(10):
        await clock.advance(0.1)
        await run_turns()
    assert sink.seqs == list(range(1, 11))
    cursor.close()
    await cursor.wait_closed()


@run_async
async def test_three_paused_subscriptions_resumed_together_interleave_in_log_order(
    logs: LogFactory,
) -> None:
    clock = VirtualClock()
    log = await logs.open(clock)
    for i in range(12):
        log.append(topic="abc"[i % 3])
    await log.flush()
    shared: list[tuple[str, int]] = []
    cursors = []
    for name, spec in (("a", "0"), ("b", "0"), ("c", bm(6))):
        sink = FakeSink(name, accept=topic_is(name), shared=shared)
        cursor = cursor_for(log, sink, spec, "pause", clock=clock)
        cursor.start(paused=True)
        cursors.append(cursor)
    await run_turns()
    group = resume_together(cursors)
    group.start()
    assert all(c.done for c in cursors)
    await turns_until(lambda: len(shared) == 10)
    assert shared == [
        ("a", 1), ("b", 2), ("a", 4), ("b", 5), ("a", 7), ("b", 8), ("c", 9),
        ("a", 10), ("b", 11), ("c", 12),
    ]  # fmt: skip
    for i in range(3):
        log.append(topic="cba"[i])
    await log.flush()
    await turns_until(lambda: len(shared) == 13)
    assert shared[10:] == [("c", 13), ("b", 14), ("a", 15)]
    assert [m.sub_id for m in group.members] == ["a", "b", "c"]
    # Pausing one member alone splits it off at its position.
    member = group.take_member("b")
    alone = ReplayCursor(log, [member], clock=clock)
    alone.start(paused=True)
    await fill(log, 3, topic="b")
    await run_turns()
    assert shared[13:] == []
    alone.resume()
    await turns_until(lambda: len(shared) == 16)
    assert shared[13:] == [("b", 16), ("b", 17), ("b", 18)]
    group.close()
    await group.wait_closed()
    alone.close()
    await alone.wait_closed()


@run_async
async def test_remove_one_member_of_a_group(logs: LogFactory) -> None:
    clock = VirtualClock()
    log = await logs.open(clock)
    a, b = FakeSink("a"), FakeSink("b")
    ca = cursor_for(log, a, "0", clock=clock)
    cb = cursor_for(log, b, "0", clock=clock)
    ca.start(paused=True)
    cb.start(paused=True)
    group = resume_together([ca, cb])
    group.start()
    await fill(log, 2)
    await turns_until(lambda: len(a.got) == 2 and len(b.got) == 2)
    assert group.remove("a") and not group.remove("a")
    await fill(log, 1)
    await turns_until(lambda: len(b.got) == 3)
    assert len(a.got) == 2 and a.count("completed") == 0
    assert group.remove("b")
    await asyncio.wait_for(group.wait_closed(), 5)


# -- flow control, cancellation, errors ----------------------------------------------------


@run_async
async def test_a_slow_reader_stops_the_cursor_reading(logs: LogFactory) -> None:
    clock = VirtualClock()
    log = await logs.open(clock)
    for _ in range(50):
        log.append()
    await log.flush()
    sink = FakeSink()
    sink.room.clear()
    cursor = cursor_for(log, sink, "0", clock=clock, batch_count=10)
    cursor.start()
    await run_turns(500)
    assert log.reads == 1 and len(sink.got) == 10
    sink.room.set()
    await turns_until(lambda: len(sink.got) == 50)
    assert sink.seqs == list(range(1, 51))
    assert max(log.read_sizes) == 10
    cursor.close()
    await cursor.wait_closed()


@run_async
async def test_close_is_clean_while_blocked_in_deliver_or_waiting(logs: LogFactory) -> None:
    clock = VirtualClock()
    log = await logs.open(clock)
    await fill(log, 3)
    blocked, idle = FakeSink("blocked"), FakeSink("idle")
    blocked.room.clear()
    c1 = cursor_for(log, blocked, "0", clock=clock)
    c2 = cursor_for(log, idle, "0", "conflation=1s", clock=clock, position_interval=0.5)
    c1.start()
    c2.start()
    await turns_until(lambda: idle.count("caught_up") == 1 and len(blocked.got) == 3)
    c1.close()
    await c1.wait_closed()
    c2.close()
    await c2.wait_closed()
    await log.close()  # the real log's flusher is a task of its own
    await run_turns()
    assert c1.done and c2.done and c1.error is None and c2.error is None
    assert asyncio.all_tasks() == {asyncio.current_task()}
    assert clock.sleepers == 0


@run_async
async def test_retention_gap_is_skipped() -> None:
    """Fake only: the real log's retention removes whole journals; the fake drops an
    exact prefix, so the gap can start mid-batch."""
    clock = VirtualClock()
    log = FakeLog(clock)
    await fill(log, 10)
    sink = FakeSink()
    cursor = cursor_for(log, sink, bm(2), clock=clock, batch_count=3)
    log.drop_before(6)
    cursor.start()
    await turns_until(lambda: sink.count("caught_up") == 1)
    assert sink.seqs == [6, 7, 8, 9, 10]
    cursor.close()
    await cursor.wait_closed()


class BrokenLog(FakeLog):
    """A source that breaks the contract: every batch skips its first record."""

    async def read_view(self, from_seq: int, **kwargs: Any) -> RecordBatch:
        batch = await super().read_view(from_seq, **kwargs)
        return RecordBatch.from_records(batch[1:])


@run_async
async def test_a_source_that_skips_records_fails_the_cursor() -> None:
    """Fake only: injecting a gap needs a log that misbehaves."""
    clock = VirtualClock()
    log = BrokenLog(clock)
    await fill(log, 3)
    sink = FakeSink()
    errors: list[Exception] = []
    cursor = cursor_for(log, sink, "0", clock=clock, on_error=lambda c, e: errors.append(e))
    cursor.start()
    await asyncio.wait_for(cursor.wait_closed(), 5)
    assert isinstance(cursor.error, ReplayGapError) and errors == [cursor.error]
    assert sink.got == []


# -- conflation ------------------------------------------------------------------------


@run_async
async def test_conflation_on_the_replay_timeline_then_live(logs: LogFactory) -> None:
    clock = VirtualClock()
    log = await logs.open(clock)
    t = time_us(clock) - 100_000_000  # recorded 100 s ago, 4 updates a second
    for i in range(8):
        log.append(body=orjson.dumps({"id": 1, "v": i}), ts_us=t + i * 250_000)
    await log.flush()
    sink = FakeSink()
    cursor = cursor_for(log, sink, "0", "conflation=1s,conflation_key=[/id]", clock=clock)
    cursor.start()
    await turns_until(lambda: len(sink.got) == 2)
    assert [(r.seq, orjson.loads(r.body)["v"]) for r in sink.got] == [(1, 3), (5, 7)]
    assert sink.got[1].bookmark == bm(5)
    await log.publish(body=orjson.dumps({"id": 1, "v": 8}))
    await clock.advance(0.5)
    await log.publish(body=orjson.dumps({"id": 1, "v": 9}))
    await run_turns()
    assert len(sink.got) == 2  # window open until 1 s after v=8
    await clock.advance(0.5)
    await turns_until(lambda: len(sink.got) == 3)
    assert (sink.got[2].seq, orjson.loads(sink.got[2].body)["v"]) == (9, 9)
    cursor.close()
    await cursor.wait_closed()


@run_async
async def test_conflation_window_flushes_at_range_end(logs: LogFactory) -> None:
    clock = VirtualClock()
    log = await logs.open(clock)
    for i in range(3):
        log.append(body=orjson.dumps({"id": 1, "v": i}))
    await log.flush()
    sink = FakeSink()
    cursor = cursor_for(
        log, sink, f"[0:{bm(3)}]", "conflation=10s,conflation_key=[/id]", clock=clock
    )
    cursor.start()
    await asyncio.wait_for(cursor.wait_closed(), 5)
    assert [(r.seq, orjson.loads(r.body)["v"]) for r in sink.got] == [(1, 2)]
    assert sink.events[-1] == ("completed", 1)


# -- pacing ----------------------------------------------------------------------------


async def paced_times(
    logs: LogFactory,
    options: str,
    stamps_s: list[float],
    *,
    size: int = 10,
    step: float,
    steps: int,
) -> list[float]:
    clock = VirtualClock()
    log = await logs.open(clock)
    base = time_us(clock) - 1_000_000_000
    for s in stamps_s:
        log.append(body=b"x" * size, ts_us=base + round(s * 1_000_000))
    await log.flush()
    sink = FakeSink(clock=clock)
    cursor = cursor_for(log, sink, "0", options, clock=clock)
    cursor.start()
    await run_turns()
    for _ in range(steps):
        await clock.advance(step)
        await run_turns()
    cursor.close()
    await cursor.wait_closed()
    assert sink.seqs == list(range(1, len(stamps_s) + 1))
    return sink.times


@run_async
async def test_rate_messages_per_second(logs: LogFactory) -> None:
    times = await paced_times(logs, "rate=10", [0] * 6, step=0.05, steps=12)
    assert times == pytest.approx([0.0, 0.1, 0.2, 0.3, 0.4, 0.5])


@run_async
async def test_rate_bytes_per_second(logs: LogFactory) -> None:
    times = await paced_times(logs, "rate=1KB", [0] * 4, size=256, step=0.05, steps=20)
    assert times == pytest.approx([0.0, 0.25, 0.5, 0.75])


@run_async
async def test_rate_twice_the_recorded_pace(logs: LogFactory) -> None:
    times = await paced_times(logs, "rate=2X", [0, 1, 3, 6], step=0.25, steps=14)
    assert times == pytest.approx([0.0, 0.5, 1.5, 3.0])


@run_async
async def test_rate_half_the_recorded_pace(logs: LogFactory) -> None:
    times = await paced_times(logs, "rate=.5X", [0, 1, 3, 6], step=0.5, steps=26)
    assert times == pytest.approx([0.0, 2.0, 6.0, 12.0])


@run_async
async def test_rate_max_gap_skips_a_long_silence(logs: LogFactory) -> None:
    times = await paced_times(logs, "rate=5X,rate_max_gap=10s", [0, 1, 61, 62], step=0.1, steps=110)
    assert times == pytest.approx([0.0, 0.2, 10.2, 10.4])


@run_async
async def test_rate_counts_only_messages_the_filter_let_through(logs: LogFactory) -> None:
    clock = VirtualClock()
    log = await logs.open(clock)
    for i in range(12):
        log.append(topic="a" if i % 3 == 0 else "b")
    await log.flush()
    sink = FakeSink(clock=clock, accept=topic_is("a"))
    cursor = cursor_for(log, sink, "0", "rate=10", clock=clock)
    cursor.start()
    for _ in range(4):
        await run_turns()
        await clock.advance(0.1)
    await turns_until(lambda: len(sink.got) == 4)
    assert sink.seqs == [1, 4, 7, 10]
    assert sink.times == pytest.approx([0.0, 0.1, 0.2, 0.3])
    cursor.close()
    await cursor.wait_closed()


@run_async
async def test_group_with_different_durability_waits_for_the_strictest(
    logs: LogFactory,
) -> None:
    clock = VirtualClock()
    log = await logs.open(clock)
    source = log.live_source()  # cursors resumed together share one source
    fast, safe = FakeSink("fast"), FakeSink("safe")
    c_fast = cursor_for(source, fast, "0", "live", clock=clock, limit=log.live_limit())
    c_safe = cursor_for(source, safe, "0", clock=clock)  # the default: durable
    c_fast.start(paused=True)
    c_safe.start(paused=True)
    group = resume_together([c_fast, c_safe])
    group.start()
    log.append()
    await run_turns()
    assert fast.got == [] and safe.got == []
    await log.flush()
    await turns_until(lambda: fast.seqs == [1] and safe.seqs == [1])
    log.append()
    await run_turns()
    assert fast.seqs == [1] and safe.seqs == [1]
    await log.flush()
    await turns_until(lambda: fast.seqs == [1, 2] and safe.seqs == [1, 2])
    group.close()
    await group.wait_closed()


@run_async
async def test_no_position_ack_while_conflation_holds_messages(logs: LogFactory) -> None:
    clock = VirtualClock()
    log = await logs.open(clock)
    sink = FakeSink()
    cursor = cursor_for(
        log, sink, "0", "conflation=5s,conflation_key=[/id]", clock=clock, position_interval=1
    )
    cursor.start()
    await run_turns()
    await log.publish(body=b'{"id":1}')
    await clock.advance(3)
    assert sink.positions == [] and sink.got == []
    await clock.advance(2)
    await turns_until(lambda: len(sink.got) == 1)
    await clock.advance(1)
    await turns_until(lambda: sink.positions == [bm(1)])
    cursor.close()
    await cursor.wait_closed()


@run_async
async def test_function_limit_bounds_reads_and_is_awaited_past_its_end(
    logs: LogFactory,
) -> None:
    """The cursor reads no further than the limit's ``seq`` even with more durable, and
    at the limit awaits its ``wait`` for exactly the next record it needs."""
    clock = VirtualClock()
    log = await logs.open(clock)
    await fill(log, 5)
    allowed = 0
    asked: list[int] = []
    moved = asyncio.Event()

    async def wait(seq: int) -> None:
        asked.append(seq)
        while allowed < seq:
            moved.clear()
            await moved.wait()

    def allow(seq: int) -> None:
        nonlocal allowed
        allowed = seq
        moved.set()

    sink = FakeSink()
    cursor = cursor_for(log, sink, "0", clock=clock, limit=FunctionLimit(lambda: allowed, wait))
    cursor.start()
    await turns_until(lambda: asked == [1])
    assert sink.got == [] and log.reads == 0
    allow(3)
    await turns_until(lambda: asked == [1, 4])
    assert sink.seqs == [1, 2, 3]
    assert max(log.read_sizes) == 3  # never read past the limit
    allow(5)
    await turns_until(lambda: asked == [1, 4, 6])
    assert sink.seqs == [1, 2, 3, 4, 5]
    assert sink.count("caught_up") == 1
    cursor.close()
    await cursor.wait_closed()
    assert cursor.error is None


# -- planning a member ----------------------------------------------------------------


@run_async
async def test_bookmark_not_found_fail_policy(logs: LogFactory) -> None:
    clock = VirtualClock()
    log = await logs.open(clock)
    options = parse_subscribe_options("bookmark_not_found=fail")
    with pytest.raises(BookmarkNotFound):
        build_member(FakeSink(), parse_bookmark(bm(5)), options, log)


@run_async
async def test_run_propagates_failures() -> None:
    """Fake only: injecting a gap needs a log that misbehaves."""
    clock = VirtualClock()
    log = BrokenLog(clock)
    await fill(log, 2)
    cursor = cursor_for(log, FakeSink(), "0", clock=clock)
    with pytest.raises(ReplayGapError):
        await cursor.run()
    assert cursor.done


@run_async
async def test_moving_a_member_during_a_blocked_delivery_never_duplicates(logs: LogFactory) -> None:
    clock = VirtualClock()
    log = await logs.open(clock)
    await fill(log, 7)
    sink = FakeSink()
    sink.room.clear()  # the client stops reading after the first chunk
    old = cursor_for(log, sink, "0", clock=clock, batch_count=3)
    old.start()
    await turns_until(lambda: len(sink.got) == 3)
    member = old.take_member("s1")
    old.close()  # cancels deliver() while it waits for room
    await old.wait_closed()
    new = ReplayCursor(log, [member], clock=clock, batch_count=3)
    new.start()
    await run_turns()
    sink.room.set()
    await turns_until(lambda: len(sink.got) == 7)
    await run_turns()
    assert sink.seqs == list(range(1, 8))
    new.close()
    await new.wait_closed()


@run_async
async def test_live_limit_over_a_log_serving_durable_records_only(logs: LogFactory) -> None:
    """A ``live`` limit over the log itself (not the engine's appended view): the
    record exists but cannot be read until it is durable; the cursor waits, no error."""
    clock = VirtualClock()
    log = await logs.open(clock, durable_reads_only=True)
    sink = FakeSink()
    cursor = cursor_for(log, sink, "0", "live", clock=clock, limit=log.live_limit())
    cursor.start()
    await run_turns()
    log.append()
    await run_turns()
    assert sink.got == [] and cursor.error is None
    await log.flush()
    await turns_until(lambda: sink.seqs == [1])
    cursor.close()
    await cursor.wait_closed()
    assert cursor.error is None


# -- the columnar path and the journal files ---------------------------------------------


@run_async
async def test_a_lone_member_is_handed_whole_batches_a_group_single_records(
    logs: LogFactory,
) -> None:
    clock = VirtualClock()
    log = await logs.open(clock)
    await fill(log, 6)
    alone = FakeSink("alone")
    cursor = cursor_for(log, alone, "0", clock=clock, batch_count=3)
    cursor.start()
    await turns_until(lambda: alone.count("caught_up") == 1)
    assert alone.seqs == list(range(1, 7))
    assert alone.batches == alone.calls == 2  # each read went to the sink as it was read
    cursor.close()
    await cursor.wait_closed()
    a, b = FakeSink("a"), FakeSink("b")
    ca = cursor_for(log, a, "0", clock=clock, batch_count=3)
    cb = cursor_for(log, b, bm(2), clock=clock, batch_count=3)
    ca.start(paused=True)
    cb.start(paused=True)
    group = resume_together([ca, cb])
    group.start()
    await turns_until(lambda: a.count("caught_up") == 1 and b.count("caught_up") == 1)
    assert a.seqs == list(range(1, 7)) and b.seqs == list(range(3, 7))
    assert a.batches == b.batches == 0  # interleaved in log order, one record at a time
    group.close()
    await group.wait_closed()


@run_async
async def test_replay_from_journal_files_across_rolls(tmp_path: Path) -> None:
    """Real log only: durable reads from the journal files (no tail cache), with batches
    that end at journal boundaries, for a lone member and for a group. File reads run in
    worker threads, so this waits on real time, not loop turns."""
    clock = VirtualClock()
    log = await TxlogLog.open(tmp_path, clock, tail_cache_bytes=0, journal_size=16 * 1024)
    try:
        for i in range(600):
            log.append(topic="ab"[i % 2], body=orjson.dumps({"i": i}))
        await log.flush()
        assert len(log.txlog.journals()) > 2
        alone = FakeSink("alone")
        cursor = cursor_for(log, alone, "0", clock=clock, batch_count=128)
        cursor.start()
        await async_wait_until(lambda: alone.count("caught_up") == 1, timeout=30)
        assert alone.seqs == list(range(1, 601))
        assert [orjson.loads(r.body)["i"] for r in alone.got] == list(range(600))
        assert alone.batches == alone.calls
        cursor.close()
        await cursor.wait_closed()
        shared: list[tuple[str, int]] = []
        a = FakeSink("a", accept=topic_is("a"), shared=shared)
        b = FakeSink("b", accept=topic_is("b"), shared=shared)
        ca = cursor_for(log, a, "0", clock=clock, batch_count=128)
        cb = cursor_for(log, b, log.records[299].bookmark, clock=clock, batch_count=128)
        ca.start(paused=True)
        cb.start(paused=True)
        group = resume_together([ca, cb])
        group.start()
        await async_wait_until(lambda: len(shared) == 450, timeout=30)
        assert shared == [("a", s) for s in range(1, 301, 2)] + [
            ("ab"[(s - 1) % 2], s) for s in range(301, 601)
        ]
        group.close()
        await group.wait_closed()
        assert cursor.error is None and group.error is None
    finally:
        await log.close()
