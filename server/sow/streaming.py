"""A query result on the wire: ``group_begin``, ``sow`` records, ``group_end``, acks.

The result of a query (server/sow/query.py) is sent as it is produced, paced to the
consumer: the filtering advances a slice per loop turn, records are encoded ``bs`` at a
time (each batch a websocket frame of its own, docs/protocol.md) or 256 at a time without
``bs``, and between batches the stream waits while the client's outbound buffer is full,
exactly as a replay does. A million-record answer never holds the loop, nor fills the
broker's memory faster than the client reads.

After ``group_end`` come the acks the command asked for: ``stats`` (``matches``,
``records_returned``), then ``completed``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from spool.server.ports import Outbound, SowRecord
from spool.server.sow.query import QueryRun, Source
from spool.server.subscription import SubscriptionProgress
from spool.server.wire import encode_group, encode_sow_records

__all__ = ["StreamSpec", "stream_query"]

#: records per queued piece when the query gave no ``bs``
_PIECE: Final = 256
#: records encoded between two yields to the event loop
_YIELD_EVERY: Final = 2048


@dataclass(frozen=True, slots=True)
class StreamSpec:
    """How one query's result is sent.

    Attributes:
        qid: the query id as a JSON literal (``qid``, or the sub id, or the cid).
        sub_id: the subscription id as a JSON literal (``sow_and_subscribe``).
        bs: records per frame, or None to let the session batch freely.
        send_key: records carry ``k`` (no ``no_sowkey``).
        want_ts: records carry ``ts`` (the ``timestamp`` option).
        cid: the command id for the acks.
        acks: the acks the command asked for.
    """

    qid: bytes
    sub_id: bytes | None
    bs: int | None
    send_key: bool
    want_ts: bool
    cid: str | None
    acks: frozenset[str]


async def stream_query(
    out: Outbound,
    run: QueryRun,
    spec: StreamSpec,
    on_sent: Callable[[Source, SowRecord], None] | None = None,
    progress: SubscriptionProgress | None = None,
) -> bool:
    """Send ``run``'s result to ``out``; False when the connection went away first.

    Args:
        on_sent: told of each record as it is queued (a ``sow_and_subscribe`` subscriber
            that tracks what it holds).
        progress: the subscription whose snapshot this is (``sow_and_subscribe``): its
            ``delivered`` counts the records queued, one add per piece.
    """
    out.send(encode_group(b"group_begin", spec.qid, spec.sub_id))
    while not run.step():
        await asyncio.sleep(0)
        if out.closed:
            return False
    per = spec.bs or _PIECE
    send = out.send_batch if spec.bs else out.send_messages
    qid = spec.qid
    send_key = spec.send_key
    want_ts = spec.want_ts
    since_yield = 0
    for src, records in run.batches(per):
        send(
            encode_sow_records(src.literal, qid, records, send_key=send_key, want_ts=want_ts),
            len(records),
        )
        if progress is not None:
            progress.delivered += len(records)
        if on_sent is not None:
            for rec in records:
                on_sent(src, rec)
        since_yield += len(records)
        if not out.has_room():
            await out.wait_room()
        elif since_yield >= _YIELD_EVERY:
            since_yield = 0
            await asyncio.sleep(0)
        if out.closed:
            return False
    out.send(encode_group(b"group_end", spec.qid, spec.sub_id))
    if "stats" in spec.acks:
        out.ack("stats", spec.cid, matches=run.matches, records_returned=run.returned)
    if "completed" in spec.acks:
        out.ack("completed", spec.cid)
    return True
