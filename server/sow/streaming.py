"""A query result on the wire: ``group_begin``, ``sow`` records, ``group_end``, acks.

The result of a query (server/sow/query.py) is sent as it is produced, paced to the
consumer: the filtering advances a slice per loop turn, records are encoded ``bs`` at a
time (each batch a websocket frame of its own, docs/protocol.md) or 256 at a time without
``bs``, and before each piece the stream waits while the client's outbound buffer is full,
exactly as a replay does. A piece is also never more than the connection's
:attr:`~spool.server.ports.Outbound.piece_bytes` (a quarter of its slow-client limit; a
larger record goes alone), so large records come in smaller batches: the buffer stays
below half its limit and an ack or another query's ``group_begin`` always fits. A
million-record answer never holds the loop, nor fills the broker's memory faster than the
client reads.

After ``group_end`` come the acks the command asked for: ``stats`` (``matches``,
``records_returned``), then ``completed``.
"""

from __future__ import annotations

import asyncio
from bisect import bisect_right
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from itertools import accumulate
from operator import attrgetter
from typing import Final

from spool.server.ports import Outbound, SowRecord
from spool.server.protocol.selection import SelectList
from spool.server.sow.query import QueryRun, Source
from spool.server.subscription import SubscriptionProgress
from spool.server.wire import encode_group, encode_sow_records

__all__ = ["StreamSpec", "stream_query"]

#: records per queued piece when the query gave no ``bs``
_PIECE: Final = 256
#: records encoded between two yields to the event loop
_YIELD_EVERY: Final = 2048
#: first guess of a ``sow`` message's bytes besides its body, topic and qid (key, ``bm``,
#: punctuation): a piece proven larger learns the real figure
_HEAD_GUESS: Final = 64
_body = attrgetter("body")


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
        select: the select list the records' bodies are projected onto (the filter and
            ``orderby`` read the whole records), None for whole records.
    """

    qid: bytes
    sub_id: bytes | None
    bs: int | None
    send_key: bool
    want_ts: bool
    cid: str | None
    acks: frozenset[str]
    select: SelectList | None = None


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
    select = spec.select
    budget = max(1, out.piece_bytes)
    since_yield = 0
    for src, records in run.batches(per):

        def encode(part: Sequence[SowRecord], literal: bytes = src.literal) -> bytes:
            if select is not None:
                part = [rec._replace(body=select.project(rec.body)) for rec in part]
            return encode_sow_records(literal, qid, part, send_key=send_key, want_ts=want_ts)

        overhead = _HEAD_GUESS + len(qid) + len(src.literal)
        for part, data in _pieces(records, encode, budget, overhead):
            if not out.has_room():
                await out.wait_room()
                if out.closed:
                    return False
            send(data, len(part))
            if progress is not None:
                progress.delivered += len(part)
            if on_sent is not None:
                for rec in part:
                    on_sent(src, rec)
            since_yield += len(part)
            if since_yield >= _YIELD_EVERY:
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


def _pieces(
    records: Sequence[SowRecord],
    encode: Callable[[Sequence[SowRecord]], bytes],
    budget: int,
    overhead: int,
) -> Iterator[tuple[Sequence[SowRecord], bytes]]:
    """``records`` as consecutive encoded pieces of at most ``budget`` bytes (a record
    larger than that goes alone): each piece's records and their bytes.

    The usual batch fits whole and is encoded once. Otherwise a piece is sized by its
    records' bodies with ``overhead`` header bytes each; when the encoded piece proves
    larger (long keys), the guess grows and the piece is halved.
    """
    whole = encode(records)
    if len(whole) <= budget or len(records) == 1:
        yield records, whole
        return
    ends = list(accumulate(map(len, map(_body, records))))
    n = len(records)
    start = 0
    while start < n:
        before = ends[start - 1] if start else 0

        def cost(i: int, b: int = before, p: int = overhead, s0: int = start) -> int:
            return ends[i] - b + p * (i - s0 + 1)

        fit = bisect_right(range(start, n), budget, key=cost)
        part = records[start : start + max(1, fit)]
        data = encode(part)
        while len(data) > budget and len(part) > 1:
            heads = len(data) - (ends[start + len(part) - 1] - before)
            overhead = max(overhead, heads // len(part) + 1)
            part = part[: len(part) // 2]
            data = encode(part)
        yield part, data
        start += len(part)
