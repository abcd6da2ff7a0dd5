"""The transaction log's behaviour: group commit, reads, identity, retention, failures."""

from __future__ import annotations

import asyncio
import random
import threading
from pathlib import Path

import pytest

from spool.server.clock import VirtualClock, time_us
from spool.server.txlog import (
    JournalActive,
    JournalNotFound,
    JournalPinned,
    PublisherSequenceRegression,
    Record,
    RecordKind,
    TransactionLog,
    TxlogClosed,
    TxlogFull,
)
from spool.server.txlog.storage.files import prealloc_name
from tests.support.wait import async_wait_until
from tests.unit.txlog.helpers import (
    INSTANCE,
    FaultySeam,
    config,
    fill,
    journal_files,
    read_all,
    run,
)

Events = list[tuple[str, dict[str, object]]]


def new_log(tmp: Path, events: Events | None = None, **kw: object) -> TransactionLog:
    cfg_keys = {"journal_size", "preallocated", "flush_interval", "max_size"}
    cfg = config(tmp, **{k: v for k, v in kw.items() if k in cfg_keys})  # type: ignore[arg-type]
    extra = {k: v for k, v in kw.items() if k not in cfg_keys}

    def on_event(name: str, fields: dict[str, object]) -> None:
        if events is not None:
            events.append((name, fields))

    return TransactionLog(cfg, INSTANCE, on_event=on_event, block_bytes=512, **extra)  # type: ignore[arg-type]


def test_append_assigns_sequence_and_time_and_becomes_durable(tmp_path: Path) -> None:
    async def body() -> None:
        clock = VirtualClock()
        log = new_log(tmp_path, clock=clock, flush_interval=0)
        with pytest.raises(TxlogClosed):
            log.append(topic="t", message_type="json", pub_hash=1, pub_seq=1, body=b"x")
        await log.open()
        seen: list[int] = []
        log.add_durable_listener(seen.append)
        r1 = log.append(topic="t", message_type="json", pub_hash=1, pub_seq=1, body=b"a")
        r2 = log.append(
            topic="u", message_type="json", pub_hash=2, pub_seq=9, body=b"b", kind=RecordKind.SOW_DELETE,
            path=("spool-b", "spool-c"), flags=3, corr_id="x-1", sow_key="k1", timestamp_us=42,
        )  # fmt: skip
        assert (r1.seq, r2.seq, log.last_seq) == (1, 2, 2)
        assert r1.timestamp_us == time_us(clock) and r2.timestamp_us == 42
        assert log.durable_seq == 0
        await log.wait_durable(2)
        assert log.durable_seq == 2 and seen[-1] == 2
        await log.wait_durable(1)  # already durable: returns at once
        assert await log.read_batch(1) == [r1, r2]
        await log.close()
        await log.close()  # idempotent
        with pytest.raises(TxlogClosed):
            log.append(topic="t", message_type="json", pub_hash=1, pub_seq=2, body=b"x")
        again = new_log(tmp_path, clock=clock, flush_interval=0)
        await again.open()
        assert await again.read_batch(1) == [r1, r2]  # every field survives the files
        await again.close()

    run(body)


def test_group_commit_writes_many_appends_per_fsync(tmp_path: Path) -> None:
    async def body() -> None:
        log = new_log(tmp_path, journal_size=1 << 20)
        await log.open()
        for i in range(3000):
            log.append(topic="t", message_type="json", pub_hash=1, pub_seq=i + 1, body=b"x" * 100)
        await log.wait_durable(log.last_seq)
        stats = log.stats()
        assert stats["appended"] == 3000 and stats["durable_seq"] == 3000
        assert stats["flushes"] <= 3  # appended in one loop turn: one group commit (+ rolls)
        assert stats["last_flush_records"] >= 1000
        await log.close()

    run(body)


