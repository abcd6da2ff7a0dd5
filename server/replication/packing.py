"""A batch of the log into the runs of a ``data`` message (pure; the source's hot path).

A destination gets the records a route chose from one :class:`RecordBatch` as *runs*:
consecutive chosen records of one topic, publisher, kind and path (docs/replication.md),
each added to a :class:`~spool.server.replication.frames.RecordsWriter` column by column.

Why the fast paths: the common batch is every record of a stretch of the log, of one
topic and publisher, without paths (a destination of publishers connected here). Its
runs are found with two ``set()`` calls instead of a comparison per record, and a run of
consecutive records takes its columns as slices of the batch's columns instead of one
Python-level index per record and column (this packing is much of the source's CPU per
replicated message on a sync pair; docs/performance-log.md "A replicated pair's CPU per
message").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from spool.server.replication.frames import RecordsWriter
from spool.server.replication.inflight import InFlight
from spool.server.txlog.format.batch import RecordBatch

__all__ = ["pack_runs"]

#: topic names kept encoded per link before the cache starts over
_TOPIC_CACHE: Final = 10_000


def pack_runs(
    batch: RecordBatch,
    chosen: Sequence[int],
    topic_bytes: dict[str, bytes],
    sent: InFlight | None = None,
) -> RecordsWriter:
    """The chosen records of ``batch`` (indexes, ascending) as runs in a new writer.

    ``topic_bytes`` caches encoded topic names across batches; the seqs and times of the
    packed records are added to ``sent`` (what awaits the destination's ack), a run at a
    time.
    """
    writer = RecordsWriter()
    n = len(chosen)
    if not n:
        return writer
    topics, hashes = batch.topics, batch.pub_hashes
    plain = batch.plain
    one_kind = len(batch.kinds()) == 1
    lo, hi = chosen[0], chosen[-1] + 1
    if hi - lo == n and plain and one_kind:
        # consecutive records without paths: one run when one topic and one publisher
        whole = lo == 0 and hi == len(topics)
        if (
            len(set(topics if whole else topics[lo:hi])) == 1
            and len(set(hashes if whole else hashes[lo:hi])) == 1
        ):
            _add(writer, batch, chosen, lo, hi, topic_bytes, sent)
            return writer
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
        last = chosen[end - 1] + 1
        if last - i0 == end - start:
            _add(writer, batch, run, i0, last, topic_bytes, sent)
        else:
            _add(writer, batch, run, -1, -1, topic_bytes, sent)
        start = end
    return writer


def _add(
    writer: RecordsWriter,
    batch: RecordBatch,
    run: Sequence[int],
    lo: int,
    hi: int,
    topic_bytes: dict[str, bytes],
    sent: InFlight | None,
) -> None:
    """Add one run: the records ``run`` of ``batch``, which are ``lo:hi`` when ``lo`` is
    not -1 (consecutive: the columns are sliced)."""
    i0 = run[0]
    topic = batch.topics[i0]
    raw = topic_bytes.get(topic)
    if raw is None:
        if len(topic_bytes) > _TOPIC_CACHE:
            topic_bytes.clear()
        raw = topic_bytes[topic] = topic.encode()
    first = batch.first_seq
    seqs: Sequence[int]
    if lo >= 0:
        seqs = range(first + lo, first + hi)
        stamps = batch.timestamps_us[lo:hi]
        pseqs = batch.pub_seqs[lo:hi]
        bodies = batch.bodies[lo:hi]
    else:
        seqs = [first + j for j in run]
        times, pubseqs, all_bodies = batch.timestamps_us, batch.pub_seqs, batch.bodies
        stamps = [times[j] for j in run]
        pseqs = [pubseqs[j] for j in run]
        bodies = [all_bodies[j] for j in run]
    corrs = keys = None
    path: tuple[str, ...] = ()
    if not batch.plain:
        path = batch.path(i0)
        corrs = [batch.corr_id(j).encode() for j in run]
        keys = [batch.sow_key(j).encode() for j in run]
    writer.add_run(
        raw, batch.pub_hashes[i0], batch.kind(i0), path, seqs, stamps, pseqs, bodies,
        corrs if corrs and any(corrs) else None, keys if keys and any(keys) else None,
    )  # fmt: skip
    if sent is not None:
        sent.add(seqs, stamps)
