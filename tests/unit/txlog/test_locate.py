"""Lookups resolved ahead of planning, and the view a replay planner plans against."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from spool.server.bookmarks import lookup_points, parse_bookmark
from spool.server.replay import ReplaySource, plan_replay
from spool.server.txlog import Located, TransactionLog
from spool.server.txlog.storage.source import PlainSource
from tests.support.wait import async_wait_until
from tests.unit.txlog.helpers import INSTANCE, FaultySeam, config, run

T0 = 1_700_000_000_000_000
PUB = 9


class Reads:
    """Counts the journal-file reads of lookups (block reads through ``PlainSource.read``)."""

    def __init__(self) -> None:
        self.count = 0


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[Reads]:
    counter = Reads()
    original = PlainSource.read

    def counting(self: PlainSource, offset: int, length: int) -> bytes:
        counter.count += 1
        return original(self, offset, length)

    monkeypatch.setattr(PlainSource, "read", counting)
    yield counter


def _log(tmp: Path) -> TransactionLog:
    return TransactionLog(config(tmp), INSTANCE, block_bytes=512)


async def _reopened(tmp: Path, n: int = 2000) -> TransactionLog:
    """A log of ``n`` records of publisher 9, 1 ms apart, reopened: its tail is empty, so a
    lookup of anything but the publisher's last record reads a journal file."""
    log = _log(tmp)
    await log.open()
    for i in range(1, n + 1):
        log.append(topic="t", message_type="json", pub_hash=PUB, pub_seq=i, body=b"x" * 50,
                   timestamp_us=T0 + i * 1000)  # fmt: skip
    await log.wait_durable(log.last_seq)
    await log.close()
    log = _log(tmp)
    await log.open()
    return log


def test_locate_all_resolves_what_would_read_a_file(tmp_path: Path) -> None:
    async def body() -> None:
        log = await _reopened(tmp_path)
        t_mid = T0 + 700 * 1000 + 1
        bookmarks, times = [(PUB, 500), (PUB, 1999), (PUB, 5000), (77, 1)], [t_mid]
        assert log.lookups_need_io(bookmarks, times)
        assert not log.lookups_need_io([(PUB, 2000)], [])  # the publisher's last: in memory
        found = await log.locate_all(bookmarks, times)
        assert found.bookmarks == {(PUB, 500): 500, (PUB, 1999): 1999, (PUB, 5000): None,
                                   (77, 1): None}  # fmt: skip
        assert found.times == {t_mid: 701}
        await log.close()

    run(body)


def test_the_view_answers_from_what_was_located_without_reading(
    tmp_path: Path, reads: Reads
) -> None:
    async def body() -> None:
        log = await _reopened(tmp_path)
        t_mid = T0 + 700 * 1000 + 1
        found = await log.locate_all([(PUB, 500), (PUB, 1999)], [t_mid])
        view = log.with_lookups(found)
        reads.count = 0
        assert [view.seq_for_bookmark(PUB, 500), view.seq_for_bookmark(PUB, 1999)] == [500, 1999]
        assert view.seq_for_time(t_mid) == 701
        assert reads.count == 0
        # the answers are the located ones: a view over different answers gives those
        made_up = log.with_lookups(Located(bookmarks={(PUB, 500): 42}, times={t_mid: 43}))
        assert made_up.seq_for_bookmark(PUB, 500) == 42 and made_up.seq_for_time(t_mid) == 43
        assert reads.count == 0
        # the log itself reads the file for them
        assert log.seq_for_bookmark(PUB, 500) == 500 and reads.count == 1
        await log.close()

    run(body)


def test_the_view_answers_from_memory_what_memory_knows(tmp_path: Path, reads: Reads) -> None:
    """Nothing located: the publisher table, the indexes and the tail answer, unread."""

    async def body() -> None:
        log = await _reopened(tmp_path)
        for i in range(2001, 2011):  # recent records: in the tail
            log.append(topic="t", message_type="json", pub_hash=PUB, pub_seq=i, body=b"y",
                       timestamp_us=T0 + i * 1000)  # fmt: skip
        await log.wait_durable(log.last_seq)
        view = log.with_lookups(Located())
        reads.count = 0
        assert view.seq_for_bookmark(PUB, 2010) == 2010  # the publisher's last
        assert view.seq_for_bookmark(PUB, 2005) == 2005  # in the tail
        assert view.seq_for_bookmark(PUB, 9999) is None  # beyond the publisher's last
        assert view.seq_for_bookmark(77, 1) is None  # an unknown publisher
        assert view.seq_for_time(T0 + 2005 * 1000) == 2005  # in the tail
        assert view.seq_for_time(T0 + 9_999_000) == log.last_seq + 1  # after everything
        assert reads.count == 0
        await log.close()

    run(body)


def test_memory_answers_win_over_located_ones_that_went_stale(tmp_path: Path) -> None:
    """A located answer only stands in for a file read: what memory knows is current."""

    async def body() -> None:
        log = await _reopened(tmp_path, n=100)
        future = T0 + 500 * 1000
        found = await log.locate_all([(PUB, 101)], [future])
        assert found.bookmarks[(PUB, 101)] is None and found.times[future] == 101
        for i in range(101, 111):  # 101..104 before the time, 105.. at or after it
            log.append(topic="t", message_type="json", pub_hash=PUB, pub_seq=i, body=b"z",
                       timestamp_us=T0 + (395 + i) * 1000)  # fmt: skip
        view = log.with_lookups(found)
        assert view.seq_for_bookmark(PUB, 101) == 101
        assert view.seq_for_time(future) == 105 == log.seq_for_time(future)
        await log.close()

    run(body)