def test_fsyncs_are_spaced_by_the_flush_interval(tmp_path: Path) -> None:
    async def body() -> None:
        clock = VirtualClock()
        log = new_log(tmp_path, clock=clock, flush_interval=0.01)
        await log.open()
        log.append(topic="t", message_type="json", pub_hash=1, pub_seq=1, body=b"x")
        await log.wait_durable(1)  # an idle log: the first append is flushed at once
        assert clock.sleepers == 0
        log.append(topic="t", message_type="json", pub_hash=1, pub_seq=2, body=b"x")
        log.append(topic="t", message_type="json", pub_hash=1, pub_seq=3, body=b"x")
        # the second group commit waits out the interval since the first one started
        await async_wait_until(lambda: clock.sleepers == 1, message="the flusher sleeping")
        await clock.advance(0.005)
        assert log.durable_seq == 1 and clock.sleepers == 1
        await clock.advance(0.005)
        await log.wait_durable(3)
        assert log.stats()["flushes"] == 2 and log.stats()["last_flush_records"] == 2
        await log.close()

    run(body)


def test_publisher_identity_survives_restarts_and_removal(tmp_path: Path) -> None:
    async def body() -> None:
        log = new_log(tmp_path)
        await log.open()
        assert log.publisher_last(7) == 0 and log.publisher_last_bookmark(7) is None
        await fill(log, 1500, pub_hash=7)
        await fill(log, 10, pub_hash=8)
        log.append(topic="q", message_type="json", pub_hash=0, pub_seq=0, body=b"anonymous")
        log.append(topic="q", message_type="json", pub_hash=0, pub_seq=0, body=b"anonymous")
        with pytest.raises(PublisherSequenceRegression):
            log.append(topic="t", message_type="json", pub_hash=7, pub_seq=1500, body=b"dup")
        last = log.last_seq
        assert log.publisher_last(7) == 1500 and log.publisher_last_bookmark(8) == "8|10|"
        assert log.publisher_last(0) == 0 and log.seq_for_bookmark(0, 0) is None
        await log.wait_durable(last)
        await log.close()
        log = new_log(tmp_path)
        await log.open()
        assert log.last_seq == last
        assert (log.publisher_last(7), log.publisher_last(8)) == (1500, 10)
        # remove every journal publisher 7 wrote in: its last sequence is still known
        await fill(log, 2000, pub_hash=9)
        finished = [j for j in log.journals() if j.state == "closed"]
        newest_with_7 = max(j.id for j in finished if j.first_seq <= 1500)
        await log.remove(newest_with_7)
        assert log.first_seq > 1500
        await log.close()
        log = new_log(tmp_path)
        await log.open()
        assert log.publisher_last(7) == 1500
        assert log.publisher_last_bookmark(7) == "7|1500|"
        assert log.seq_for_bookmark(7, 1500) is None  # removed with its journal
        await log.close()

    run(body)


@pytest.mark.parametrize("tail_budget", [0, 1 << 30])
def test_reads_agree_with_what_was_appended(tmp_path: Path, tail_budget: int) -> None:
    async def body() -> None:
        log = new_log(tmp_path, tail_cache_bytes=tail_budget)
        await log.open()
        appended: list[Record] = []
        rng = random.Random(3)
        for i in range(2500):
            ph = rng.choice([11, 22, 33])
            appended.append(
                log.append(topic=f"t{i % 5}", message_type="json", pub_hash=ph,
                           pub_seq=log.publisher_last(ph) + 1, body=b"b" * rng.randrange(300))
            )  # fmt: skip
        await log.wait_durable(log.last_seq)
        assert len(journal_files(tmp_path)) > 3
        journal_ends = {j.last_seq for j in log.journals()}
        for _ in range(40):
            start = rng.randrange(0, 2600)
            count = rng.randrange(1, 1500)
            upto = rng.choice([None, rng.randrange(1, 2600)])
            got = await log.read_batch(start, max_count=count, upto_seq=upto)
            view = await log.read_view(start, max_count=count, upto_seq=upto)
            first = max(start, 1)
            assert got == list(view)
            assert got == appended[first - 1 : first - 1 + len(got)]
            assert len(got) <= count
            if upto is not None:
                assert all(r.seq <= upto for r in got)
            if got and len(got) < count:  # a read stops early only at a journal's end
                assert got[-1].seq in journal_ends or got[-1].seq == upto
            elif first <= min(upto or 2500, 2500):
                assert got
        one = await log.read_batch(10, max_bytes=1)
        assert [r.seq for r in one] == [10]
        assert await log.read_batch(2501) == []
        await log.close()

    run(body)


