"""The async replay driver over an in-memory log, with a virtual clock."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from server.bookmarks import format_time_bookmark, parse_bookmark
from server.clock import VirtualClock, time_us
from server.protocol.options import parse_subscribe_options
from server.replay import ReplayCursor, ReplayGapError, build_member, resume_together
from server.txlog.batch import RecordBatch
from server.txlog.record import RecordKind
from tests.unit.replay.fakes import (
    PUB,
    PUB_B,
    AppendedHorizon,
    FakeLog,
    FakeSink,
    run_async,
    settle,
    until,
)


def cursor_for(
    log: FakeLog,
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


async def fill(log: FakeLog, n: int, **kwargs: Any) -> None:
    for _ in range(n):
        log.append(**kwargs)
    await log.flush()


# -- start points, cut-over, completion --------------------------------------------------


@run_async
async def test_epoch_replays_then_follows_live_without_gap_or_duplicate() -> None:
    clock = VirtualClock()
    log = FakeLog(clock)
    await fill(log, 5)
    sink = FakeSink(clock=clock)
    cursor = cursor_for(log, sink, "0", clock=clock)
    cursor.start()
    await until(lambda: sink.count("caught_up") == 1)
    assert sink.seqs == [1, 2, 3, 4, 5]
    assert sink.events[-1] == ("caught_up", 5)
    log.append()
    log.append()
    await settle()
    assert sink.seqs == [1, 2, 3, 4, 5]  # not durable yet: not delivered
    await log.flush()
    await until(lambda: len(sink.got) == 7)
    assert sink.seqs == list(range(1, 8))
    assert sink.count("caught_up") == 1
    cursor.close()
    await cursor.wait_closed()
    assert cursor.done and cursor.error is None


@run_async
async def test_now_delivers_only_what_comes_next() -> None:
    clock = VirtualClock()
    log = FakeLog(clock)
    await fill(log, 3)
    sink = FakeSink(clock=clock)
    cursor = cursor_for(log, sink, "0|1|", clock=clock)
    cursor.start()
    await until(lambda: sink.count("caught_up") == 1)
    assert sink.got == []
    await log.publish()
    await until(lambda: sink.seqs == [4])
    cursor.close()
    await cursor.wait_closed()


@run_async
async def test_bookmark_resumes_after_it_and_list_after_the_oldest() -> None:
    clock = VirtualClock()
    log = FakeLog(clock)
    await fill(log, 6)
    one, several = FakeSink("one"), FakeSink("several")
    c1 = cursor_for(log, one, bm(3), clock=clock)
    c2 = cursor_for(log, several, f"{bm(5)},{bm(2)},{bm(9, PUB_B)}", clock=clock)
    c1.start()
    c2.start()
    await until(lambda: one.count("caught_up") == 1 and several.count("caught_up") == 1)
    assert one.seqs == [4, 5, 6]
    assert several.seqs == [3, 4, 5, 6]
    c1.close()
    await c1.wait_closed()
    c2.close()
    await c2.wait_closed()


@pytest.mark.parametrize(
    ("policy", "expected"), [("", [4]), ("bookmark_not_found=epoch", [1, 2, 3, 4])]
)
def test_unknown_bookmark_policies(policy: str, expected: list[int]) -> None:
    @run_async
    async def body() -> None:
        clock = VirtualClock()
        log = FakeLog(clock)
        await fill(log, 3)
        sink = FakeSink()
        cursor = cursor_for(log, sink, bm(77, PUB_B), policy, clock=clock)
        cursor.start()
        await until(lambda: sink.count("caught_up") == 1)
        await log.publish()
        await until(lambda: len(sink.got) == len(expected))
        assert sink.seqs == expected
        cursor.close()
        await cursor.wait_closed()

    body()


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
def test_ranges_over_a_static_log(template: str, expected: list[int]) -> None:
    @run_async
    async def body() -> None:
        clock = VirtualClock()
        log = FakeLog(clock)
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
        await settle()
        assert sink.seqs == expected

    body()


@run_async
async def test_range_end_bookmark_not_yet_in_the_log_waits_for_it() -> None:
    clock = VirtualClock()
    log = FakeLog(clock)
    await fill(log, 2)
    sink = FakeSink()
    cursor = cursor_for(log, sink, f"[0:{bm(2, PUB_B)}]", clock=clock)
    cursor.start()
    await until(lambda: len(sink.got) == 2)
    await log.publish(publisher=PUB_B)
    await log.publish()
    await log.publish(publisher=PUB_B)
    await log.publish()
    await asyncio.wait_for(cursor.wait_closed(), 5)
    assert sink.seqs == [1, 2, 3, 4, 5]
    assert sink.events[-1] == ("completed", 5)


@run_async
async def test_future_end_time_completes_when_the_clock_passes_it() -> None:
    clock = VirtualClock()
    log = FakeLog(clock)
    await fill(log, 2)
    end = time_us(clock) + 10_000_000
    sink = FakeSink()
    cursor = cursor_for(log, sink, f"[0:{format_time_bookmark(end)}]", clock=clock)
    cursor.start()
    await until(lambda: len(sink.got) == 2)
    await clock.advance(5)
    await log.publish()
    await until(lambda: len(sink.got) == 3)
    await clock.advance(4.99)
    assert not cursor.done
    await clock.advance(0.02)  # past the end, no message needed
    await asyncio.wait_for(cursor.wait_closed(), 5)
    assert sink.events[-1] == ("completed", 3)
    await log.publish()
    await settle()
    assert sink.seqs == [1, 2, 3]


@run_async
async def test_future_end_time_includes_a_record_stamped_at_the_end() -> None:
    clock = VirtualClock()
    log = FakeLog(clock)
    end = time_us(clock) + 2_000_000
    sink = FakeSink()
    cursor = cursor_for(log, sink, f"[0:{format_time_bookmark(end)}]", clock=clock)
    cursor.start()
    await settle()
    log.append(ts_us=end)  # appended just in time, flushed after the end passed
    await clock.advance(3)
    await settle()
    assert not cursor.done  # the end is settled but seq 1 is not durable yet
    log.append()
    await log.flush()
    await asyncio.wait_for(cursor.wait_closed(), 5)
    assert sink.seqs == [1]


@run_async
async def test_future_start_time_skips_what_comes_before_it() -> None:
    clock = VirtualClock()
    log = FakeLog(clock)
    await fill(log, 2)
    start = time_us(clock) + 10_000_000
    sink = FakeSink()
    cursor = cursor_for(log, sink, format_time_bookmark(start), clock=clock)
    cursor.start()
    await until(lambda: sink.count("caught_up") == 1)
    await log.publish()  # before the start time
    await clock.advance(10)
    await log.publish()  # at the start time
    await log.publish()
    await until(lambda: len(sink.got) == 2)
    assert sink.seqs == [4, 5]
    cursor.close()
    await cursor.wait_closed()


# -- filters, top_n, kinds ---------------------------------------------------------------


def topic_is(name: str) -> Any:
    return lambda rec: rec.topic == name


@run_async
async def test_top_n_counts_delivered_messages() -> None:
    clock = VirtualClock()
    log = FakeLog(clock)
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
async def test_top_n_after_catch_up_continues_live() -> None:
    clock = VirtualClock()
    log = FakeLog(clock)
    await fill(log, 1)
    sink = FakeSink()
    cursor = cursor_for(log, sink, "0", "top_n=3", clock=clock)
    cursor.start()
    await until(lambda: sink.count("caught_up") == 1)
    for _ in range(4):
        await log.publish()
    await asyncio.wait_for(cursor.wait_closed(), 5)
    assert sink.seqs == [1, 2, 3]
    assert [k for k, _ in sink.events if k != "deliver"] == ["caught_up", "completed"]


@run_async
async def test_filter_applies_during_replay_and_live() -> None:
    clock = VirtualClock()
    log = FakeLog(clock)
    await fill(log, 3, topic="x")
    await fill(log, 1, topic="a")
    sink = FakeSink(accept=topic_is("a"))
    cursor = cursor_for(log, sink, "0", clock=clock)
    cursor.start()
    await until(lambda: sink.count("caught_up") == 1)
    await fill(log, 2, topic="x")
    await fill(log, 1, topic="a")
    await until(lambda: len(sink.got) == 2)
    assert sink.seqs == [4, 7]
    cursor.close()
    await cursor.wait_closed()


@run_async
async def test_only_message_kinds_are_delivered() -> None:
    clock = VirtualClock()
    log = FakeLog(clock)
    log.append()
    log.append(kind=RecordKind.QUEUE_ACK)
    log.append(kind=RecordKind.DELTA_PUBLISH)
    await log.flush()
    sink = FakeSink()
    cursor = cursor_for(log, sink, "0", clock=clock)
    cursor.start()
    await until(lambda: sink.count("caught_up") == 1)
    assert sink.seqs == [1, 3]
    cursor.close()
    await cursor.wait_closed()


# -- position acks -------------------------------------------------------------------


@run_async
async def test_periodic_position_ack_for_a_sparse_subscriber() -> None:
    clock = VirtualClock()
    log = FakeLog(clock)
    await fill(log, 3, topic="x")
    sink = FakeSink(accept=topic_is("a"))
    cursor = cursor_for(log, sink, "0", clock=clock, position_interval=1.0)
    cursor.start()
    await until(lambda: sink.count("caught_up") == 1)
    await clock.advance(0.5)
    assert sink.positions == []
    await clock.advance(0.5)
    await until(lambda: sink.positions == [bm(3)])
    await clock.advance(3)
    assert sink.positions == [bm(3)]  # unchanged: not repeated
    await fill(log, 2, topic="x")
    await settle()
    assert sink.positions == [bm(3), bm(5)]  # the interval since the last ack passed
    await fill(log, 1, topic="x")
    await settle()
    assert sink.positions == [bm(3), bm(5)]
    await clock.advance(1)
    await until(lambda: sink.positions == [bm(3), bm(5), bm(6)])
    cursor.close()
    await cursor.wait_closed()


@run_async
async def test_live_horizon_delivers_before_persistence_but_acks_durable_positions() -> None:
    clock = VirtualClock()
    log = FakeLog(clock)
    horizon = AppendedHorizon(log)
    sink = FakeSink()
    cursor = cursor_for(log, sink, "0", "live", clock=clock, horizon=horizon)
    cursor.start()
    await until(lambda: sink.count("caught_up") == 1)
    log.append()
    log.append()
    horizon.poke()
    await until(lambda: sink.seqs == [1, 2])
    await clock.advance(2)
    assert sink.positions == []  # nothing durable yet
    await log.flush(1)
    await clock.advance(1)
    await until(lambda: sink.positions == [bm(1)])
    await log.flush()
    await clock.advance(1)
    await until(lambda: sink.positions == [bm(1), bm(2)])
    cursor.close()
    await cursor.wait_closed()


# -- pause / resume ------------------------------------------------------------------


@run_async
async def test_pause_keeps_the_position_and_resume_continues() -> None:
    clock = VirtualClock()
    log = FakeLog(clock)
    await fill(log, 3)
    sink = FakeSink()
    cursor = cursor_for(log, sink, "0", clock=clock)
    cursor.start()
    await until(lambda: sink.count("caught_up") == 1)
    await cursor.park()
    await fill(log, 3)
    await settle()
    assert sink.seqs == [1, 2, 3]
    cursor.resume()
    await until(lambda: len(sink.got) == 6)
    assert sink.seqs == list(range(1, 7))
    cursor.close()
    await cursor.wait_closed()


@run_async
async def test_created_paused() -> None:
    clock = VirtualClock()
    log = FakeLog(clock)
    await fill(log, 3)
    sink = FakeSink()
    cursor = cursor_for(log, sink, "0", "pause", clock=clock)
    cursor.start(paused=True)
    await settle()
    assert sink.got == [] and log.reads == 0
    cursor.resume()
    await until(lambda: len(sink.got) == 3)
    cursor.close()
    await cursor.wait_closed()


@run_async
async def test_pause_mid_batch_under_pacing_loses_nothing() -> None:
    clock = VirtualClock()
    log = FakeLog(clock)
    await fill(log, 10)
    sink = FakeSink(clock=clock)
    cursor = cursor_for(log, sink, "0", "rate=10", clock=clock)
    cursor.start()
    await until(lambda: len(sink.got) == 1)
    await clock.advance(0.1)
    await until(lambda: len(sink.got) == 2)
    await cursor.park()
    await clock.advance(5)
    assert sink.seqs == [1, 2]
    cursor.resume()
    for _ in range(10):
        await clock.advance(0.1)
        await settle()
    assert sink.seqs == list(range(1, 11))
    cursor.close()
    await cursor.wait_closed()


@run_async
async def test_three_paused_subscriptions_resumed_together_interleave_in_log_order() -> None:
    clock = VirtualClock()
    log = FakeLog(clock)
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
    await settle()
    group = resume_together(cursors)
    group.start()
    assert all(c.done for c in cursors)
    await until(lambda: len(shared) == 10)
    assert shared == [
        ("a", 1), ("b", 2), ("a", 4), ("b", 5), ("a", 7), ("b", 8), ("c", 9),
        ("a", 10), ("b", 11), ("c", 12),
    ]  # fmt: skip
    for i in range(3):
        log.append(topic="cba"[i])
    await log.flush()
    await until(lambda: len(shared) == 13)
    assert shared[10:] == [("c", 13), ("b", 14), ("a", 15)]
    assert [m.sub_id for m in group.members] == ["a", "b", "c"]
    # Pausing one member alone splits it off at its position.
    member = group.take_member("b")
    alone = ReplayCursor(log, [member], clock=clock)
    alone.start(paused=True)
    await fill(log, 3, topic="b")
    await settle()
    assert shared[13:] == []
    alone.resume()
    await until(lambda: len(shared) == 16)
    assert shared[13:] == [("b", 16), ("b", 17), ("b", 18)]
    group.close()
    await group.wait_closed()
    alone.close()
    await alone.wait_closed()


@run_async
async def test_remove_one_member_of_a_group() -> None:
    clock = VirtualClock()
    log = FakeLog(clock)
    a, b = FakeSink("a"), FakeSink("b")
    ca = cursor_for(log, a, "0", clock=clock)
    cb = cursor_for(log, b, "0", clock=clock)
    ca.start(paused=True)
    cb.start(paused=True)
    group = resume_together([ca, cb])
    group.start()
    await fill(log, 2)
    await until(lambda: len(a.got) == 2 and len(b.got) == 2)
    assert group.remove("a") and not group.remove("a")
    await fill(log, 1)
    await until(lambda: len(b.got) == 3)
    assert len(a.got) == 2 and a.count("completed") == 0
    assert group.remove("b")
    await asyncio.wait_for(group.wait_closed(), 5)


# -- flow control, cancellation, errors ----------------------------------------------------


@run_async
async def test_a_slow_reader_stops_the_cursor_reading() -> None:
    clock = VirtualClock()
    log = FakeLog(clock)
    for _ in range(50):
        log.append()
    await log.flush()
    sink = FakeSink()
    sink.room.clear()
    cursor = cursor_for(log, sink, "0", clock=clock, batch_count=10)
    cursor.start()
    await settle(500)
    assert log.reads == 1 and len(sink.got) == 10
    sink.room.set()
    await until(lambda: len(sink.got) == 50)
    assert sink.seqs == list(range(1, 51))
    assert max(log.read_sizes) == 10
    cursor.close()
    await cursor.wait_closed()


@run_async
async def test_close_is_clean_while_blocked_in_deliver_or_waiting() -> None:
    clock = VirtualClock()
    log = FakeLog(clock)
    await fill(log, 3)
    blocked, idle = FakeSink("blocked"), FakeSink("idle")
    blocked.room.clear()
    c1 = cursor_for(log, blocked, "0", clock=clock)
    c2 = cursor_for(log, idle, "0", "conflation=1s", clock=clock, position_interval=0.5)
    c1.start()
    c2.start()
    await until(lambda: idle.count("caught_up") == 1 and len(blocked.got) == 3)
    c1.close()
    await c1.wait_closed()
    c2.close()
    await c2.wait_closed()
    await settle()
    assert c1.done and c2.done and c1.error is None and c2.error is None
    assert asyncio.all_tasks() == {asyncio.current_task()}
    assert clock.sleepers == 0


@run_async
async def test_retention_gap_is_skipped() -> None:
    clock = VirtualClock()
    log = FakeLog(clock)
    await fill(log, 10)
    sink = FakeSink()
    cursor = cursor_for(log, sink, bm(2), clock=clock, batch_count=3)
    log.drop_before(6)
    cursor.start()
    await until(lambda: sink.count("caught_up") == 1)
    assert sink.seqs == [6, 7, 8, 9, 10]
    cursor.close()
    await cursor.wait_closed()


class BrokenLog(FakeLog):
    async def read_view(self, from_seq: int, **kwargs: Any) -> RecordBatch:
        batch = await super().read_view(from_seq, **kwargs)
        return RecordBatch.from_records(batch[1:])  # skips a record


@run_async
async def test_a_source_that_skips_records_fails_the_cursor() -> None:
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
async def test_conflation_on_the_replay_timeline_then_live() -> None:
    clock = VirtualClock()
    log = FakeLog(clock)
    t = time_us(clock) - 100_000_000  # recorded 100 s ago, 4 updates a second
    for i in range(8):
        log.append(body=orjson.dumps({"id": 1, "v": i}), ts_us=t + i * 250_000)
    await log.flush()
    sink = FakeSink()
    cursor = cursor_for(log, sink, "0", "conflation=1s,conflation_key=[/id]", clock=clock)
    cursor.start()
    await until(lambda: len(sink.got) == 2)
    assert [(r.seq, orjson.loads(r.body)["v"]) for r in sink.got] == [(1, 3), (5, 7)]
    assert sink.got[1].bookmark == bm(5)
    await log.publish(body=orjson.dumps({"id": 1, "v": 8}))
    await clock.advance(0.5)
    await log.publish(body=orjson.dumps({"id": 1, "v": 9}))
    await settle()
    assert len(sink.got) == 2  # window open until 1 s after v=8
    await clock.advance(0.5)
    await until(lambda: len(sink.got) == 3)
    assert (sink.got[2].seq, orjson.loads(sink.got[2].body)["v"]) == (9, 9)
    cursor.close()
    await cursor.wait_closed()


@run_async
async def test_conflation_window_flushes_at_range_end() -> None:
    clock = VirtualClock()
    log = FakeLog(clock)
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
    options: str, stamps_s: list[float], *, size: int = 10, step: float, steps: int
) -> list[float]:
    clock = VirtualClock()
    log = FakeLog(clock)
    base = time_us(clock) - 1_000_000_000
    for s in stamps_s:
        log.append(body=b"x" * size, ts_us=base + round(s * 1_000_000))
    await log.flush()
    sink = FakeSink(clock=clock)
    cursor = cursor_for(log, sink, "0", options, clock=clock)
    cursor.start()
    await settle()
    for _ in range(steps):
        await clock.advance(step)
        await settle()
    cursor.close()
    await cursor.wait_closed()
    assert sink.seqs == list(range(1, len(stamps_s) + 1))
    return sink.times


@run_async
async def test_rate_messages_per_second() -> None:
    times = await paced_times("rate=10", [0] * 6, step=0.05, steps=12)
    assert times == pytest.approx([0.0, 0.1, 0.2, 0.3, 0.4, 0.5])


@run_async
async def test_rate_bytes_per_second() -> None:
    times = await paced_times("rate=1KB", [0] * 4, size=256, step=0.05, steps=20)
    assert times == pytest.approx([0.0, 0.25, 0.5, 0.75])


@run_async
async def test_rate_twice_the_recorded_pace() -> None:
    times = await paced_times("rate=2X", [0, 1, 3, 6], step=0.25, steps=14)
    assert times == pytest.approx([0.0, 0.5, 1.5, 3.0])


@run_async
async def test_rate_half_the_recorded_pace() -> None:
    times = await paced_times("rate=.5X", [0, 1, 3, 6], step=0.5, steps=26)
    assert times == pytest.approx([0.0, 2.0, 6.0, 12.0])


@run_async
async def test_rate_max_gap_skips_a_long_silence() -> None:
    times = await paced_times("rate=5X,rate_max_gap=10s", [0, 1, 61, 62], step=0.1, steps=110)
    assert times == pytest.approx([0.0, 0.2, 10.2, 10.4])


@run_async
async def test_rate_counts_only_messages_the_filter_let_through() -> None:
    clock = VirtualClock()
    log = FakeLog(clock)
    for i in range(12):
        log.append(topic="a" if i % 3 == 0 else "b")
    await log.flush()
    sink = FakeSink(clock=clock, accept=topic_is("a"))
    cursor = cursor_for(log, sink, "0", "rate=10", clock=clock)
    cursor.start()
    for _ in range(4):
        await settle()
        await clock.advance(0.1)
    await until(lambda: len(sink.got) == 4)
    assert sink.seqs == [1, 4, 7, 10]
    assert sink.times == pytest.approx([0.0, 0.1, 0.2, 0.3])
    cursor.close()
    await cursor.wait_closed()


@run_async
async def test_group_with_different_durability_waits_for_the_strictest() -> None:
    clock = VirtualClock()
    log = FakeLog(clock)
    fast, safe = FakeSink("fast"), FakeSink("safe")
    appended = AppendedHorizon(log)
    c_fast = cursor_for(log, fast, "0", "live", clock=clock, horizon=appended)
    c_safe = cursor_for(log, safe, "0", clock=clock)
    c_fast.start(paused=True)
    c_safe.start(paused=True)
    group = resume_together([c_fast, c_safe])
    group.start()
    log.append()
    appended.poke()
    await settle()
    assert fast.got == [] and safe.got == []
    await log.flush()
    appended.poke()
    await until(lambda: fast.seqs == [1] and safe.seqs == [1])
    group.close()
    await group.wait_closed()


@run_async
async def test_no_position_ack_while_conflation_holds_messages() -> None:
    clock = VirtualClock()
    log = FakeLog(clock)
    sink = FakeSink()
    cursor = cursor_for(
        log, sink, "0", "conflation=5s,conflation_key=[/id]", clock=clock, position_interval=1
    )
    cursor.start()
    await settle()
    await log.publish(body=b'{"id":1}')
    await clock.advance(3)
    assert sink.positions == [] and sink.got == []
    await clock.advance(2)
    await until(lambda: len(sink.got) == 1)
    await clock.advance(1)
    await until(lambda: sink.positions == [bm(1)])
    cursor.close()
    await cursor.wait_closed()


@run_async
async def test_function_horizon() -> None:
    from server.replay import FunctionHorizon

    clock = VirtualClock()
    log = FakeLog(clock)
    appended = AppendedHorizon(log)
    horizon = FunctionHorizon(lambda: log.last_seq, appended.wait)
    sink = FakeSink()
    cursor = cursor_for(log, sink, "0", "live", clock=clock, horizon=horizon)
    cursor.start()
    log.append()
    appended.poke()
    await until(lambda: sink.seqs == [1])
    cursor.close()
    await cursor.wait_closed()


# -- the engine's entry point (run() in its own task, groups merged by moving members) --


@run_async
async def test_replay_group_engine_flow() -> None:
    from server.replay import ReplayGroup

    clock = VirtualClock()
    log = FakeLog(clock)
    for i in range(9):
        log.append(topic="abc"[i % 3])
    await log.flush()
    shared: list[tuple[str, int]] = []
    groups, tasks = [], []
    for name in "abc":
        group = ReplayGroup(log, parse_bookmark("0"), parse_subscribe_options("pause"), clock=clock)
        group.add_sink(FakeSink(name, accept=topic_is(name), shared=shared))
        group.pause()
        groups.append(group)
        tasks.append(asyncio.get_running_loop().create_task(group.run()))
    await settle()
    lead = groups[0]
    for old, task, name in zip(groups[1:], tasks[1:], "bc", strict=True):
        member = old.take_sink(name)
        task.cancel()
        old.close()
        lead.add_sink_at(member, old.position_of(member))
    lead.resume()
    await until(lambda: len(shared) == 9)
    assert shared == [("abc"[i % 3], i + 1) for i in range(9)]
    tasks[0].cancel()
    lead.close()
    await asyncio.wait(tasks)
    assert all(t.cancelled() for t in tasks)


@run_async
async def test_replay_group_fail_policy() -> None:
    from server.protocol.errors import BookmarkNotFound
    from server.replay import ReplayGroup

    clock = VirtualClock()
    log = FakeLog(clock)
    options = parse_subscribe_options("bookmark_not_found=fail")
    group = ReplayGroup(log, parse_bookmark(bm(5)), options, clock=clock)
    with pytest.raises(BookmarkNotFound):
        group.add_sink(FakeSink())
    assert group.members == ()


@run_async
async def test_run_propagates_failures() -> None:
    clock = VirtualClock()
    log = BrokenLog(clock)
    await fill(log, 2)
    cursor = cursor_for(log, FakeSink(), "0", clock=clock)
    with pytest.raises(ReplayGapError):
        await cursor.run()
    assert cursor.done


@run_async
async def test_moving_a_member_during_a_blocked_delivery_never_duplicates() -> None:
    clock = VirtualClock()
    log = FakeLog(clock)
    await fill(log, 7)
    sink = FakeSink()
    sink.room.clear()  # the client stops reading after the first chunk
    old = cursor_for(log, sink, "0", clock=clock, batch_count=3)
    old.start()
    await until(lambda: len(sink.got) == 3)
    member = old.take_member("s1")
    old.close()  # cancels deliver() while it waits for room
    await old.wait_closed()
    new = ReplayCursor(log, [member], clock=clock, batch_count=3)
    new.start()
    await settle()
    sink.room.set()
    await until(lambda: len(sink.got) == 7)
    await settle()
    assert sink.seqs == list(range(1, 8))
    new.close()
    await new.wait_closed()


class DurableOnlyLog(FakeLog):
    """Like the real transaction log: reads serve durable records only."""

    async def read_view(self, from_seq: int, **kwargs: Any) -> RecordBatch:
        upto = kwargs.pop("upto_seq", None)
        upto = self.durable_seq if upto is None else min(upto, self.durable_seq)
        return await super().read_view(from_seq, upto_seq=upto, **kwargs)


@run_async
async def test_live_horizon_over_a_log_serving_durable_records_only() -> None:
    clock = VirtualClock()
    log = DurableOnlyLog(clock)
    horizon = AppendedHorizon(log)
    sink = FakeSink()
    cursor = cursor_for(log, sink, "0", "live", clock=clock, horizon=horizon)
    cursor.start()
    await settle()
    log.append()
    horizon.poke()
    await settle()
    assert sink.got == [] and cursor.error is None
    await log.flush()
    await until(lambda: sink.seqs == [1])
    cursor.close()
    await cursor.wait_closed()
    assert cursor.error is None
