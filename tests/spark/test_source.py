"""spark.read.format("spool"): rows, pushdown, damage, errors - against the codec's scan."""

from __future__ import annotations

import re
import shutil
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession
from pyspark.sql.pandas.types import to_arrow_schema

from spool.server.pipeline.arrow import ARROW_SCHEMA, SPARK_SCHEMA
from spool.server.pipeline.catalog import Catalog
from spool.server.pipeline.errors import AmbiguousInstance, JavaNotFound, JournalDirectoryNotFound
from spool.server.pipeline.planner import plan_scan
from spool.server.pipeline.predicate import ScanPredicate
from spool.server.pipeline.session import check_java
from spool.server.pipeline.source import register
from spool.server.txlog.format.record import Record
from spool.server.txlog.storage.files import journal_name
from tests.spark.conftest import INSTANCE, Journals, env_without_java


def load(spark: SparkSession, j: Journals, **options: str):  # type: ignore[no-untyped-def]
    reader = spark.read.format("spool").option("archive", str(j.archive))
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load(str(j.journal))


def test_arrow_schema_is_what_spark_derives() -> None:
    assert to_arrow_schema(SPARK_SCHEMA, timezone="UTC").equals(ARROW_SCHEMA)


def test_the_corpus_spans_plain_compressed_and_archived_journals(journals: Journals) -> None:
    names = [p.name for p in journals.archive.iterdir()]
    assert any(n.endswith(".journal.zst") for n in names), names
    assert any(n.endswith(".journal") for n in names), names
    assert any(p.name.endswith(".journal") for p in journals.journal.iterdir())


def test_counts_and_every_field_equal_a_plain_python_scan(
    spark: SparkSession, journals: Journals
) -> None:
    df = load(spark, journals)
    records = journals.records
    assert df.count() == len(records)
    rows = df.collect()
    assert Counter(r.topic for r in rows) == Counter(r.topic for r in records)
    assert Counter(int(r.publisher_id) for r in rows) == Counter(r.pub_hash for r in records)
    rows.sort(key=lambda r: r.seq)
    for row, rec in zip(rows, records, strict=True):
        assert row.seq == rec.seq
        assert row.bookmark == rec.bookmark
        assert int(row.publisher_id) == rec.pub_hash and int(row.publisher_seq) == rec.pub_seq
        us = int(row.timestamp.replace(tzinfo=UTC).timestamp() * 1_000_000 + 0.5)
        assert abs(us - rec.timestamp_us) <= 1
        assert (row.topic, row.message_type, row.kind) == (rec.topic, rec.message_type, "publish")
        assert row.data == rec.body
        assert row.corr_id == (rec.corr_id or None)
        assert row.path == list(rec.path) and row.flags == rec.flags and row.damage is None
        try:
            assert row.data_text == rec.body.decode()
        except UnicodeDecodeError:
            assert row.data_text is None


def test_large_journals_give_several_partitions(spark: SparkSession, journals: Journals) -> None:
    df = load(spark, journals, partitionBytes=str(64 * 1024))
    with Catalog.open(journals.journal, journals.archive) as catalog:
        assert len(catalog.journals) >= 3
        files = len(catalog.journals)
    assert df.rdd.getNumPartitions() > 3 * files
    assert df.count() == len(journals.records)


@pytest.mark.parametrize(
    ("where", "keep"),
    [
        ("seq BETWEEN 5000 AND 5200", lambda r: 5000 <= r.seq <= 5200),
        ("seq > 15500", lambda r: r.seq > 15500),
        ("topic = 'trades' AND seq < 3000", lambda r: r.topic == "trades" and r.seq < 3000),
        ("seq > 100000000", lambda r: False),  # nothing planned: an empty result
    ],
)
def test_pushed_down_filters_read_fewer_blocks(
    spark: SparkSession, journals: Journals, where: str, keep: object
) -> None:
    # 64 KB partitions: a partition Spark plans is a run of the index blocks it reads
    df = load(spark, journals, partitionBytes=str(64 * 1024))
    everything = df.rdd.getNumPartitions()
    narrowed = df.where(where)
    assert narrowed.rdd.getNumPartitions() < everything / 2
    got = sorted(r.seq for r in narrowed.select("seq").collect())
    assert got == [r.seq for r in journals.records if keep(r)]  # type: ignore[operator]


