"""Recovery: torn tails and flipped bytes are cut exactly, reported, and the log serves on."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from spool.server.txlog import FencedRecords, RecoveryReport, TransactionLog
from spool.server.txlog.format.codec import encode
from spool.server.txlog.format.record import RecordKind
from spool.server.txlog.storage.files import clients_ack_name, journal_name
from tests.unit.txlog.helpers import INSTANCE, config, fill, journal_files, read_all, run

Events = list[tuple[str, dict[str, object]]]


def make_log(tmp: Path, events: Events | None = None, **kw: int) -> TransactionLog:
    def on_event(name: str, fields: dict[str, object]) -> None:
        if events is not None:
            events.append((name, fields))

    return TransactionLog(config(tmp, **kw), INSTANCE, on_event=on_event, block_bytes=512)


def write_log(tmp: Path, n: int, *, crash: bool = False) -> None:
    """``n`` records of publisher 7 (pub_seq 1..n) in 64 KB journals; close or crash."""

    async def body() -> None:
        log = make_log(tmp)
        await log.open()
        await fill(log, n)
        if crash:
            await log.abort()
        else:
            await log.close()

    run(body)


def record_len(i: int) -> int:
    """Encoded size of the i-th record written by ``fill`` (pub_seq = seq = i)."""
    return len(encode(i, 0, 7, i, "orders", "json", RecordKind.PUBLISH, (), 0, b'{"n":%d}' % i))


def nonzero_len(path: Path, start: int, stop: int) -> int:
    """Bytes from ``start`` to the last non-zero byte before ``stop`` (what a cut counts)."""
    with open(path, "rb") as fh:
        fh.seek(start)
        return len(fh.read(stop - start).rstrip(b"\0"))


def offset_of(journal: Path, seq: int) -> int:
    base = int(journal.name.split(".")[1])
    return sum(record_len(i) for i in range(base, seq))


def reopen(
    tmp: Path, events: Events | None = None
) -> tuple[RecoveryReport, list[int], dict[str, object]]:
    """Open again: the report, every seq served, and a few lookups."""

    async def body() -> tuple[RecoveryReport, list[int], dict[str, object]]:
        log = make_log(tmp, events)
        report = await log.open()
        seqs: list[int] = []
        seq = log.first_seq
        while True:
            try:
                batch = await log.read_view(seq, max_count=500)
            except FencedRecords as exc:  # a reader that skips damage, explicitly
                seq = exc.last_seq + 1
                continue
            if not batch:
                break
            seqs.extend(batch.seqs)
            assert batch.bodies == [b'{"n":%d}' % s for s in batch.seqs]
            seq = batch.last_seq + 1
        facts: dict[str, object] = {
            "last_seq": log.last_seq,
            "publisher_last": log.publisher_last(7),
            "bm_10": log.seq_for_bookmark(7, 10),
            "bm_last": log.seq_for_bookmark(7, log.publisher_last(7)),
            "fences": [(f.first_seq, f.last_seq) for f in log.fences],
        }
        # it serves: appends continue right after what was kept, and become durable
        rec = log.append(topic="orders", message_type="json", pub_hash=7, pub_seq=log.last_seq + 1,
                         body=b'{"n":%d}' % (log.last_seq + 1))  # fmt: skip
        await log.wait_durable(rec.seq)
        facts["appended"] = rec.seq
        await log.close()
        return report, seqs, facts

    return run(body)


def test_clean_reopen_uses_indexes_and_keeps_everything(tmp_path: Path) -> None:
    write_log(tmp_path, 2000)
    report, seqs, facts = reopen(tmp_path)
    assert report.clean and report.truncations == ()
    assert seqs == list(range(1, 2001))
    assert report.records_recovered == 2000 and (report.first_seq, report.last_seq) == (1, 2000)
    assert report.indexes_rebuilt == () and report.index_problems == ()
    assert report.clients_ack == "used" and report.publishers == 1
    assert facts == {
        "last_seq": 2000,
        "publisher_last": 2000,
        "bm_10": 10,
        "bm_last": 2000,
        "appended": 2001,
        "fences": [],
    }


def test_crash_keeps_every_durable_record(tmp_path: Path) -> None:
    write_log(tmp_path, 1500, crash=True)
    report, seqs, facts = reopen(tmp_path)
    assert report.clean and seqs == list(range(1, 1501))
    assert facts["publisher_last"] == 1500


@pytest.mark.parametrize("crash", [False, True])
def test_a_torn_tail_that_was_durable_is_cut_and_its_seq_fenced(
    tmp_path: Path, crash: bool
) -> None:
    """The last record was fsynced (its index block says so; a clean close's clients.ack
    too) and is then cut short: its bytes are cut as always, and its seq is fenced, so the
    next record gets the next seq and a repair can bring the lost one back."""
    write_log(tmp_path, 1000, crash=crash)
    active = journal_files(tmp_path)[-1]
    base = int(active.name.split(".")[1])
    torn_seq = 1000
    start = offset_of(active, torn_seq)
    cut_at = start + record_len(torn_seq) // 2
    os.truncate(active, cut_at)  # the record's second half is gone
    cut = nonzero_len(active, start, cut_at)
    events: Events = []
    report, seqs, facts = reopen(tmp_path, events)
    assert seqs == list(range(1, torn_seq))
    (t,) = report.truncations
    assert (t.path, t.offset, t.bytes_cut, t.reason, t.first_seq_cut) == (
        str(active), start, cut, "torn record", torn_seq,
    )  # fmt: skip
    assert report.bytes_truncated == cut
    assert t.saved_to is not None and Path(t.saved_to).stat().st_size == cut
    assert next(e for e in events if e[0] == "recovery_truncated")[1]["bytes_cut"] == cut
    (fence,) = report.fenced
    assert (fence["first_seq"], fence["last_seq"], fence["exact"]) == (torn_seq, torn_seq, True)
    assert fence["publishers"] == [{"pub_hash": 7, "first_pub_seq": 1000, "last_pub_seq": 1000}]
    assert facts["fences"] == [(torn_seq, torn_seq)] and facts["last_seq"] == torn_seq
    assert facts["publisher_last"] == torn_seq - 1
    assert facts["appended"] == torn_seq + 1  # never the lost record's seq
    assert base <= torn_seq
    # the next open makes nothing new: the cut was final, the fence stays
    report2, seqs2, facts2 = reopen(tmp_path)
    assert report2.clean and seqs2 == [*range(1, torn_seq), torn_seq + 1]
    assert facts2["fences"] == [(torn_seq, torn_seq)]


def test_a_torn_tail_nothing_says_was_durable_is_only_cut(tmp_path: Path) -> None:
    """A crash that tore a write before its fsync leaves a tail no file vouches for (its
    index block was never written, clients.ack is older): it is cut, and the next record
    takes its seq, which nobody was ever told of."""
    write_log(tmp_path, 1000, crash=True)
    active = journal_files(tmp_path)[-1]
    base = int(active.name.split(".")[1])
    (active.parent / active.name.replace(".journal", ".index")).unlink()
    (tmp_path / "journal" / clients_ack_name(INSTANCE)).unlink()
    start = offset_of(active, 1000)
    os.truncate(active, start + record_len(1000) // 2)
    report, seqs, facts = reopen(tmp_path)
    assert seqs == list(range(1, 1000))
    assert report.fenced == () and [t.first_seq_cut for t in report.truncations] == [1000]
    assert facts["fences"] == [] and facts["appended"] == 1000
    assert base < 1000


def test_torn_tail_in_preallocated_space(tmp_path: Path) -> None:
    """A write torn inside a preallocated journal: the record's end is still zeros."""
    write_log(tmp_path, 800)
    active = journal_files(tmp_path)[-1]
    start = offset_of(active, 800)
    with open(active, "r+b") as fh:
        fh.seek(start + 30)
        fh.write(bytes(record_len(800) - 30))
    kept = nonzero_len(active, start, start + 30)
    report, seqs, facts = reopen(tmp_path)
    assert seqs == list(range(1, 800))
    (t,) = report.truncations
    assert (t.offset, t.reason, t.first_seq_cut) == (start, "crc mismatch", 800)
    assert t.bytes_cut == kept  # up to the last non-zero byte
    assert facts["fences"] == [(800, 800)]  # clients.ack of the clean close covered it


