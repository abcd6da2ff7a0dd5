"""Serving a repair: the records another instance lost, found in this instance's log.

An instance whose log holds fenced (damaged or missing) records asks its peers for them
(server/replication/repair.py) on the ``/replication`` endpoint, with a ``repair``
request instead of a ``hello``. The request names, per fenced range, the bookmark
intervals ``(pub_hash, first, last)`` its records lie in and the time window between the
intact records around it. This instance answers (:func:`serve_repair`, called by the
bootstrap source, which authenticates the requester like a link's source):

1. **where to read**: from the first record at or after the earliest window's start less
   :data:`WINDOW_SLACK` (the two instances' clocks differ; the records were recorded here
   after the requester did, by a link's latency), or from the first record of an
   interval's first bookmark when that is earlier, up to the latest window's end plus the
   slack (the log's end for a range with nothing after it);
2. an ``offer`` of that range (the requester's progress and ETA);
3. **which records**: every record of that range whose bookmark lies in an interval and
   whose kind a link replicates (a delayed message's scheduled record, as it was
   published; never its due record, which only the log that wrote it has, under the same
   bookmark), **whoever published it and whatever its path**: loop
   protection is a link's rule against sending an instance what it already has; an
   instance that asks for a record has lost it. A record whose topic the requester's user
   may not read is not sent. Records this log holds fenced itself are not there to send:
   a requester asking a peer that lost the same records learns it from what it gets;
4. ``data`` messages (the link's runs: each record with this log's seq and time, its
   publisher's bookmark, its path), then ``done``.

The requester de-duplicates and places the records; this side only reads. Reads are the
log's batches (``read_view``: file reads in a worker thread), written as the socket takes
them (TCP backpressure paces a slow requester).
"""

from __future__ import annotations

import bisect
from collections.abc import Awaitable, Callable, Sequence
from typing import Final

from spool.server.replication.frames import RecordsWriter, Repair
from spool.server.replication.packing import pack_runs
from spool.server.replication.routing import REPLICATED_KINDS
from spool.server.txlog import FencedRecords, RecordKind, TransactionLog
from spool.server.txlog.format.batch import RecordBatch

__all__ = ["WINDOW_SLACK", "RepairPlan", "plan_repair", "send_repair"]

#: seconds a window is widened by on each side (clock differences, link latency)
WINDOW_SLACK: Final = 600.0
#: records and bytes per log read (and so at most per data message)
BATCH_RECORDS: Final = 4096
BATCH_BYTES: Final = 1 << 20
_DELETE: Final = int(RecordKind.SOW_DELETE)


class RepairPlan:
    """What a repair request asks of this log: where to read, which bookmarks to send.

    Attributes:
        start, end: the local seqs to read.
    """

    def __init__(self, request: Repair, start: int, end: int) -> None:
        self.start = start
        self.end = end
        # pub_hash -> sorted, merged (first, last) intervals
        wanted: dict[int, list[tuple[int, int]]] = {}
        for fence in request.fences:
            for pub, lo, hi in fence.intervals:
                wanted.setdefault(pub, []).append((lo, hi))
        self._firsts: dict[int, list[int]] = {}
        self._intervals: dict[int, list[tuple[int, int]]] = {}
        for pub, ivs in wanted.items():
            merged: list[tuple[int, int]] = []
            for lo, hi in sorted(ivs):
                if merged and lo <= merged[-1][1] + 1:
                    merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
                else:
                    merged.append((lo, hi))
            self._intervals[pub] = merged
            self._firsts[pub] = [lo for lo, _hi in merged]

    def wants(self, pub_hash: int, pub_seq: int) -> bool:
        """Whether the requester asked for this bookmark."""
        firsts = self._firsts.get(pub_hash)
        if firsts is None:
            return False
        i = bisect.bisect_right(firsts, pub_seq) - 1
        return i >= 0 and pub_seq <= self._intervals[pub_hash][i][1]

    def choose(self, batch: RecordBatch, can_read: Callable[[str], bool]) -> list[int]:
        """The records of a batch to send (module docstring, 3)."""
        topics, hashes, seqs = batch.topics, batch.pub_hashes, batch.pub_seqs
        kinds = batch.kinds()
        only = next(iter(kinds)) if len(kinds) == 1 else None
        out = []
        for i in range(len(topics)):
            if not self.wants(hashes[i], seqs[i]):
                continue
            kind = only if only is not None else batch.kind(i)
            if kind not in REPLICATED_KINDS or (kind == _DELETE and not hashes[i]):
                continue
            if can_read(topics[i]):
                out.append(i)
        return out


async def plan_repair(txlog: TransactionLog, request: Repair) -> RepairPlan:
    """Where in this log the records a request asks for may be (module docstring, 1)."""
    slack = int(WINDOW_SLACK * 1e6)
    first, last = txlog.first_seq, txlog.durable_seq
    starts = []
    ends = []
    for fence in request.fences:
        t_lo, t_hi = fence.window
        starts.append(await txlog.locate_time(max(0, t_lo - slack)))
        ends.append(last if t_hi is None else await txlog.locate_time(t_hi + slack))
        for pub, lo, hi in fence.intervals:
            at = await txlog.locate_bookmark(pub, lo)
            if at is not None:
                starts.append(at)
            at = await txlog.locate_bookmark(pub, hi)
            if at is not None:
                ends.append(at)
    start = max(first, min(starts, default=first))
    end = min(last, max(ends, default=last))
    return RepairPlan(request, start, end)


async def send_repair(
    txlog: TransactionLog,
    plan: RepairPlan,
    can_read: Callable[[str], bool],
    send: Callable[[int, RecordsWriter], Awaitable[None]],
) -> int:
    """Read the plan's range and send what it asks for (module docstring, 3 and 4);
    returns how many records were sent."""
    pos = plan.start
    sent = 0
    topic_bytes: dict[str, bytes] = {}
    while pos <= plan.end:
        try:
            batch = await txlog.read_view(
                pos, max_count=BATCH_RECORDS, max_bytes=BATCH_BYTES, upto_seq=plan.end
            )
        except FencedRecords as exc:
            pos = exc.last_seq + 1  # lost here too: not there to send
            continue
        if not len(batch):
            break
        chosen: Sequence[int] = plan.choose(batch, can_read)
        writer = pack_runs(batch, chosen, topic_bytes) if chosen else RecordsWriter()
        await send(batch.last_seq, writer)  # with nothing in it: how far (progress)
        sent += writer.count
        pos = batch.last_seq + 1
    return sent