def test_only_durable_records_are_read(tmp_path: Path) -> None:
    async def body() -> None:
        log = new_log(tmp_path)
        await log.open()
        await fill(log, 5)
        for i in range(5):
            log.append(topic="t", message_type="json", pub_hash=7, pub_seq=6 + i, body=b"late")
        assert log.durable_seq == 5 and log.last_seq == 10
        assert [r.seq for r in await log.read_batch(1)] == [1, 2, 3, 4, 5]
        await log.wait_durable(10)
        assert [r.seq for r in await log.read_batch(1)] == list(range(1, 11))
        await log.close()

    run(body)


def test_rolls_into_preallocated_files_and_replaces_them(tmp_path: Path) -> None:
    async def body() -> None:
        events: Events = []
        log = new_log(tmp_path, events, preallocated=2)
        await log.open()
        jdir = tmp_path / "journal"
        assert sorted(p.name for p in jdir.glob("*.prealloc.*")) == [
            prealloc_name(INSTANCE, 1), prealloc_name(INSTANCE, 2)
        ]  # fmt: skip
        await fill(log, 2000)
        await async_wait_until(lambda: log.stats()["preallocated"] == 2, message="2 preallocated")
        assert len(list(jdir.glob("*.prealloc.*"))) == 2
        states = [j.state for j in log.journals()]
        assert states[-3:] == ["active", "preallocated", "preallocated"]
        assert set(states[:-3]) == {"closed"}
        infos = [j for j in log.journals() if j.state != "preallocated"]
        assert [j.first_seq for j in infos[1:]] == [j.last_seq + 1 for j in infos[:-1]]
        assert infos[0].first_bookmark == "7|1|" and infos[-1].last_bookmark == "7|2000|"
        assert all(j.size_bytes == j.data_bytes for j in infos[:-1])  # trimmed when finished
        rolled = [f for name, f in events if name == "journal_rolled"]
        assert [f["journal"] for f in rolled] == [j.id for j in infos[:-1]]
        assert rolled[0]["next"] == infos[1].id and rolled[0]["records"] == infos[0].records
        await log.close()

    run(body)


def test_txlog_full_when_a_new_journal_would_exceed_max_size(tmp_path: Path) -> None:
    async def body() -> None:
        size = 64 * 1024
        log = new_log(tmp_path, preallocated=1, max_size=2 * size + 10)
        await log.open()
        with pytest.raises(TxlogFull):
            for i in range(3000):
                log.append(
                    topic="t", message_type="json", pub_hash=1, pub_seq=i + 1, body=b"x" * 100
                )
                if i % 100 == 0:
                    await log.wait_durable(log.last_seq)
        last = log.last_seq
        await log.wait_durable(last)
        assert (await log.read_batch(last))[0].seq == last  # still serving reads
        # freeing the oldest journal makes room again
        oldest = log.journals()[0].id
        await log.remove(oldest)
        rec = log.append(topic="t", message_type="json", pub_hash=1, pub_seq=last + 1, body=b"y")
        await log.wait_durable(rec.seq)
        assert log.stats()["disk_bytes"] <= 2 * size + 10
        await log.close()

    run(body)