def flip(path: Path, offset: int) -> None:
    with open(path, "r+b") as fh:
        fh.seek(offset)
        byte = fh.read(1)
        fh.seek(offset)
        fh.write(bytes([byte[0] ^ 0x10]))


def test_a_flipped_byte_in_the_active_journal_fences_that_record_only(tmp_path: Path) -> None:
    write_log(tmp_path, 1000)
    active = journal_files(tmp_path)[-1]
    base = int(active.name.split(".")[1])
    bad = (base + 1000) // 2
    start = offset_of(active, bad)
    flip(active, start + 60)  # inside the topic / body of that record
    original = active.read_bytes()
    events: Events = []
    report, seqs, facts = reopen(tmp_path, events)
    assert seqs == [s for s in range(1, 1001) if s != bad]
    assert report.truncations == ()
    (fence,) = report.fenced
    assert (fence["first_seq"], fence["last_seq"], fence["reason"]) == (bad, bad, "crc mismatch")
    assert fence["publishers"] == [{"pub_hash": 7, "first_pub_seq": bad, "last_pub_seq": bad}]
    assert fence["exact"] and fence["offset"] == start
    assert facts["bm_10"] == 10 and facts["publisher_last"] == 1000
    assert facts["bm_last"] == 1000 and facts["appended"] == 1001
    # nothing is destroyed: the damaged journal as it was is in damaged/
    saved = Path(str(fence["saved"]))
    assert saved.parent.name == "damaged" and saved.read_bytes()[: len(original)] == original
    assert [f["first_seq"] for name, f in events if name == "journal_fenced"] == [bad]