def test_a_located_time_in_a_removed_journal_is_not_used(tmp_path: Path) -> None:
    async def body() -> None:
        log = await _reopened(tmp_path)
        t = T0 + 10 * 1000
        found = await log.locate_all([], [t])
        assert found.times == {t: 10}
        await log.remove(log.journals()[0].id)
        assert log.first_seq > 10
        assert log.with_lookups(found).seq_for_time(t) == log.first_seq == log.seq_for_time(t)
        await log.close()

    run(body)


def test_a_lookup_neither_located_nor_in_memory_is_read_from_the_file(
    tmp_path: Path, reads: Reads
) -> None:
    async def body() -> None:
        log = await _reopened(tmp_path)
        view = log.with_lookups(Located())
        reads.count = 0
        assert view.seq_for_bookmark(PUB, 300) == 300
        assert view.seq_for_time(T0 + 300 * 1000) == 300
        assert reads.count == 2
        await log.close()

    run(body)


def test_the_view_is_the_log_for_everything_else(tmp_path: Path) -> None:
    async def body() -> None:
        log = await _reopened(tmp_path, n=1500)
        view = log.with_lookups(Located())
        assert (view.durable_seq, view.first_seq) == (log.durable_seq, log.first_seq)
        assert await view.read_batch(10, max_count=5) == await log.read_batch(10, max_count=5)
        got = await view.read_view(1400, upto_seq=1410)
        assert list(got) == await log.read_batch(1400, upto_seq=1410)
        rec = log.append(topic="t", message_type="json", pub_hash=PUB, pub_seq=1501, body=b"n")
        await view.wait_durable(rec.seq)
        assert view.durable_seq == rec.seq
        await log.close()

    run(body)


@pytest.mark.parametrize(
    "bm",
    [
        f"{PUB}|500|",  # resume after a bookmark
        f"{PUB}|500|,{PUB}|900|",  # the earliest of a list
        "20231114T221320.700000Z",  # a moment in the log
        f"[{PUB}|300|:{PUB}|1200|]",  # a range between bookmarks
    ],
)
def test_replay_plans_the_same_against_the_view_without_reading(
    tmp_path: Path, reads: Reads, bm: str
) -> None:
    """The view is what the broker hands the replay planner: same plan, no file read."""

    async def body() -> None:
        log = await _reopened(tmp_path)
        spec = parse_bookmark(bm)
        found = await log.locate_all(*lookup_points(spec))
        source: ReplaySource = log.with_lookups(found)
        reads.count = 0
        plan = plan_replay(spec, source)
        assert reads.count == 0
        expected = plan_replay(spec, log)
        assert (plan.start_seq, plan.not_before_us) == (expected.start_seq, expected.not_before_us)
        assert (plan.stop and plan.stop.bound) == (expected.stop and expected.stop.bound)
        await log.close()

    run(body)


def test_a_lookup_survives_a_commit_that_moves_the_tail_during_its_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lookup reads a block's durable bytes in a thread and finds the rest in the
    tail. A group commit landing during that read makes the rest durable and the tail
    evicts it, so the record sought is in neither: the block is read again rather than
    answering None."""
    reading, release = threading.Event(), threading.Event()
    gated = [False]
    original = PlainSource.read

    def read(self: PlainSource, offset: int, length: int) -> bytes:
        if gated[0]:
            reading.set()
            assert release.wait(10)
        return original(self, offset, length)

    monkeypatch.setattr(PlainSource, "read", read)

    class HeldWrites(FaultySeam):
        """Journal writes wait for ``go`` while ``holding``: the commit stays in its thread."""

        def __init__(self) -> None:
            super().__init__()
            self.holding = False
            self.waiting, self.go = threading.Event(), threading.Event()

        def check(self, operation: str, path: Path) -> None:
            if operation == "write" and self.holding:
                self.waiting.set()
                assert self.go.wait(10)
            super().check(operation, path)

    async def body() -> None:
        seam = HeldWrites()
        log = TransactionLog(
            config(tmp_path, flush_interval=0), INSTANCE, files=seam, block_bytes=4096,
            tail_cache_bytes=0,  # the tail keeps only what is not durable yet
        )  # fmt: skip

        def append(s: int) -> None:
            log.append(topic="t", message_type="json", pub_hash=PUB, pub_seq=s, body=b"x" * 50)

        await log.open()
        for s in (1, 2, 3):
            append(s)
        await log.wait_durable(3)
        seam.holding = True
        for s in (4, 5, 6):  # one block with 1..3; their commit is held in its thread
            append(s)
        await asyncio.to_thread(seam.waiting.wait, 10)
        gated[0] = True
        lookup = asyncio.ensure_future(log.locate_bookmark(PUB, 5))
        await asyncio.to_thread(reading.wait, 10)  # it reads the durable bytes: 1..3
        gated[0] = False
        seam.holding = False
        seam.go.set()  # the commit lands: 4..6 durable, and the tail lets them go
        await async_wait_until(lambda: log.durable_seq == 6, message="the commit")
        release.set()
        assert await lookup == 5
        assert await log.locate_time(0) == 1
        await log.close()

    run(body)