def test_archive_compress_remove_and_pins(tmp_path: Path) -> None:
    async def body() -> None:
        events: Events = []
        log = new_log(tmp_path, events)
        await log.open()
        await fill(log, 4000)
        infos = [j for j in log.journals() if j.state != "preallocated"]
        assert len(infos) >= 5
        active = infos[-1].id
        with pytest.raises(JournalActive):
            await log.remove(active)
        with pytest.raises(JournalNotFound):
            await log.archive(12345)
        pin = log.pin("replication:spool-b", infos[1].first_seq + 3)
        with pytest.raises(JournalPinned) as info:
            await log.remove(infos[1].id)
        assert info.value.owner == "replication:spool-b"
        assert [j.pinned_by for j in log.journals()[:2]] == [None, "replication:spool-b"]
        # the first journal is not needed by the pin: it can go
        removed = await log.remove(infos[0].id)
        assert [j.id for j in removed] == [infos[0].id]
        assert log.first_seq == infos[1].first_seq
        assert not (tmp_path / "journal" / Path(infos[0].path).name).exists()
        pin.move(infos[3].first_seq)
        done = await log.compress(infos[1].id)
        assert [j.state for j in done] == ["compressed"]
        done = await log.compress(infos[2].id, "gzip")
        assert [(j.id, j.compression) for j in done] == [(infos[2].id, "gzip")]
        archived = await log.archive(infos[2].id)
        assert [j.id for j in archived] == [infos[1].id, infos[2].id]
        assert all(Path(j.path).parent == tmp_path / "archive" for j in archived)
        with pytest.raises(JournalPinned):
            await log.archive(infos[3].id)
        pin.release()
        # everything still reads the same, lookups included
        seqs: list[int] = []
        for batch in await read_all(log):
            assert batch.bodies == [b'{"n":%d}' % s for s in batch.seqs]
            seqs.extend(batch.seqs)
        assert seqs == list(range(infos[1].first_seq, 4001))
        for target in (infos[1].first_seq + 5, infos[2].last_seq, infos[3].first_seq):
            assert log.seq_for_bookmark(7, target) == target
            assert await log.locate_bookmark(7, target) == target
        assert {name for name, _ in events} >= {
            "journal_removed",
            "journal_compressed",
            "journal_archived",
        }
        await log.close()
        # and after a restart
        log = new_log(tmp_path)
        report = await log.open()
        assert report.clean and report.first_seq == infos[1].first_seq
        states = {j.id: j.state for j in log.journals()}
        assert states[infos[1].id] == "archived" and states[infos[3].id] == "closed"
        assert [r.seq for r in await log.read_batch(infos[2].first_seq, max_count=3)] == [
            infos[2].first_seq + k for k in range(3)
        ]  # fmt: skip
        await log.close()

    run(body)


def test_time_lookups_follow_the_first_record_at_or_after(tmp_path: Path) -> None:
    async def body() -> None:
        log = new_log(tmp_path, tail_cache_bytes=0)
        await log.open()
        rng = random.Random(9)
        times: list[int] = []
        ts = 1_700_000_000_000_000
        for i in range(2500):
            ts += rng.choice([0, 1, 7, 100, -50])  # recorded times may step back
            times.append(log.append(topic="t", message_type="json", pub_hash=1, pub_seq=i + 1,
                                    body=b"x" * 20, timestamp_us=ts).timestamp_us)  # fmt: skip
        await log.wait_durable(log.last_seq)
        for t in [times[0] - 1, *rng.sample(times, 60), max(times), max(times) + 1]:
            want = next((i + 1 for i, x in enumerate(times) if x >= t), log.last_seq + 1)
            assert log.seq_for_time(t) == want
            assert await log.locate_time(t) == want
        await log.close()

    run(body)


def test_abort_drops_what_is_not_durable(tmp_path: Path) -> None:
    async def body() -> None:
        log = new_log(tmp_path)
        await log.open()
        await fill(log, 10)
        log.append(topic="t", message_type="json", pub_hash=7, pub_seq=11, body=b"lost")
        waiter = asyncio.ensure_future(log.wait_durable(11))
        await asyncio.sleep(0)
        await log.abort()
        try:
            await waiter
            made_it = True  # its group commit was already under way
        except TxlogClosed:
            made_it = False
        log = new_log(tmp_path)
        await log.open()
        assert log.last_seq == (11 if made_it else 10)
        await log.close()

    run(body)


def test_stats_expose_the_dashboard_numbers(tmp_path: Path) -> None:
    async def body() -> None:
        log = new_log(tmp_path)
        await log.open()
        await fill(log, 100)
        stats = log.stats()
        for key in ("appended", "appended_bytes", "flushes", "fsync_p50_ms", "fsync_p99_ms",
                    "last_flush_records", "recovery_truncated_bytes", "disk_bytes", "journals"):  # fmt: skip
            assert key in stats and isinstance(stats[key], float)
        assert stats["fsync_p99_ms"] >= stats["fsync_p50_ms"] > 0
        await log.close()

    run(body)


