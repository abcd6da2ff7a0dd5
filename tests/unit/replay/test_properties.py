"""Properties of the driver: exact log order with no gap or duplicate under random
interleavings of appends, flushes, slow consumers, pauses and loop turns; ranges agree
with an oracle that reads the log directly. Each property runs over the in-memory fake
and over a real transaction log (one fresh log per example)."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spool.server.bookmarks import (
    BookmarkList,
    BookmarkPoint,
    Endpoint,
    Epoch,
    Now,
    Range,
    TimePoint,
    parse_bookmark,
)
from spool.server.clock import VirtualClock
from spool.server.protocol.options import SubscribeOptions
from spool.server.replay import ReplayCursor, build_member, resume_together
from spool.server.txlog.format.record import Record
from tests.support.wait import run_turns, turns_until
from tests.unit.replay.backends import BACKENDS, Backend, LogFactory, ReplayLog
from tests.unit.replay.fakes import PUB, PUB_B, FakeSink


@asynccontextmanager
async def example_log(backend: Backend, clock: VirtualClock) -> AsyncIterator[ReplayLog]:
    """A fresh log for one hypothesis example (a tmp_path fixture would be shared by all
    the examples of a test), closed when the example ends."""
    with tempfile.TemporaryDirectory(prefix="spool-replay-") as tmp:
        logs = LogFactory(backend, Path(tmp))
        try:
            yield await logs.open(clock)
        finally:
            await logs.aclose()


Op = tuple[str, int]

operations = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(1, 6)),
        st.tuples(st.just("flush"), st.integers(0, 6)),
        st.tuples(st.just("turns"), st.integers(1, 40)),
        st.tuples(st.sampled_from(["block", "unblock", "pause", "resume", "move"]), st.just(0)),
    ),
    max_size=40,
)


async def apply(
    op: Op, log: ReplayLog, sinks: list[FakeSink], cursor: ReplayCursor
) -> ReplayCursor:
    """Apply one operation; returns the cursor now feeding the sinks (``move`` makes a new
    one, taking the members over at any moment, even in the middle of a delivery)."""
    kind, n = op
    if kind == "move":
        paused = cursor.paused
        moved = ReplayCursor(
            log, cursor.take_members(), clock=cursor.clock, batch_count=cursor.batch_count
        )
        cursor.close()
        moved.start(paused=paused)
        return moved
    if kind == "append":
        for _ in range(n):
            log.append(publisher=PUB if log.last_seq % 3 else PUB_B)
    elif kind == "flush":
        await log.flush(log.durable_seq + n)
    elif kind == "turns":
        for _ in range(n):
            await asyncio.sleep(0)
    elif kind == "block":
        for sink in sinks:
            sink.room.clear()
    elif kind == "unblock":
        for sink in sinks:
            sink.room.set()
    elif kind == "pause":
        cursor.pause()
    else:
        cursor.resume()
    return cursor


def start_seq_of(start: str, log: ReplayLog) -> tuple[str, int]:
    """(bm text, first expected seq)."""
    if start == "epoch" or log.durable_seq == 0:
        return "0", 1
    if start == "now":
        return "0|1|", log.durable_seq + 1
    rec = log.records[log.durable_seq // 2]
    return rec.bookmark, rec.seq + 1


async def finish(log: ReplayLog, sinks: list[FakeSink], cursor: ReplayCursor) -> None:
    for sink in sinks:
        sink.room.set()
    cursor.resume()
    await log.flush()


@pytest.mark.parametrize("backend", BACKENDS)
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    initial=st.integers(0, 8),
    start=st.sampled_from(["epoch", "now", "bookmark"]),
    batch=st.integers(1, 4),
    ops=operations,
)
def test_cursor_delivers_exactly_the_log_order(
    backend: Backend, initial: int, start: str, batch: int, ops: list[Op]
) -> None:
    async def body() -> None:
        clock = VirtualClock()
        async with example_log(backend, clock) as log:
            for _ in range(initial):
                log.append()
            await log.flush()
            text, first = start_seq_of(start, log)
            sink = FakeSink()
            member = build_member(sink, parse_bookmark(text), SubscribeOptions(), log)
            cursor = ReplayCursor(log, [member], clock=clock, batch_count=batch)
            cursor.start()
            for op in ops:
                cursor = await apply(op, log, [sink], cursor)
                # Never ahead of the durable point, never out of order.
                assert sink.seqs == list(range(first, first + len(sink.seqs)))
                assert not sink.seqs or sink.seqs[-1] <= log.durable_seq
            await finish(log, [sink], cursor)
            await turns_until(lambda: len(sink.got) == log.last_seq - first + 1)
            assert sink.seqs == list(range(first, log.last_seq + 1))
            assert sink.count("caught_up") <= 1
            cursor.close()
            await cursor.wait_closed()
            assert cursor.error is None

    asyncio.run(body())


@pytest.mark.parametrize("backend", BACKENDS)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    initial=st.integers(0, 8),
    offsets=st.lists(st.integers(0, 8), min_size=2, max_size=3),
    batch=st.integers(1, 4),
    ops=operations,
)
def test_group_interleaves_in_log_order(
    backend: Backend, initial: int, offsets: list[int], batch: int, ops: list[Op]
) -> None:
    async def body() -> None:
        clock = VirtualClock()
        async with example_log(backend, clock) as log:
            for _ in range(initial):
                log.append()
            await log.flush()
            shared: list[tuple[str, int]] = []
            sinks, cursors, firsts = [], [], {}
            for i, offset in enumerate(offsets):
                sink = FakeSink(f"s{i}", shared=shared)
                seq = min(offset, log.durable_seq)
                text = "0" if seq == 0 else log.records[seq - 1].bookmark
                firsts[sink.sub_id] = seq + 1
                member = build_member(sink, parse_bookmark(text), SubscribeOptions(), log)
                cursor = ReplayCursor(log, [member], clock=clock, batch_count=batch)
                cursor.start(paused=True)
                sinks.append(sink)
                cursors.append(cursor)
            group = resume_together(cursors)
            group.start()
            for op in ops:
                group = await apply(op, log, sinks, group)
            await finish(log, sinks, group)

            def expected() -> list[tuple[str, int]]:
                return [
                    (s.sub_id, r.seq)
                    for r in log.records
                    for s in sinks
                    if r.seq >= firsts[s.sub_id]
                ]

            await turns_until(lambda: len(shared) == len(expected()))
            assert shared == expected()
            group.close()
            await group.wait_closed()

    asyncio.run(body())


# -- ranges against an oracle ---------------------------------------------------------


@dataclass(frozen=True)
class Pick:
    """An endpoint chosen relative to the log: a record index, or a time."""

    kind: str  # bookmark | list | time
    indexes: tuple[int, ...]
    nudge: int  # for times: offset in µs from the record's stamp


picks = st.builds(
    Pick,
    st.sampled_from(["bookmark", "list", "time"]),
    st.lists(st.integers(0, 11), min_size=1, max_size=3).map(tuple),
    st.sampled_from([-1, 0, 1]),
)


def endpoint(pick: Pick, recs: list[Record]) -> Endpoint:
    chosen = [recs[i % len(recs)] for i in pick.indexes]
    if pick.kind == "time":
        return TimePoint(chosen[0].timestamp_us + pick.nudge)
    points = tuple(BookmarkPoint(r.pub_hash, r.pub_seq) for r in chosen)
    if pick.kind == "list" and len(points) > 1:
        return BookmarkList(points)
    return points[0]


def oracle(spec: Range, recs: list[Record]) -> list[int]:
    """Which seqs a range covers, straight from its definition."""
    by_bm = {(r.pub_hash, r.pub_seq): r.seq for r in recs}

    def admitted_by_start(r: Record) -> bool:
        s = spec.start
        if isinstance(s, Epoch):
            return True
        if isinstance(s, TimePoint):
            return r.timestamp_us >= s.timestamp_us + (0 if spec.start_inclusive else 1)
        points = s.points if isinstance(s, BookmarkList) else (s,)
        oldest = min(by_bm[(p.pub_hash, p.pub_seq)] for p in points)  # type: ignore[union-attr]
        return r.seq >= oldest + (0 if spec.start_inclusive else 1)

    def admitted_by_end(r: Record) -> bool:
        e = spec.end
        if isinstance(e, Now):
            return True
        if isinstance(e, TimePoint):
            return r.timestamp_us <= e.timestamp_us - (0 if spec.end_inclusive else 1)
        points = e.points if isinstance(e, BookmarkList) else (e,)
        newest = max(by_bm[(p.pub_hash, p.pub_seq)] for p in points)  # type: ignore[union-attr]
        return r.seq <= newest - (0 if spec.end_inclusive else 1)

    return [r.seq for r in recs if admitted_by_start(r) and admitted_by_end(r)]


@pytest.mark.parametrize("backend", BACKENDS)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    gaps=st.lists(st.sampled_from([0, 1, 500_000, 1_000_000]), min_size=1, max_size=12),
    start=st.one_of(st.just(None), picks),
    end=st.one_of(st.just(None), picks),
    start_inclusive=st.booleans(),
    end_inclusive=st.booleans(),
    batch=st.integers(1, 5),
)
def test_ranges_agree_with_the_oracle(
    backend: Backend,
    gaps: list[int],
    start: Pick | None,
    end: Pick | None,
    start_inclusive: bool,
    end_inclusive: bool,
    batch: int,
) -> None:
    async def body() -> None:
        clock = VirtualClock()
        async with example_log(backend, clock) as log:
            t = 1_600_000_000_000_000
            for i, gap in enumerate(gaps):
                t += gap
                log.append(ts_us=t, publisher=PUB if i % 2 else PUB_B)
            await log.flush()
            recs = list(log.records)
            spec = Range(
                Epoch() if start is None else endpoint(start, recs),
                start_inclusive,
                Now() if end is None else endpoint(end, recs),
                end_inclusive,
            )
            sink = FakeSink()
            member = build_member(sink, spec, SubscribeOptions(), log)
            cursor = ReplayCursor(log, [member], clock=clock, batch_count=batch)
            cursor.start()
            await asyncio.wait_for(cursor.wait_closed(), 5)
            assert sink.seqs == oracle(spec, recs)
            assert sink.count("completed") == 1
            await run_turns(5)

    asyncio.run(body())
