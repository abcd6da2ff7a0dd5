"""``df.write.format("spool")``: rows published to a broker, each stored exactly once.

Each write task publishes its partition's rows through the Python client
(:mod:`spool.server.client`) under the client name ``<clientName>-<partition>`` with the
publish sequences ``1, 2, 3...`` in row order, asking for persisted acks. The broker keeps,
per client name, the highest sequence stored and drops anything at or below it as a
duplicate (docs/protocol.md). So when Spark retries a task (an executor died, a speculative
copy ran), the new attempt sends the same rows under the same name and sequences, and the
broker stores only what the failed attempt had not: each row lands in the log once. The
attempt also learns from the logon ack how far the name already got and skips sending
those rows at all.

The default ``clientName`` is unique per write, fixed on the driver before the tasks
start; an explicit one makes a rerun of the whole job exactly-once as well (same input,
same partitioning). Either way the rows of a partition must come in the same order on
every attempt (a deterministic input, e.g. files, or ``sortWithinPartitions``), and the
topics must be recorded in the transaction log (the broker cannot de-duplicate what it
does not store). docs/pipeline.md says more.

A ``wss://`` URL verifies the broker's certificate (against ``caFile`` when given, the
system's CAs otherwise); ``certFile`` / ``keyFile`` present a client certificate.

Rows: a ``data`` column (binary or string) and, optionally, ``topic`` (string; the
``topic`` option is the default) and ``corr_id`` (string, passed through). Other columns
are refused rather than silently dropped.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.types import BinaryType, StringType, StructType

from spool.server.client import Client, client_context
from spool.server.pipeline.errors import BadOption, PublishFailed
from spool.server.pipeline.options import WriteOptions

__all__ = ["SinkCommit", "SpoolWriter"]

log = logging.getLogger("spool.pipeline")

_ALLOWED = {"data": (BinaryType, StringType), "topic": (StringType,), "corr_id": (StringType,)}


@dataclass(frozen=True)
class SinkCommit(WriterCommitMessage):
    """What one write task did.

    Attributes:
        partition: the task's partition.
        client: the client name it published under.
        rows: rows in its partition.
        published: rows it sent (the others were stored by an earlier attempt).
        stored_before: the client name's sequence already stored when it logged on.
    """

    partition: int
    client: str
    rows: int
    published: int
    stored_before: int


class SpoolWriter(DataSourceArrowWriter):
    """The sink (created on the driver; pickled to every write task)."""

    def __init__(self, options: WriteOptions, schema: StructType, overwrite: bool) -> None:
        if overwrite:
            raise BadOption("mode", "overwrite", "a transaction log is append-only: use append")
        fields = {f.name: f.dataType for f in schema.fields}
        for name, dtype in fields.items():
            allowed = _ALLOWED.get(name)
            if allowed is None:
                raise BadOption(
                    "columns", sorted(fields), f"column {name!r} is not data, topic or corr_id: "
                    "select the columns to publish"
                )  # fmt: skip
            if not isinstance(dtype, allowed):
                raise BadOption(
                    "columns", name, f"{name} must be {' or '.join(t.__name__ for t in allowed)}"
                )
        if "data" not in fields:
            raise BadOption("columns", sorted(fields), "the rows need a data column (the body)")
        if "topic" not in fields and options.topic is None:
            raise BadOption("topic", None, "give the topic option or a topic column")
        self.options = options
        self.prefix = options.client_name or f"spark-write-{uuid.uuid4().hex[:16]}"

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommit:
        ctx = TaskContext.get()
        partition = ctx.partitionId() if ctx is not None else 0
        name = f"{self.prefix}-{partition}"
        return asyncio.run(self._publish(partition, name, iterator))

    async def _publish(
        self, partition: int, name: str, batches: Iterator[pa.RecordBatch]
    ) -> SinkCommit:
        o = self.options
        tls = (
            client_context(cafile=o.ca_file, certfile=o.cert_file, keyfile=o.key_file)
            if o.url.startswith("wss://")
            else None
        )
        client = Client(o.url, name, user_id=o.user, password=o.password, ssl=tls)
        info = await client.connect(timeout=o.timeout)
        stored = info.last_seq
        n = 0
        sent = 0
        try:
            for batch in batches:
                data = batch.column("data").to_pylist()
                names = batch.schema.names
                topics = batch.column("topic").to_pylist() if "topic" in names else None
                corrs = batch.column("corr_id").to_pylist() if "corr_id" in names else None
                for i, body in enumerate(data):
                    n += 1
                    if n <= stored:
                        continue  # stored by an earlier attempt of this task
                    topic = (topics[i] if topics is not None else None) or o.topic
                    if topic is None:
                        raise BadOption(
                            "topic", None, f"row {n} of partition {partition} has no topic"
                        )
                    if body is None:
                        raise BadOption(
                            "data", None, f"row {n} of partition {partition} has no data"
                        )
                    client.publish(
                        topic,
                        body.encode() if isinstance(body, str) else body,
                        seq=n,
                        persisted=True,
                        correlation_id=corrs[i] if corrs is not None else None,
                    )
                    sent += 1
                    if sent % o.batch_size == 0:
                        await self._settle(client, n)
            if n > stored:
                await self._settle(client, n)
        finally:
            await client.close()
        return SinkCommit(partition, name, n, sent, stored)

    async def _settle(self, client: Client, seq: int) -> None:
        """Wait for the persisted acks up to ``seq``; a failure ack fails the task."""
        await client.wait_persisted(seq, timeout=self.options.timeout)
        if client.failures:
            ack = client.failures[0]
            raise PublishFailed(ack.reason or "failure", str(ack.header.get("detail", "")))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        done = [m for m in messages if isinstance(m, SinkCommit)]
        log.info(
            "spool sink %s: %d rows in %d partitions, %d sent by the last attempts",
            self.prefix, sum(m.rows for m in done), len(done), sum(m.published for m in done),
        )  # fmt: skip

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        log.warning(
            "spool sink %s failed; the rows already stored stay in the log (append-only). "
            "Writing the same input again with clientName=%s stores only the rest.",
            self.prefix, self.prefix,
        )  # fmt: skip