def test_time_and_publisher_pruning_counted_by_the_planner(journals: Journals) -> None:
    recs = journals.records
    middle = recs[len(recs) // 2].timestamp_us
    with Catalog.open(journals.journal, journals.archive) as catalog:
        full = plan_scan(catalog, ScanPredicate(), 1)
        late = plan_scan(catalog, ScanPredicate(ts_lo=middle), 1)
        assert full.blocks_planned == full.blocks_total
        assert late.blocks_planned < full.blocks_total * 0.6
        one = plan_scan(catalog, ScanPredicate(seq_lo=100, seq_hi=100), 1)
        assert one.blocks_planned == 1 and len(one.slices) == 1


def test_time_filter_matches_python(spark: SparkSession, journals: Journals) -> None:
    recs = journals.records
    t = recs[12000].timestamp_us
    moment = datetime.fromtimestamp(t / 1_000_000, UTC).replace(tzinfo=None)
    got = load(spark, journals).where(f"timestamp >= '{moment.isoformat()}'").count()
    assert got == sum(1 for r in recs if r.timestamp_us >= t)


def bookmark(r: Record) -> str:
    return f"{r.pub_hash}|{r.pub_seq}|"


def test_range_options_read_between_their_positions(
    spark: SparkSession, journals: Journals
) -> None:
    """startingOffsets / endingOffsets as Kafka users name them: a bookmark is the place
    just after its record (the start excludes it, the end includes it), a seq the place
    before that record; the timestamps (milliseconds) keep ``start <= t < end``."""
    recs = journals.records
    a, b = recs[3000], recs[9000]

    def seqs(**options: str) -> list[int]:
        return sorted(r.seq for r in load(spark, journals, **options).select("seq").collect())

    assert seqs(startingOffsets=bookmark(a), endingOffsets=bookmark(b)) == [
        r.seq for r in recs if a.seq < r.seq <= b.seq
    ]
    assert seqs(startingOffsets="15990") == [r.seq for r in recs if r.seq >= 15990]
    assert seqs(endingOffsets="11") == list(range(1, 11))
    assert seqs(startingOffsets="latest") == []
    assert seqs(startingOffsets=bookmark(a), endingOffsets=bookmark(a)) == []
    lo_ms, hi_ms = a.timestamp_us // 1000 + 1, b.timestamp_us // 1000
    assert seqs(startingTimestamp=str(lo_ms), endingTimestamp=str(hi_ms)) == [
        r.seq for r in recs if lo_ms * 1000 <= r.timestamp_us < hi_ms * 1000
    ]
    # the range narrows what is planned, as a pushed-down filter does
    narrow = load(spark, journals, partitionBytes=str(64 * 1024), endingOffsets="2000")
    everything = load(spark, journals, partitionBytes=str(64 * 1024))
    assert narrow.rdd.getNumPartitions() < everything.rdd.getNumPartitions() / 2


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"startingOffsets": "1", "startingTimestamp": "0"}, "not both"),
        ({"endingOffsets": "9", "endingTimestamp": "0"}, "not both"),
        ({"startingTimestamp": "yesterday"}, "milliseconds since the Unix epoch"),
        ({"endingOffsets": "7|2|"}, "no record of these journals has this bookmark"),
        ({"startingOffsets": "soon"}, "earliest, latest, a seq"),
    ],
)
def test_range_options_that_cannot_work_are_refused(
    spark: SparkSession, journals: Journals, options: dict[str, str], words: str
) -> None:
    with pytest.raises(PySparkException, match=re.escape(words)):
        load(spark, journals, **options).count()


