"""Which records of the log go to a destination (AMPS's four rules, in this order).

A record goes when it is in the transaction log, a topic block of the destination takes
it (topic, and the block's Filter when it has one), it was published here or arrived from
a group the destination's PassThrough matches (server/replication/hops.py), and the
destination is not on its path (loop protection). Resync adds one skip (what the
destination's holdings say it has) and one exception (``returning``: what a destination
that lost its log once had). A delayed message's ``SCHEDULED`` record goes as a publish
does (the Filter reads its body, which is the body as published): the destination keeps
it and delivers the message when it falls due; its ``DUE`` record never goes, each
instance writes its own. ``SOW_DELETE`` records and a replicated queue's
``QUEUE_ACK`` / ``QUEUE_TRANSFER`` records follow the same rules, except that no Filter
applies to them, the queue's go where its name goes, and those without publisher identity
are never sent. A :class:`Route` decides a whole
:class:`~spool.server.txlog.format.batch.RecordBatch` at once (dict lookups and a path check per
record; filters through ``Filter.select``). See docs/replication.md "Routing: which
records go to a destination", "Resync on connect", "SOW topics" and "Validation".
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Mapping, Sequence
from typing import Final

from spool.server.config import DestinationConfig
from spool.server.config.model import QueueConfig
from spool.server.expr import Filter, compile_filter
from spool.server.replication.hops import PassThrough, on_path
from spool.server.txlog.format.batch import RecordBatch
from spool.server.txlog.format.record import RecordKind

__all__ = ["REPLICATED_KINDS", "Held", "Route", "held_by"]

#: topics whose blocks are remembered (a stream of one-off topic names stays bounded)
_TOPIC_CACHE: Final = 10_000

_DELETE: Final = int(RecordKind.SOW_DELETE)
#: a replicated queue's events: acks and ownership transfers (server/queues/records.py)
_QUEUE_EVENTS: Final = frozenset({int(RecordKind.QUEUE_ACK), int(RecordKind.QUEUE_TRANSFER)})
#: records that are no message: no Filter applies, and only with identity are they sent
_EVENTS: Final = _QUEUE_EVENTS | {_DELETE}

#: the record kinds a destination is sent (module docstring): messages, a delayed one as
#: its SCHEDULED record, and the events; never a LOST placeholder or a DUE record, which
#: are local to the log that wrote them (the link protocol refuses them too)
REPLICATED_KINDS: Final = frozenset(
    {int(RecordKind.PUBLISH), int(RecordKind.DELTA_PUBLISH), int(RecordKind.SCHEDULED)} | _EVENTS
)

#: per topic: the filters of the blocks that take it (None: a block without a filter)
_Blocks = tuple[Filter | None, ...]


class Route:
    """The routing rules of one destination.

    Args:
        destination: its configuration.
        queues: the instance's replicated queues: their events go to the destination
            when a block takes the queue's name.
    """

    __slots__ = ("_blocks", "_cache", "_passthrough", "_queues", "name")

    def __init__(self, destination: DestinationConfig, queues: Sequence[QueueConfig] = ()) -> None:
        self.name = destination.name
        self._blocks = tuple(
            (t, compile_filter(t.filter) if t.filter else None) for t in destination.topics
        )
        self._queues = frozenset(
            q.name for q in queues if any(t.matches(q.name) for t in destination.topics)
        )
        self._passthrough = PassThrough(destination.passthrough)
        self._cache: dict[str, _Blocks | None] = {}

    def blocks_for(self, topic: str) -> _Blocks | None:
        """The filters of the blocks that take ``topic``; None when none does."""
        cache = self._cache
        if topic in cache:
            return cache[topic]
        found = tuple(flt for block, flt in self._blocks if block.matches(topic))
        entry = found or None
        if len(cache) >= _TOPIC_CACHE:
            cache.clear()
        cache[topic] = entry
        return entry

    def select(
        self,
        batch: RecordBatch,
        remote: str,
        held: Held | None = None,
        *,
        returning: bool = False,
    ) -> list[int]:
        """The indices of the records of ``batch`` that go to the destination.

        Args:
            batch: consecutive records of the log.
            remote: the destination instance's actual name (loop protection).
            held: while resyncing, whether the destination already holds a bookmark.
            returning: (with ``held``) the destination's log is not the one this source
                knew: a record on whose path it is, and that it lacks, goes back to it
                (module docstring).
        """
        kinds = batch.kinds()
        if kinds.isdisjoint(REPLICATED_KINDS):
            return []
        mixed = not kinds <= REPLICATED_KINDS  # some records are not sent at all
        deletes = not kinds.isdisjoint(_EVENTS)  # some are no message (no filter, identity)
        topics = batch.topics
        if batch.plain and held is None and not mixed and not deletes:
            # messages without paths, outside a resync: only their topics decide, so
            # decide per distinct topic (a batch usually has one or a few)
            whole = self._whole(topics)
            if whole is not None:
                return list(range(len(topics))) if whole else []
        hashes = batch.pub_hashes
        seqs = batch.pub_seqs
        passthrough = self._passthrough
        taken: list[int] = []
        filtered: dict[Filter, list[int]] = {}
        # whether a path may go on (loop protection, passthrough), per distinct path: a
        # batch's records that came from elsewhere mostly share one or two
        path_ok: dict[tuple[str, ...], bool] = {}
        for i in range(len(topics)):
            kind = batch.kind(i) if mixed or deletes else 0
            if mixed and kind not in REPLICATED_KINDS:
                continue
            # a queue's events are logged on its name: they go where a block takes it
            # (the destination's queue validation checks say it has the same queue)
            if kind in _QUEUE_EVENTS:
                blocks: _Blocks | None = (None,) if topics[i] in self._queues else None
            else:
                blocks = self.blocks_for(topics[i])
            if blocks is None:
                continue
            if kind in _EVENTS and not hashes[i]:
                continue  # an expiration, a local queue's ack: local to each instance
            path = batch.path(i)
            if path:
                ok = path_ok.get(path)
                if ok is None:
                    ok = path_ok[path] = not on_path(path, remote) and passthrough.allows(path)
                if not ok and not (
                    returning
                    and held is not None
                    and on_path(path, remote)
                    and not held(hashes[i], seqs[i], path)
                ):
                    continue
            if held is not None and held(hashes[i], seqs[i], path):
                continue
            if kind in _EVENTS or None in blocks:
                taken.append(i)
                continue
            for flt in blocks:
                assert flt is not None
                filtered.setdefault(flt, []).append(i)
        if not filtered:
            return taken
        chosen = set(taken)
        for flt, indices in filtered.items():
            chosen.update(flt.select(topics, batch.bodies, indices, bookmark_of=batch.bookmark))
        return sorted(chosen)

    def _whole(self, topics: list[str]) -> bool | None:
        """For messages without paths: True when a filterless block takes every topic of
        ``topics``, False when no block takes any, None otherwise (decide per record)."""
        takes = none = True
        for topic in set(topics):
            blocks = self.blocks_for(topic)
            if blocks is None:
                takes = False
            else:
                none = False
                if None not in blocks:
                    return None  # a filter decides per record
        if takes:
            return True
        return False if none else None


#: whether a destination holds a record: (pub_hash, pub_seq, the record's path)
Held = Callable[[int, int, tuple[str, ...]], bool]


def held_by(
    holdings: Mapping[int, tuple[int, Sequence[tuple[int, int]]]],
    origins: Mapping[int, Sequence[tuple[int, str]]] | None = None,
    here: str = "",
) -> Held:
    """A predicate: does a destination with these holdings already hold ``(pub, seq)``.

    With ``origins`` (where the destination's records of each publisher came from, first
    sequence -> origin), a record it holds that came from *another* origin than this
    record's (its path's first entry; ``here``, this instance's own path entry, for one
    published here) does not count as held: it is sent, and the destination compares
    the two (server/replication/collisions.py).
    """

    def held(pub_hash: int, pub_seq: int, path: tuple[str, ...] = ()) -> bool:
        entry = holdings.get(pub_hash)
        if entry is None:
            return False
        last, gaps = entry
        if pub_seq > last:
            return False
        if any(lo <= pub_seq <= hi for lo, hi in gaps):
            return False
        segments = origins.get(pub_hash) if origins else None
        if segments:
            i = bisect.bisect_right(segments, (pub_seq, "\uffff")) - 1
            if i >= 0 and segments[i][1] != (path[0] if path else here):
                return False
        return True

    return held
