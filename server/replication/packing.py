"""A batch of the log into the runs of a ``data`` message (pure; the source's hot path).

A destination gets the records a route chose from one :class:`RecordBatch` as *runs*:
consecutive chosen records of one topic, publisher, kind and path (docs/replication.md),
each added to a :class:`~server.replication.frames.RecordsWriter` column by column.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Final

from server.replication.frames import RecordsWriter
from server.txlog.batch import RecordBatch

__all__ = ["pack_runs"]

#: topic names kept encoded per link before the cache starts over
_TOPIC_CACHE: Final = 10_000


def pack_runs(
    batch: RecordBatch,
    chosen: Sequence[int],
    topic_bytes: dict[str, bytes],
    sent: deque[tuple[int, int]],
) -> RecordsWriter:
    """The chosen records of ``batch`` (indexes, ascending) as runs in a new writer.

    ``topic_bytes`` caches encoded topic names across batches; ``(seq, timestamp_us)`` of
    every packed record is appended to ``sent`` (what awaits the destination's ack).
    """
    writer = RecordsWriter()
    first = batch.first_seq
    topics, bodies = batch.topics, batch.bodies
    hashes, pseqs, times = batch.pub_hashes, batch.pub_seqs, batch.timestamps_us
    plain = batch.plain
    one_kind = len(batch.kinds()) == 1
    n = len(chosen)
    start = 0
    while start < n:
        i0 = chosen[start]
        topic, pub, kind = topics[i0], hashes[i0], batch.kind(i0)
        path = () if plain else batch.path(i0)
        end = start + 1
        while end < n:
            j = chosen[end]
            if (
                topics[j] != topic
                or hashes[j] != pub
                or (not one_kind and batch.kind(j) != kind)
                or (not plain and batch.path(j) != path)
            ):
                break
            end += 1
        run = chosen[start:end] if start or end < n else chosen
        raw = topic_bytes.get(topic)
        if raw is None:
            if len(topic_bytes) > _TOPIC_CACHE:
                topic_bytes.clear()
            raw = topic_bytes[topic] = topic.encode()
        corrs = keys = None
        if not plain:
            corrs = [batch.corr_id(j).encode() for j in run]
            keys = [batch.sow_key(j).encode() for j in run]
        seqs = [first + j for j in run]
        stamps = [times[j] for j in run]
        writer.add_run(
            raw, pub, kind, path, seqs, stamps, [pseqs[j] for j in run],
            [bodies[j] for j in run], corrs if corrs and any(corrs) else None,
            keys if keys and any(keys) else None,
        )  # fmt: skip
        sent.extend(zip(seqs, stamps, strict=True))
        start = end
    return writer
