"""A fence is filled with its records under the same seqs, or released; either way the
log reads whole again, and so does the next open."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from spool.server.txlog import FencedRecords, TransactionLog
from spool.server.txlog.format.record import FLAG_LATE, FLAG_RELEASED, LOST_KEY, Record, RecordKind
from spool.server.txlog.index.answers import PublisherSummary
from tests.unit.txlog.helpers import INSTANCE, config, fill, journal_files, read_all, run
from tests.unit.txlog.test_scrub import flip, middle_record, read_around_fences, write_log


def make_log(
    tmp: Path, events: list[tuple[str, dict[str, object]]] | None = None
) -> TransactionLog:
    def on_event(name: str, fields: dict[str, object]) -> None:
        if events is not None:
            events.append((name, fields))

    return TransactionLog(
        config(tmp), INSTANCE, block_bytes=512, track_gaps=True, on_event=on_event
    )


def original(seq: int) -> Record:
    """The record ``fill`` wrote at ``seq`` (publisher 7, its sequence = the seq)."""
    return Record(0, 1000 + seq, 7, seq, "orders", "json", RecordKind.PUBLISH, (), 0,
                  b'{"n":%d}' % seq)  # fmt: skip


def fenced_log(tmp: Path) -> int:
    """A log of 2000 records whose open fences one in the last block of its first
    journal; returns its seq."""
    write_log(tmp, 2000)
    journal = journal_files(tmp)[0]
    off, length, seq = middle_record(journal)
    flip(journal, off + length - 2)
    return seq


async def opened(tmp: Path) -> TransactionLog:
    log = make_log(tmp)
    await log.open()
    log.start_scrub()
    assert log.scrub()
    while log.scrub_status.passes == 0:
        import asyncio

        await asyncio.sleep(0.01)
    return log


def test_a_fence_filled_with_its_records_reads_whole_under_the_same_seqs(tmp_path: Path) -> None:
    seq = fenced_log(tmp_path)

    async def body() -> None:
        log = await opened(tmp_path)
        (fence,) = log.fences
        assert (fence.first_seq, fence.last_seq, fence.exact) == (seq, seq, True)
        assert not log.holds(7, seq) and log.holds(7, seq + 1)
        await log.fill_fence(seq, [original(seq)])
        assert log.fences == [] and log.holds(7, seq)
        records = [r for b in await read_all(log) for r in b]
        assert [r.seq for r in records] == list(range(1, 2001))
        assert [r.pub_seq for r in records] == list(range(1, 2001))
        back = records[seq - 1]
        assert back.body == b'{"n":%d}' % seq and not back.flags & FLAG_LATE
        assert log.seq_for_bookmark(7, seq) == seq
        # appends go on after the last seq, as always
        await fill(log, 1)
        assert log.last_seq == 2001
        with pytest.raises(ValueError):
            await log.fill_fence(seq, [original(seq)])  # nothing fenced there any more
        await log.close()

    run(body)

    async def again() -> None:
        log = make_log(tmp_path)
        report = await log.open()
        assert report.clean and log.fences == []
        assert [s for b in await read_all(log) for s in b.seqs] == list(range(1, 2002))
        await log.close()

    run(again)


def test_records_that_do_not_make_up_the_fence_are_refused(tmp_path: Path) -> None:
    seq = fenced_log(tmp_path)

    async def body() -> None:
        log = await opened(tmp_path)
        with pytest.raises(ValueError):
            await log.fill_fence(seq, [original(seq), original(seq + 1)])
        with pytest.raises(ValueError):
            await log.fill_fence(seq, [])
        assert len(log.fences) == 1
        await log.close()

    run(body)


def test_a_record_placed_below_its_publishers_highest_is_flagged_late(tmp_path: Path) -> None:
    """The repair brings a record of publisher 7 whose sequence is below one already
    before the fence (it had arrived late the first time): it is flagged late again."""
    seq = fenced_log(tmp_path)

    async def body() -> None:
        log = await opened(tmp_path)
        early = Record(0, 5, 7, 3, "orders", "json", RecordKind.PUBLISH, (), 0, b"{}")
        await log.fill_fence(seq, [early])
        back = next(r for b in await read_all(log) for r in b if r.seq == seq)
        assert back.pub_seq == 3 and back.flags & FLAG_LATE
        await log.close()

    run(body)


def test_a_released_fence_is_passed_over_and_its_seqs_stay_taken(tmp_path: Path) -> None:
    seq = fenced_log(tmp_path)
    events: list[str] = []

    async def body() -> None:
        log = TransactionLog(
            config(tmp_path), INSTANCE, block_bytes=512,
            on_event=lambda name, _f: events.append(name),
        )  # fmt: skip
        await log.open()
        log.start_scrub()
        assert log.scrub()
        while not log.fences:
            import asyncio

            await asyncio.sleep(0.01)
        with pytest.raises(FencedRecords):
            await read_all(log)
        await log.release_fence(seq)
        assert log.fences == []
        batches = await read_all(log)
        kinds = {r.seq: r for b in batches for r in b}
        assert kinds[seq].kind is RecordKind.LOST and kinds[seq].flags & FLAG_RELEASED
        assert [s for b in batches for s in b.seqs] == list(range(1, 2001))
        await log.close()

    run(body)
    assert "fence_released" in events

    async def again() -> None:
        log = make_log(tmp_path)
        await log.open()
        assert log.fences == []
        seqs, met = await read_around_fences(log)
        assert met == [] and len(seqs) == 2000
        await log.close()

    run(again)


def _last_records_in_a_missing_journal(tmp: Path, publisher: int | None) -> int:
    """A log where ``publisher`` (None: the instance's own identity) wrote five records,
    then its last five, each among thousands of another's; the journal of its last ones,
    in the middle of the log, is removed. Returns that journal's base."""
    mine: list[int] = []

    async def body() -> None:
        log = make_log(tmp)
        await log.open()
        pub = log.own_pub_hash if publisher is None else publisher
        await fill(log, 1500)
        await fill(log, 5, pub_hash=pub)
        await fill(log, 1500)
        mine.extend(await fill(log, 5, pub_hash=pub))  # its last records ...
        await fill(log, 1500)
        await fill(log, 1500)
        await log.close()

    run(body)
    files = journal_files(tmp)
    bases = [int(p.name.split(".")[1]) for p in files]
    at = max(i for i, b in enumerate(bases) if b <= mine[0])
    assert bases[at + 1] > mine[-1] and at + 2 < len(files)  # ... in a middle journal
    files[at].unlink()
    files[at].with_suffix(".index").unlink()
    return bases[at]


def test_a_missing_journal_names_the_instances_own_records_and_skips_past_them(
    tmp_path: Path,
) -> None:
    """The instance's own records (its broker identity) were last written in a journal
    that is now missing, with none after it: the fence's intervals name them (from the
    last before + 1, as far as the identity may have numbered them: its floor,
    server/txlog/publishers/ownfloor.py, plus the fence's records), and the next own record is
    numbered past them, never with a lost one's bookmark."""
    lost_base = _last_records_in_a_missing_journal(tmp_path, None)

    async def reopened() -> None:
        events: list[tuple[str, dict[str, object]]] = []
        log = make_log(tmp_path, events)
        await log.open()
        own = log.own_pub_hash
        (fence,) = log.fences
        assert not fence.exact and fence.first_seq == lost_base
        (named,) = [(lo, hi) for key, lo, hi in fence.identities if key == own]
        # the event tells the operator what the repair asks for: its own records too
        (made,) = [fields for name, fields in events if name == "journal_fenced"]
        assert made == fence.to_dict()
        assert {"pub_hash": own, "first_pub_seq": named[0], "last_pub_seq": named[1]} in (
            made["publishers"]  # type: ignore[operator]
        )
        # its own records before the fence: 1..5, or also some of 6..10 when they were
        # in the journal before
        assert named[0] <= 6 and named[1] >= 10
        assert named[1] >= named[0] - 1 + fence.records  # never short of what it held
        nxt = log.append(topic="orders", message_type="json", pub_hash=own,
                         pub_seq=log.publisher_last(own) + 1, body=b"{}")  # fmt: skip
        assert nxt.pub_seq > named[1]
        await log.close()

    run(reopened)


def test_a_missing_journal_names_a_publisher_whose_last_records_it_held(
    tmp_path: Path,
) -> None:
    """A publisher's last records were in a journal that is now missing, with none of
    its records after it: the neighbours cannot say which they were, the publisher table
    can (``clients.ack`` names its last record, in the fence): the fence names them, so
    a repair asks its peers for them."""
    last = 0x77
    _last_records_in_a_missing_journal(tmp_path, last)

    async def reopened() -> None:
        log = make_log(tmp_path)
        await log.open()
        (fence,) = log.fences
        assert not fence.exact
        (named,) = [(lo, hi) for key, lo, hi in fence.identities if key == last]
        # 1..5, or also some of 6..10 when they were in the journal before
        assert named[0] <= 6 and named[1] == 10
        # the table says what the log holds of it; the fence, what a repair asks for
        assert log.publisher_last(last) == 5 and not log.holds(last, 10)
        await log.close()

    run(reopened)


@dataclass(frozen=True)
class _Summary:
    """What a journal's index says of its publishers (the two calls fencing reads)."""

    rows: tuple[PublisherSummary, ...]

    def publishers(self) -> tuple[PublisherSummary, ...]:
        return self.rows

    def key_ranges(self) -> tuple[()]:
        return ()


@dataclass(frozen=True)
class _Journal:
    base: int
    last_seq: int
    index: _Summary


def _journal(base: int, last: int, *pubs: tuple[int, int, int]) -> _Journal:
    rows = tuple(PublisherSummary(h, lo, hi, last, hi - lo + 1) for h, lo, hi in pubs)
    return _Journal(base, last, _Summary(rows))


def test_an_inexact_fence_names_every_publisher_from_all_the_journals_of_the_log() -> None:
    """A fence made at open saw nothing after it (a journal of placeholders, then the open
    journal): once the log is open, every publisher with a record after it gets the
    sequences between its last record before and its first after, one seen only after it
    gets 1..first after - 1, one with none after whose highest the publisher table knows
    gets last before + 1 .. that highest, and the instance's own identity, with none
    after, last before + 1 .. last before + records. Publishers it names are left as
    they are."""
    from spool.server.txlog.damage.fenceplan import unnamed_intervals
    from spool.server.txlog.damage.fences import Fence

    own = 99
    fence = Fence(201, 300, 201, "journal missing", "startup", 0, "j",
                  identities=[(5, 40, 60)])  # fmt: skip
    journals = [
        _journal(1, 200, (7, 1, 150), (5, 1, 39), (own, 1, 12)),
        _journal(301, 301, (LOST_KEY, 301, 301)),  # a placeholder
        _journal(302, 500, (7, 260, 400), (8, 30, 90), (5, 61, 80)),
    ]
    assert unnamed_intervals(fence, own, journals) == [(7, 151, 259), (8, 1, 29), (own, 13, 112)]
    # the publisher table knows highests past the journals (clients.ack): a publisher
    # with none after the fence gets last before + 1 .. its highest (11: all of its
    # records were in the fence); one whose highest is its last before, nothing; the
    # neighbours decide for one with records after it
    journals[0] = _journal(1, 200, (7, 1, 150), (5, 1, 39), (own, 1, 12), (9, 1, 20), (10, 1, 5))
    highest = {7: 400, 8: 90, 5: 80, 9: 35, 10: 5, 11: 12, own: 12}
    assert unnamed_intervals(fence, own, journals, highest=highest) == [
        (7, 151, 259), (8, 1, 29), (9, 21, 35), (11, 1, 12), (own, 13, 112),
    ]  # fmt: skip
    fence.exact = True
    assert unnamed_intervals(fence, own, journals) == []


def test_a_fence_filled_in_part_keeps_the_rest_fenced_across_a_restart(tmp_path: Path) -> None:
    """A journal missing from the middle: a repair found only the first records of its
    fence. They go back under its first seqs; its last seqs stay a fence with the same
    description, read as fenced, found again at the next open, and released later."""

    async def body() -> None:
        log = make_log(tmp_path)
        await log.open()
        for _ in range(4):
            await fill(log, 1500)
        await log.close()

    run(body)
    files = journal_files(tmp_path)
    files[1].unlink()
    files[1].with_suffix(".index").unlink()
    taken = 10

    async def partly() -> tuple[int, int]:
        log = make_log(tmp_path)
        await log.open()
        (fence,) = log.fences
        assert not fence.exact
        found = [original(s) for s in range(fence.first_seq, fence.last_seq - taken + 1)]
        await log.fill_fence(fence.first_seq, found, kept=taken)
        (rest,) = log.fences
        assert (rest.first_seq, rest.last_seq) == (fence.last_seq - taken + 1, fence.last_seq)
        assert (rest.exact, rest.identities, rest.window) == (
            fence.exact, fence.identities, fence.window,
        )  # fmt: skip
        back = await log.read_appended(
            fence.first_seq, max_count=10_000, upto_seq=rest.first_seq - 1
        )
        assert [r.pub_seq for r in back] == list(range(fence.first_seq, rest.first_seq))
        with pytest.raises(FencedRecords):
            await log.read_appended(rest.first_seq, max_count=1)
        assert log.released_in(fence.first_seq, fence.last_seq) == []  # repaired, not lost
        await log.close()
        return rest.first_seq, rest.last_seq

    first, last = run(partly)

    async def reopened() -> None:
        log = make_log(tmp_path)
        await log.open()
        (rest,) = log.fences
        assert (rest.first_seq, rest.last_seq, rest.exact) == (first, last, False)
        await log.release_fence(first)
        assert log.fences == []
        # what a refold of the whole range is told was lost: the released part only
        assert log.released_in(first - 5, last + 5) == [(first, last)]
        assert log.released_in(first - 5, first - 1) == []
        records = [r for b in await read_all(log) for r in b]
        assert [r.seq for r in records] == list(range(1, log.last_seq + 1))
        released = [r for r in records if r.flags & FLAG_RELEASED]
        assert [r.seq for r in released] == list(range(first, last + 1))
        await log.close()

    run(reopened)
