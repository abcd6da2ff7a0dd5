"""Catalog, planner and scanner without Spark, against the codec's own reader.

The oracle is ``iter_file_records`` (server/txlog/cli.py, built on the codec): for any
predicate, scanning the plan's slices must give exactly the records it keeps, in order,
and pruning must never drop a record that matches.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spool.server.pipeline.catalog import Catalog
from spool.server.pipeline.errors import NoJournals, UnreadableJournal
from spool.server.pipeline.planner import plan_scan
from spool.server.pipeline.predicate import KIND_CODES, ScanPredicate
from spool.server.pipeline.scanner import Columns, Damage, SliceScanner
from spool.server.txlog import TransactionLog
from spool.server.txlog.cli import iter_file_records
from spool.server.txlog.format.codec import decode, encode
from spool.server.txlog.format.record import Record, RecordKind, schedule_field
from spool.server.txlog.storage.files import index_name, journal_name
from tests.unit.txlog.helpers import INSTANCE, config

T0 = 1_700_000_000_000_000


async def _write(tmp: Path, n: int, *, close: bool = True) -> TransactionLog:
    """``n`` records: publisher 7 first half, 8 second half; 3 topics; 1 ms apart; rare
    records with a correlation id, a path or a SOW key."""
    # 4 KB index blocks (not the 16 KB default): the pruning and damage tests need many
    # blocks per journal, whatever the default block size
    log = TransactionLog(config(tmp, journal_size=64 * 1024), INSTANCE, block_bytes=4096)
    await log.open()
    ts = T0
    for i in range(n):
        ts += 1000 if i % 40 else -3000  # the clock steps back now and then
        log.append(
            timestamp_us=ts,
            topic=("orders", "trades", "md.ibm")[i % 3],
            message_type="json",
            pub_hash=7 if i < n // 2 else 8,
            pub_seq=i + 1,
            body=b'{"i":%d}' % i,
            kind=RecordKind.SOW_DELETE if i % 97 == 5 else RecordKind.PUBLISH,
            corr_id=f"c{i}" if i % 50 == 3 else "",
            path=("east",) if i % 71 == 4 else (),
            sow_key="k" if i % 83 == 2 else "",
        )
    if close:
        await log.close()
    return log


@pytest.fixture(scope="module")
def journal_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("log")
    asyncio.run(_write(tmp, 4000))
    return tmp / "journal"


def oracle(d: Path) -> list[Record]:
    out: list[Record] = []
    for path in sorted(d.glob(f"{INSTANCE}.*.journal*")):
        out.extend(r for _o, r in iter_file_records(path))
    return sorted(out, key=lambda r: r.seq)


def scan(d: Path, p: ScanPredicate, slice_bytes: int = 8192) -> tuple[list[int], list[Damage]]:
    seqs: list[int] = []
    damage: list[Damage] = []
    with Catalog.open(d) as catalog:
        plan = plan_scan(catalog, p, slice_bytes)
    for s in plan.slices:
        for item in SliceScanner(s, p, batch_rows=100).scan():
            if isinstance(item, Columns):
                seqs.extend(item.seqs)
            else:
                damage.append(item)
    return seqs, damage


predicates = st.builds(
    ScanPredicate,
    seq_lo=st.integers(0, 4100),
    seq_hi=st.integers(0, 4100),
    ts_lo=st.integers(T0, T0 + 4_200_000),
    ts_hi=st.integers(T0, T0 + 4_200_000),
    topics=st.none() | st.frozensets(st.sampled_from(["orders", "trades", "md.ibm", "x"])),
    topic_prefix=st.sampled_from(["", "md", "o", "z"]),
    publishers=st.none() | st.frozensets(st.sampled_from([7, 8, 9])),
    kinds=st.none() | st.frozensets(st.sampled_from(sorted(KIND_CODES.values()))),
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(p=predicates)
def test_scan_keeps_exactly_what_the_predicate_keeps(journal_dir: Path, p: ScanPredicate) -> None:
    records = oracle(journal_dir)
    seqs, damage = scan(journal_dir, p)
    expect = [
        r.seq for r in records if p.keeps(r.seq, r.timestamp_us, r.pub_hash, int(r.kind), r.topic)
    ]
    assert seqs == expect and not damage


def test_columns_equal_the_records(journal_dir: Path) -> None:
    records = oracle(journal_dir)
    with Catalog.open(journal_dir) as catalog:
        plan = plan_scan(catalog, ScanPredicate())
    rows: list[tuple[object, ...]] = []
    for s in plan.slices:
        for c in SliceScanner(s, ScanPredicate()).scan():
            assert isinstance(c, Columns)
            rows.extend(zip(c.seqs, c.times, c.hashes, c.pseqs, c.topics, c.mtypes, c.kinds,
                            c.paths, c.flags, c.corr_ids, c.sow_keys, c.bodies, strict=True))  # fmt: skip
    assert rows == [
        (r.seq, r.timestamp_us, r.pub_hash, r.pub_seq, r.topic, r.message_type,
         r.kind.name.lower(), list(r.path), r.flags, r.corr_id or None, r.sow_key or None, r.body)
        for r in records
    ]  # fmt: skip


def test_publisher_and_seq_pruning_drop_blocks(journal_dir: Path) -> None:
    with Catalog.open(journal_dir) as catalog:
        full = plan_scan(catalog, ScanPredicate())
        second_half = plan_scan(catalog, ScanPredicate(publishers=frozenset({8})))
        none = plan_scan(catalog, ScanPredicate(publishers=frozenset({9})))
        seqs = plan_scan(catalog, ScanPredicate(seq_lo=1000, seq_hi=1010))
    assert full.blocks_planned == full.blocks_total > 20
    assert full.blocks_total * 0.4 < second_half.blocks_planned < full.blocks_total * 0.6
    assert none.blocks_planned == 0 and not none.slices
    assert seqs.blocks_planned <= 2


def test_the_active_journal_of_a_running_log(tmp_path: Path) -> None:
    """Open index plus an unindexed tail (what a live broker's directory looks like)."""

    async def scenario() -> None:
        log = await _write(tmp_path, 1500, close=False)
        try:
            await log.wait_durable(log.last_seq)
            d = tmp_path / "journal"

            def check() -> None:
                with Catalog.open(d) as catalog:
                    active = catalog.journals[-1]
                    assert active.complete and catalog.last_seq() == 1500
                    assert (active.index is not None and not active.note) or "index" in str(
                        active.note
                    )
                assert scan(d, ScanPredicate())[0] == list(range(1, 1501))

            await asyncio.to_thread(check)
        finally:
            await log.abort()

    asyncio.run(scenario())


def test_compressed_moved_and_unindexed_journals(journal_dir: Path, tmp_path: Path) -> None:
    d = tmp_path / "journal"
    shutil.copytree(journal_dir, d)
    with Catalog.open(d) as catalog:
        plan = plan_scan(catalog, ScanPredicate())
        first = catalog.journals[0]
    (d / index_name(INSTANCE, catalog.journals[1].base)).unlink()  # rebuilt by the catalog
    # the first journal is compressed after planning: readers find it under its new name
    src = d / journal_name(INSTANCE, first.base)
    from spool.server.txlog.storage.compression import compress_journal

    compress_journal(src, d / journal_name(INSTANCE, first.base, "zstd"),
                     "zstd", data_len=first.indexed_end)  # fmt: skip
    src.unlink()
    seqs = []
    for s in plan.slices:
        seqs += [
            x
            for c in SliceScanner(s, ScanPredicate()).scan()
            if isinstance(c, Columns)
            for x in c.seqs
        ]
    assert seqs == list(range(1, 4001))
    assert scan(d, ScanPredicate())[0] == list(range(1, 4001))
    with Catalog.open(d, scan_limit=1024) as catalog:  # too big to index here: unindexed
        assert any(not j.complete for j in catalog.journals)
        plan = plan_scan(catalog, ScanPredicate())
        assert plan.unindexed >= 1
    seqs = []
    for s in plan.slices:
        seqs += [
            x
            for c in SliceScanner(s, ScanPredicate()).scan()
            if isinstance(c, Columns)
            for x in c.seqs
        ]
    assert seqs == list(range(1, 4001))


def test_damage_in_unindexed_bytes_ends_that_journal_only(
    journal_dir: Path, tmp_path: Path
) -> None:
    d = tmp_path / "journal"
    shutil.copytree(journal_dir, d)
    with Catalog.open(d) as catalog:
        victim = catalog.journals[1]
        nxt = catalog.journals[2].base
    (d / index_name(INSTANCE, victim.base)).unlink()
    path = d / journal_name(INSTANCE, victim.base)
    raw = bytearray(path.read_bytes())
    raw[5000] ^= 0x55
    path.write_bytes(bytes(raw))
    seqs, damage = scan(d, ScanPredicate())
    assert len(damage) == 1 and damage[0].journal == victim.base
    lost = set(range(damage[0].first_seq, nxt))
    assert seqs == [s for s in range(1, 4001) if s not in lost]
    assert damage[0].reason == "crc mismatch" and damage[0].records is None


def test_errors(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(NoJournals):
        Catalog.open(tmp_path / "empty")
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / journal_name(INSTANCE, 1)).mkdir()
    with pytest.raises(UnreadableJournal, match="cannot read"):
        Catalog.open(bad)


def test_damage_comes_after_the_records_before_it(journal_dir: Path, tmp_path: Path) -> None:
    d = tmp_path / "journal"
    shutil.copytree(journal_dir, d)
    with Catalog.open(d) as catalog:
        victim = catalog.journals[0]
        block = victim.blocks[3]
    path = d / journal_name(INSTANCE, victim.base)
    raw = bytearray(path.read_bytes())
    raw[block.offset + 60] ^= 0x01
    path.write_bytes(bytes(raw))
    with Catalog.open(d) as catalog:
        plan = plan_scan(catalog, ScanPredicate(), 1 << 20)
    order: list[int] = []
    for s in plan.slices[:1]:
        for item in SliceScanner(s, ScanPredicate(), batch_rows=10_000).scan():
            order += item.seqs if isinstance(item, Columns) else [-item.first_seq]
    cut = order.index(-block.first_seq)
    assert order[:cut] == list(range(1, block.first_seq))
    assert order[cut + 1] == block.last_seq + 1


async def _write_delayed(tmp: Path) -> None:
    """Publisher 7 schedules 150 messages while 8 publishes; then only 8 publishes, and
    7's due records come between its messages (blocks that hold no record filed under 7)."""
    log = TransactionLog(config(tmp, journal_size=16 * 1024), INSTANCE, block_bytes=512)
    await log.open()
    kw: dict[str, Any] = {"topic": "orders", "message_type": "json"}
    for s in range(1, 151):
        log.append_many(**kw, pub_hash=7, pub_seqs=[s], bodies=[b'{"d":%d}' % s],
                        sow_keys=[schedule_field(T0 + s, "")], kind=RecordKind.SCHEDULED)  # fmt: skip
        log.append_many(**kw, pub_hash=8, pub_seqs=[s], bodies=[b"{}"])
    for s in range(151, 751):
        log.append_many(**kw, pub_hash=8, pub_seqs=[s], bodies=[b"{}"])
        if s % 4 == 0:
            d = s // 4 - 37
            log.append_due(**kw, pub_hash=7, pub_seqs=[d], bodies=[b'{"d":%d}' % d])
    await log.close()


def test_scheduled_and_due_records_are_rows_of_their_own_kinds(tmp_path: Path) -> None:
    """Both records of a delayed message are rows, each under its kind's name, the
    scheduled one with its SOW key field as recorded; a ``publisher_id`` filter keeps the
    publisher's due rows though the index files them under a key of their own."""
    asyncio.run(_write_delayed(tmp_path))
    d = tmp_path / "journal"
    records = oracle(d)
    kinds = {r.kind for r in records}
    assert kinds == {RecordKind.PUBLISH, RecordKind.SCHEDULED, RecordKind.DUE}
    for p in (
        ScanPredicate(),
        ScanPredicate(publishers=frozenset({7})),
        ScanPredicate(publishers=frozenset({8})),
        ScanPredicate(kinds=frozenset({KIND_CODES["due"]})),
        ScanPredicate(kinds=frozenset({KIND_CODES["scheduled"]}), publishers=frozenset({7})),
    ):
        seqs, damage = scan(d, p, slice_bytes=2048)
        want = [
            r.seq
            for r in records
            if p.keeps(r.seq, r.timestamp_us, r.pub_hash, int(r.kind), r.topic)
        ]
        assert seqs == want and not damage, p
    with Catalog.open(d) as catalog:
        plan = plan_scan(catalog, ScanPredicate(publishers=frozenset({7})))
    rows: list[tuple[object, ...]] = []
    for s in plan.slices:
        for c in SliceScanner(s, ScanPredicate(publishers=frozenset({7}))).scan():
            assert isinstance(c, Columns)
            rows.extend(zip(c.seqs, c.kinds, c.sow_keys, strict=True))
    assert rows == [
        (r.seq, r.kind.name.lower(), r.sow_key or None) for r in records if r.pub_hash == 7
    ]
    assert ("due" in {k for _s, k, _f in rows}) and rows[0][2] == schedule_field(T0 + 1, "")


def test_a_record_of_a_kind_no_version_defines_is_damage(tmp_path: Path) -> None:
    """A journal from a later version: the records before the unknown kind are rows, the
    rest of its journal a damage row naming it, and no row is made of it."""
    d = tmp_path / "journal"
    asyncio.run(_write(tmp_path, 600))
    with Catalog.open(d) as catalog:
        victim = catalog.journals[0]
    (d / index_name(INSTANCE, victim.base)).unlink()
    path = d / journal_name(INSTANCE, victim.base)
    raw = bytearray(path.read_bytes())
    pos = 0
    for _ in range(100):
        pos += int.from_bytes(raw[pos : pos + 4], "little")
    old, _end = decode(bytes(raw), pos)
    assert not old.path and not old.corr_id and not old.sow_key
    new = encode(old.seq, old.timestamp_us, old.pub_hash, old.pub_seq, old.topic,
                 old.message_type, 9, (), old.flags, old.body)  # fmt: skip
    raw[pos : pos + len(new)] = new
    path.write_bytes(bytes(raw))
    seqs, damage = scan(d, ScanPredicate())
    (hurt,) = damage
    assert (hurt.reason, hurt.first_seq) == ("unknown kind", old.seq)
    assert seqs[: old.seq - 1] == list(range(1, old.seq)) and old.seq not in seqs


def test_a_publisher_filter_keeps_its_late_records(tmp_path: Path) -> None:
    """A late record (a gap of its publisher filled below its highest, by another route)
    is indexed under its publisher's late key: a ``publisher_id`` filter reads those
    blocks too, though no record there is filed under the publisher's own key."""

    async def write() -> None:
        log = TransactionLog(
            config(tmp_path, journal_size=16 * 1024), INSTANCE, block_bytes=512, track_gaps=True
        )
        await log.open()
        kw: dict[str, Any] = {"topic": "orders", "message_type": "json", "bodies": [b"{}"]}
        for s in range(1, 151):
            log.append_many(**kw, pub_hash=7, pub_seqs=[2 * s])  # every odd one missing
            log.append_many(**kw, pub_hash=8, pub_seqs=[s])
        for s in range(151, 751):
            log.append_many(**kw, pub_hash=8, pub_seqs=[s])
            if s % 4 == 0:  # the missing ones arrive late, among 8's messages only
                log.append(topic="orders", message_type="json", pub_hash=7,
                           pub_seq=2 * (s // 4 - 37) - 1, body=b"{}", late=True)  # fmt: skip
        await log.close()

    asyncio.run(write())
    d = tmp_path / "journal"
    records = oracle(d)
    assert sum(1 for r in records if r.flags & 1) == 150
    for p in (ScanPredicate(publishers=frozenset({7})), ScanPredicate(publishers=frozenset({8}))):
        seqs, damage = scan(d, p, slice_bytes=2048)
        want = [r.seq for r in records if p.keeps(r.seq, r.timestamp_us, r.pub_hash, 1, r.topic)]
        assert seqs == want and not damage, p