def test_the_source_spark_finds_by_itself_reads_without_pushdown(
    spark: SparkSession, journals: Journals
) -> None:
    """The source ``pyspark_spool`` offers needs no setting: with filter pushdown off (a
    plain session's default), a WHERE clause is applied by Spark after the read. The
    pushdown source would be refused there."""
    from pyspark_spool import DefaultSource

    spark.conf.set("spark.sql.python.filterPushdown.enabled", "false")
    try:
        with pytest.raises(PySparkException, match="DATA_SOURCE_PUSHDOWN_DISABLED"):
            load(spark, journals).where("seq < 10").count()
        spark.dataSource.register(DefaultSource)
        got = load(spark, journals).where("seq < 10 AND topic = 'trades'").select("seq")
        assert sorted(r.seq for r in got.collect()) == [
            r.seq for r in journals.records if r.seq < 10 and r.topic == "trades"
        ]
    finally:
        register(spark)
    assert spark.conf.get("spark.sql.python.filterPushdown.enabled") == "true"


def copy_corpus(journals: Journals, dest: Path) -> Path:
    shutil.copytree(journals.data, dest, ignore=shutil.ignore_patterns("*.db*", "*.log*"))
    return dest


def test_a_corrupt_tail_is_reported_and_the_rest_processed(
    spark: SparkSession, journals: Journals, tmp_path: Path
) -> None:
    data = copy_corpus(journals, tmp_path / "data")
    with Catalog.open(data / "journal", data / "archive") as catalog:
        last = catalog.journals[-1]
        victim = catalog.journals[-2]  # a finished plain journal with a sealed index
        block = victim.blocks[-2]
    path = data / "journal" / journal_name(INSTANCE, victim.base)
    raw = bytearray(path.read_bytes())
    raw[block.offset + 70] ^= 0xFF  # inside the first record of the second-to-last block
    path.write_bytes(bytes(raw))
    tail = data / "journal" / journal_name(INSTANCE, last.base)
    size = tail.stat().st_size
    kept = tail.read_bytes()
    end = last.indexed_end
    tail.write_bytes(kept[: end - 30] + b"\0" * (size - end + 30))  # last record half-written

    df = load(spark, Journals(data, data / "journal", data / "archive", []))
    damage = df.where("damage IS NOT NULL").orderBy("seq").collect()
    assert [d.damage.reason for d in damage] == ["crc mismatch", "crc mismatch"]
    assert damage[1].seq == journals.records[-1].seq and damage[1].journal == last.base
    lost_block = set(range(block.first_seq, block.last_seq + 1))
    good = {r.seq for r in df.where("damage IS NULL").select("seq").collect()}
    expect = (
        {r.seq for r in journals.records}
        - lost_block
        - {last.blocks[-1].last_seq if last.blocks else 0}
    )
    assert good == expect
    assert damage[0].seq == block.first_seq and damage[0].damage.records == block.count
    assert damage[0].journal == victim.base and damage[0].offset == block.offset

    dropped = load(
        spark, Journals(data, data / "journal", data / "archive", []), mode="DROPMALFORMED"
    )
    assert dropped.count() == len(good)
    with pytest.raises(PySparkException, match="crc mismatch"):
        load(spark, Journals(data, data / "journal", data / "archive", []), mode="FAILFAST").count()


def test_clear_errors(spark: SparkSession, journals: Journals, tmp_path: Path) -> None:
    with pytest.raises(JournalDirectoryNotFound):
        Catalog.open(tmp_path / "nope")
    with pytest.raises(PySparkException, match="does not exist"):
        spark.read.format("spool").load(str(tmp_path / "nope")).count()
    with pytest.raises(PySparkException, match="not an option of the spool format"):
        spark.read.format("spool").option("archiv", "x").load(str(journals.journal)).count()
    two = copy_corpus(journals, tmp_path / "two")
    first = next(p for p in (two / "journal").iterdir() if p.name.endswith(".journal"))
    shutil.copy(first, first.with_name(first.name.replace(INSTANCE, "other")))
    with pytest.raises(AmbiguousInstance, match="spool-spark"):
        Catalog.open(two / "journal")
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / journal_name(INSTANCE, 1)).mkdir()  # not a file: cannot be read
    with pytest.raises(PySparkException, match="cannot read"):
        spark.read.format("spool").load(str(bad)).count()


def test_missing_java_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    check_java.cache_clear()
    for key, value in env_without_java().items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("JAVA_HOME", raising=False)
    try:
        with pytest.raises(JavaNotFound, match="Java 17"):
            check_java()
    finally:
        check_java.cache_clear()