def test_wait_appended_wakes_live_readers_before_the_group_commit(tmp_path: Path) -> None:
    async def body() -> None:
        log = new_log(tmp_path, flush_interval=0.05)
        await log.open()
        await log.wait_appended(0)  # nothing to wait for
        waiter = asyncio.ensure_future(log.wait_appended(2))
        log.append(topic="t", message_type="json", pub_hash=1, pub_seq=1, body=b"a")
        await asyncio.sleep(0)
        assert not waiter.done()
        log.append(topic="t", message_type="json", pub_hash=1, pub_seq=2, body=b"b")
        await asyncio.wait_for(waiter, 5)
        late = asyncio.ensure_future(log.wait_appended(3))
        await asyncio.sleep(0)
        await log.close()
        with pytest.raises(TxlogClosed):
            await late

    run(body)


class _GatedSeam(FaultySeam):
    """Preallocations wait for ``gate`` while ``gating`` is set (in the worker thread)."""

    def __init__(self) -> None:
        super().__init__()
        self.gating = False
        self.gate = threading.Event()
        self.waiting = threading.Event()

    def check(self, operation: str, path: Path) -> None:
        if operation == "allocate" and self.gating and "prealloc" in path.name:
            self.waiting.set()
            assert self.gate.wait(10)
        super().check(operation, path)


def test_a_roll_during_a_preallocation_takes_its_room(tmp_path: Path) -> None:
    """Rolling while the next preallocated file is still being made is not `txlog full`:
    the new journal takes the room reserved for that file, which is deleted when done."""

    async def body() -> None:
        size = 64 * 1024
        seam = _GatedSeam()
        log = new_log(tmp_path, preallocated=1, max_size=2 * size + 10, files=seam)
        await log.open()

        def append() -> None:
            log.append(topic="t", message_type="json", pub_hash=1,
                       pub_seq=log.publisher_last(1) + 1, body=b"x" * 100)  # fmt: skip

        while log.stats()["rolls"] < 1:  # fill the first journal: the roll uses the prealloc
            append()
        await log.wait_durable(log.last_seq)
        seam.gating = True
        await log.remove(log.journals()[0].id)
        append()  # a group commit: the cache task starts preallocating (and waits)
        await log.wait_durable(log.last_seq)
        await asyncio.to_thread(seam.waiting.wait, 10)
        rolls = log.stats()["rolls"]
        while log.stats()["rolls"] == rolls:  # roll while the preallocation is under way
            append()
        seam.gate.set()
        await log.wait_durable(log.last_seq)
        await async_wait_until(
            lambda: not list((tmp_path / "journal").glob("*prealloc*")),
            message="the preallocated file deleted",
        )
        assert log.stats()["preallocated"] == 0
        assert log.stats()["disk_bytes"] <= 2 * size + 10
        await log.close()

    run(body)


@pytest.mark.parametrize("action", ["remove", "archive"])
def test_retention_right_after_a_roll_leaves_no_orphan_index(tmp_path: Path, action: str) -> None:
    """Removing or archiving a journal whose commit just finished it waits for its seal:
    before, the cache thread sealed it afterwards and left its `.index` in the journal
    directory, for a journal that was no longer there."""

    async def body() -> None:
        log = new_log(tmp_path)
        await log.open()
        seq = 0
        while log.stats()["rolls"] < 1:
            seq += 1
            log.append(topic="t", message_type="json", pub_hash=1, pub_seq=seq, body=b"x" * 100)
        await log.wait_durable(log.last_seq)
        oldest = log.journals()[0]
        done = await (log.remove(oldest.id) if action == "remove" else log.archive(oldest.id))
        assert [j.id for j in done] == [oldest.id]
        await log.close()
        name = Path(oldest.path).name.replace(".journal", ".index")
        assert not (tmp_path / "journal" / name).exists()
        if action == "archive":
            assert (tmp_path / "archive" / name).exists()
            log = new_log(tmp_path)
            await log.open()
            assert [r.seq for r in await log.read_batch(1, max_count=2)] == [1, 2]
            await log.close()

    run(body)