def test_a_flipped_byte_in_the_last_record_is_a_torn_tail(tmp_path: Path) -> None:
    write_log(tmp_path, 1000)
    active = journal_files(tmp_path)[-1]
    start = offset_of(active, 1000)
    end_of_data = start + nonzero_len(active, start, offset_of(active, 1001))
    flip(active, start + 60)
    report, seqs, facts = reopen(tmp_path)
    assert seqs == list(range(1, 1000))
    (t,) = report.truncations
    assert (t.offset, t.reason, t.first_seq_cut, t.bytes_cut) == (
        start, "crc mismatch", 1000, end_of_data - start,
    )  # fmt: skip
    assert facts["fences"] == [(1000, 1000)]  # durable: the clean close's clients.ack


def test_flipped_length_field(tmp_path: Path) -> None:
    write_log(tmp_path, 300)
    active = journal_files(tmp_path)[-1]
    start = offset_of(active, 200)
    flip(active, start + 1)  # the record length grows by 4096: it now overlaps the next ones
    report, seqs, facts = reopen(tmp_path)
    assert seqs == [s for s in range(1, 301) if s != 200]
    assert report.truncations == () and facts["fences"] == [(200, 200)]


def test_damage_in_an_older_journal_keeps_every_later_record(tmp_path: Path) -> None:
    write_log(tmp_path, 2500)
    files = journal_files(tmp_path)
    assert len(files) >= 3
    first = files[0]
    # without its index the old journal is scanned, so its damage is found at open
    (tmp_path / "journal" / first.name.replace(".journal", ".index")).unlink()
    flip(first, offset_of(first, 100) + 60)
    report, seqs, facts = reopen(tmp_path)
    assert seqs == [s for s in range(1, 2501) if s != 100]
    assert report.truncations == ()
    (fence,) = report.fenced
    assert (fence["first_seq"], fence["last_seq"], fence["path"]) == (100, 100, str(first))
    # without an index its bookmarks come from its neighbours: publisher 7's 99 and 101
    assert fence["publishers"] == [{"pub_hash": 7, "first_pub_seq": 100, "last_pub_seq": 100}]
    assert facts["appended"] == 2501 and facts["publisher_last"] == 2500
    damaged = [p.name for p in (tmp_path / "journal" / "damaged").iterdir()]
    assert len(damaged) == 1 and damaged[0].startswith(first.name)


