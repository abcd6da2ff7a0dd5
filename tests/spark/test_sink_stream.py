"""The sink (a retried task stores each row once) and the stream (exactly once across a
restart from the checkpoint), over live brokers."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pyarrow as pa
import pyarrow.dataset as ds
import pytest
from pyspark import TaskContext
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from spool.server.client import Client
from spool.server.pipeline.catalog import Catalog
from spool.server.pipeline.errors import BadOption
from spool.server.pipeline.stream import bytes_end
from tests.spark.conftest import Journals, broker, publish_corpus, scan_files
from tests.support.server import SpoolProcess


@pytest.fixture
def live(tmp_path: Path) -> Iterator[SpoolProcess]:
    proc = broker(tmp_path / "live").start()
    yield proc
    proc.stop()


def test_a_write_whose_tasks_are_retried_stores_each_row_once(
    spark: SparkSession, live: SpoolProcess, tmp_path: Path
) -> None:
    marker = tmp_path / "failed-once"

    def fail_once(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        ctx = TaskContext.get()
        sent = 0
        for batch in batches:
            for start in range(0, len(batch), 100):
                part = batch.slice(start, 100)
                yield part
                sent += len(part)
                # the first attempt of partition 1 dies after 300 rows were sent (and
                # persisted: the sink waits for acks every 100)
                if ctx.partitionId() == 1 and ctx.attemptNumber() == 0 and sent >= 300:
                    marker.write_text("attempt 0 of partition 1 failed")
                    raise RuntimeError("injected task failure")

    rows = spark.range(0, 3000, 1, 3).selectExpr(
        "concat('{\"row\":', id, '}') AS data",
        "CASE WHEN id % 2 = 0 THEN 'even' ELSE 'odd' END AS topic",
    )
    failing = rows.mapInArrow(fail_once, rows.schema)
    (
        failing.write.format("spool")
        .option("url", live.ws_url)
        .option("batchSize", "100")
        .option("clientName", "sink-test")
        .mode("append")
        .save()
    )
    assert marker.exists(), "the injected failure did not happen"
    data = live.workdir / "data"
    records = scan_files(data / "journal")
    bodies = Counter(r.body for r in records)
    assert len(records) == 3000
    assert set(bodies.values()) == {1}
    assert {r.topic for r in records} == {"even", "odd"}

    # the same job again (same input, same clientName): nothing new is stored
    rows.write.format("spool").option("url", live.ws_url).option("clientName", "sink-test").mode(
        "append"
    ).save()
    assert len(scan_files(data / "journal")) == 3000


def test_sink_refuses_what_it_cannot_do(spark: SparkSession, live: SpoolProcess) -> None:
    df = spark.createDataFrame([("x", "t", 1)], "data STRING, topic STRING, n INT")
    with pytest.raises(Exception, match="column 'n' is not data, topic or corr_id"):
        df.write.format("spool").option("url", live.ws_url).mode("append").save()
    with pytest.raises(Exception, match="append-only"):
        df.select("data", "topic").write.format("spool").option("url", live.ws_url).mode(
            "overwrite"
        ).save()
    assert BadOption  # the errors above are BadOption raised in the planning worker


def to_parquet(stream: DataFrame, out: Path, checkpoint: Path) -> StreamingQuery:
    """Run ``stream`` into a Parquet directory until it has read what is there now."""
    query = (
        stream.writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(600)
    assert query.exception() is None, query.exception()
    return query


def test_stream_sees_every_message_once_across_a_restart(
    spark: SparkSession, live: SpoolProcess, tmp_path: Path
) -> None:
    journal = live.workdir / "data" / "journal"
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    def run_query() -> None:
        stream = (
            spark.readStream.format("spool")
            .option("adminUrl", live.http_url)
            .option("pinOwner", "stream-test")
            .option("maxRecordsPerTrigger", "700")
            .load(str(journal))
            .where("damage IS NULL")
            .select("seq", "bookmark", "topic", "data")
        )
        to_parquet(stream, out, checkpoint)

    asyncio.run(publish_corpus(live.ws_url, 2000))
    run_query()
    first = ds.dataset(out, format="parquet").to_table()
    assert sorted(first.column("seq").to_pylist()) == list(range(1, 2001))

    with httpx.Client(base_url=live.http_url, timeout=30) as http:
        pins = http.get("/api/transaction_log/pins").json()["pins"]
        assert {"owner": "stream-test", "seq": 2001, "admin": True} in pins

    asyncio.run(publish_corpus(live.ws_url, 1500, start=2000))
    run_query()  # restarted from the checkpoint
    run_query()  # nothing new: nothing read again
    table = ds.dataset(out, format="parquet").to_table()
    seqs = table.column("seq").to_pylist()
    assert sorted(seqs) == list(range(1, 3501))  # every message, exactly once
    records = {r.seq: r for r in scan_files(journal)}
    for seq, bm, data in zip(seqs, table.column("bookmark").to_pylist(),
                             table.column("data").to_pylist(), strict=True):  # fmt: skip
        assert (bm, data) == (records[seq].bookmark, records[seq].body)

    with httpx.Client(base_url=live.http_url, timeout=30) as http:
        pins = http.get("/api/transaction_log/pins").json()["pins"]
        assert {"owner": "stream-test", "seq": 3501, "admin": True} in pins
        released = http.post("/api/transaction_log/pins/stream-test/release")
        assert released.json() == {"ok": True, "owner": "stream-test"}
        assert http.post("/api/transaction_log/pins/stream-test/release").status_code == 404


async def _last_seq(url: str, name: str) -> int:
    async with Client(url, name) as c:
        assert c.logon is not None
        return c.logon.last_seq


def test_a_stream_takes_about_max_bytes_per_trigger_in_whole_blocks(journals: Journals) -> None:
    """maxBytesPerTrigger: each micro-batch is whole index blocks that fit (the first one
    always, so a stream moves on), and the next block would not have fitted."""
    limit = 200_000
    with Catalog.open(journals.journal, journals.archive) as catalog:
        blocks = [b for j in catalog.journals for b in j.blocks]
        first, steps = catalog.first_seq, 0
        end_of_log = catalog.journals[-1].next_seq
        while first < end_of_log:
            end = bytes_end(catalog, first, limit)
            taken = [b for b in blocks if b.last_seq >= first and b.first_seq < end]
            assert taken and taken[-1].last_seq == end - 1  # whole blocks, at least one
            size = sum(b.length for b in taken)
            assert size <= limit or len(taken) == 1
            following = [b for b in blocks if b.first_seq == end]
            if following:
                assert size + following[0].length > limit  # the next one did not fit
            first, steps = end, steps + 1
    assert steps > 3


def test_a_stream_over_files_reads_every_record_once_from_its_start(
    spark: SparkSession, journals: Journals, tmp_path: Path
) -> None:
    """Without adminUrl (an instance that is not running), from startingTimestamp, in
    micro-batches of about maxBytesPerTrigger: every record from that time, once."""
    start = journals.records[6000]
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    stream = (
        spark.readStream.format("spool")
        .option("archive", str(journals.archive))
        .option("startingTimestamp", str(start.timestamp_us // 1000))
        .option("maxBytesPerTrigger", "300000")
        .load(str(journals.journal))
        .select("seq")
    )
    query = to_parquet(stream, out, checkpoint)
    batches = [p for p in query.recentProgress if p["numInputRows"]]
    assert len(batches) > 1
    got = ds.dataset(out, format="parquet").to_table().column("seq").to_pylist()
    first_ms = start.timestamp_us // 1000 * 1000
    first_seq = next(r.seq for r in journals.records if r.timestamp_us >= first_ms)
    assert sorted(got) == [r.seq for r in journals.records if r.seq >= first_seq]