def test_nonzero_bytes_after_the_end_of_data_are_cut(tmp_path: Path) -> None:
    """Pages of a later write that reached the disk when an earlier one did not."""
    write_log(tmp_path, 500)
    active = journal_files(tmp_path)[-1]
    end = offset_of(active, 501)
    with open(active, "r+b") as fh:
        fh.seek(end + 200)
        fh.write(b"stale bytes")
    report, seqs, _ = reopen(tmp_path)
    assert seqs == list(range(1, 501))
    (t,) = report.truncations
    assert (t.offset, t.reason, t.bytes_cut, t.first_seq_cut) == (
        end,
        "data after end of data",
        211,
        501,
    )


def test_indexes_and_clients_ack_are_rebuildable_caches(tmp_path: Path) -> None:
    write_log(tmp_path, 2500)
    _, seqs_before, facts_before = reopen(tmp_path)
    for p in (tmp_path / "journal").iterdir():
        if p.name.endswith(".index") or p.name == clients_ack_name(INSTANCE):
            p.unlink()
    report, seqs, facts = reopen(tmp_path)
    assert report.clean and seqs == [*seqs_before, 2501]  # reopen() appended 2501
    assert len(report.indexes_rebuilt) == len(journal_files(tmp_path))
    assert report.clients_ack == "rebuilt"
    assert facts_before == {
        "last_seq": 2500,
        "publisher_last": 2500,
        "bm_10": 10,
        "bm_last": 2500,
        "appended": 2501,
        "fences": [],
    }
    assert facts == {
        "last_seq": 2501,
        "publisher_last": 2501,
        "bm_10": 10,
        "bm_last": 2501,
        "appended": 2502,
        "fences": [],
    }
    report3, _, _ = reopen(tmp_path)
    assert report3.indexes_rebuilt == () and report3.clients_ack == "used"


def test_damaged_index_is_reported_and_rebuilt(tmp_path: Path) -> None:
    write_log(tmp_path, 2000)
    index = sorted((tmp_path / "journal").glob("*.index"))[0]
    flip(index, 100)
    report, seqs, facts = reopen(tmp_path)
    assert report.clean and seqs == list(range(1, 2001))
    assert report.index_problems and str(index) in report.index_problems[0]
    assert facts["bm_10"] == 10


@pytest.mark.parametrize("index_left", [True, False])
def test_a_missing_middle_journal_is_fenced_in_its_place(tmp_path: Path, index_left: bool) -> None:
    """A journal deleted between two others: a journal of placeholders takes its seqs,
    every other record is served; its index, when left behind, says what it held (else the
    records around it do: publisher 7's last before and first after)."""
    write_log(tmp_path, 2500)
    files = journal_files(tmp_path)
    lost_base = int(files[1].name.split(".")[1])
    next_base = int(files[2].name.split(".")[1])
    files[1].unlink()
    if not index_left:
        (files[1].parent / files[1].name.replace(".journal", ".index")).unlink()
    report, seqs, facts = reopen(tmp_path)
    lost = range(lost_base, next_base)
    assert seqs == [s for s in range(1, 2501) if s not in lost]
    (fence,) = report.fenced
    assert (fence["first_seq"], fence["last_seq"], fence["reason"]) == (
        lost_base, next_base - 1, "journal missing",
    )  # fmt: skip
    assert fence["exact"] is index_left
    assert fence["publishers"] == [
        {"pub_hash": 7, "first_pub_seq": lost_base, "last_pub_seq": next_base - 1}
    ]
    assert fence["window_us"][1] is not None  # the time of the first record after it
    assert facts["fences"] == [(lost_base, next_base - 1)]
    assert files[1].exists()  # the placeholders' journal


def test_other_instances_files_are_ignored(tmp_path: Path) -> None:
    write_log(tmp_path, 300)
    jdir = tmp_path / "journal"
    foreign = [
        jdir / journal_name("spool-b", 1),
        jdir / journal_name("spool-a2", 1),
        jdir / (journal_name("spool", 1)),
        jdir / "spool-a.notes.txt",
    ]
    for p in foreign:
        p.write_bytes(b"not ours" * 10)
    report, seqs, _ = reopen(tmp_path)
    assert report.clean and seqs == list(range(1, 301))
    assert all(p.read_bytes() == b"not ours" * 10 for p in foreign)


def test_interrupted_compress_keeps_the_compressed_copy(tmp_path: Path) -> None:
    write_log(tmp_path, 2000)
    first = journal_files(tmp_path)[0]
    keep = first.read_bytes()

    async def compress_first() -> None:
        log = make_log(tmp_path)
        await log.open()
        await log.compress(1)
        await log.close()

    run(compress_first)
    first.write_bytes(keep)  # as if the plain file's removal never happened
    report, seqs, _ = reopen(tmp_path)
    assert report.duplicates_removed == (str(first),)
    assert not first.exists() and seqs == list(range(1, 2001))


@pytest.mark.parametrize("crash", [False, True])
def test_a_journal_started_with_smaller_index_blocks_reads_on_after_an_upgrade(
    tmp_path: Path, crash: bool
) -> None:
    """The index block size went from 4 KB to 16 KB: an active journal written by the old
    version keeps its blocks, the new ones are larger, and every lookup, the replay and
    recovery's check of the index read the mixed journal as one (here 512 -> 2048 bytes,
    the same ratio on a small journal)."""
    write_log(tmp_path, 150)  # one active journal, 512-byte blocks

    async def upgraded() -> list[int]:
        log = TransactionLog(config(tmp_path), INSTANCE, block_bytes=2048)
        report = await log.open()
        assert report.clean and report.indexes_rebuilt == () and report.index_problems == ()
        await fill(log, 150)  # appended with 2048-byte blocks into the same journal
        assert len(journal_files(tmp_path)) == 1
        seqs = [s for batch in await read_all(log) for s in batch.seqs]
        for pub_seq in range(1, 301):
            assert log.seq_for_bookmark(7, pub_seq) == pub_seq
        if crash:
            await log.abort()
        else:
            await log.close()
        return seqs

    assert run(upgraded) == list(range(1, 301))
    events: Events = []
    report, seqs, facts = reopen(tmp_path, events)  # back with 512-byte blocks, even
    assert report.clean and seqs == list(range(1, 301))
    assert report.indexes_rebuilt == () and report.index_problems == ()
    assert facts["bm_10"] == 10 and facts["bm_last"] == 300 and facts["appended"] == 301


@pytest.mark.parametrize("short", [1, 2, 3])
def test_a_journal_filled_to_within_a_length_field_of_its_end_is_clean(
    tmp_path: Path, short: int
) -> None:
    """The active journal's records end 1..3 bytes before its preallocated end (the next
    record would not fit): those zero bytes are the end of data, not a torn record."""
    size = 64 * 1024 - short - 56 - len("orders") - len("json")

    async def write() -> None:
        log = make_log(tmp_path)
        await log.open()
        rec = log.append(topic="orders", message_type="json", pub_hash=7, pub_seq=1,
                         body=b"x" * size)  # fmt: skip
        await log.wait_durable(rec.seq)
        await log.abort()

    async def reopen_and_append() -> RecoveryReport:
        log = make_log(tmp_path)
        report = await log.open()
        rec = log.append(topic="orders", message_type="json", pub_hash=7, pub_seq=2, body=b"{}")
        await log.wait_durable(rec.seq)
        batches = await read_all(log)
        assert [
            (s, len(b)) for batch in batches for s, b in zip(batch.seqs, batch.bodies, strict=True)
        ] == [(1, size), (2, 2)]
        await log.close()
        return report

    run(write)
    (journal,) = journal_files(tmp_path)
    assert journal.stat().st_size == 64 * 1024
    report = run(reopen_and_append)
    assert report.clean and report.truncations == () and report.last_seq == 1
