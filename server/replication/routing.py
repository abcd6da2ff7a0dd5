"""Which records of the log go to a destination (AMPS's four rules, in this order).

1. the record is in the transaction log (everything a source reads is);
2. a topic block of the destination takes it: its topic (name or pattern) and, when the
   block has one, its Filter (several blocks for one topic: any of them);
3. it was published here, or it arrived by replication from an instance whose group the
   destination's PassThrough matches (server/replication/hops.py);
4. the destination is not already on its path (loop protection).

The same rules apply while resyncing. One more skip applies only then: a record the
destination already holds (its holdings said so at connect) is not sent again.

Only messages are replicated: ``PUBLISH`` and a SOW's ``DELTA_PUBLISH`` records (the merged
message; the destination's SOW stage takes it like a local publish). A SOW's
``SOW_DELETE`` records (a ``sow_delete``, an expiration) are not sent in this version: they
carry no publisher identity (``pub_hash`` 0), so the destination could not tell on a
resync whether it already applied one, and a delete replayed after a newer publish of its
key would remove that newer record. Expirations run on every instance from its own
``<SOW>`` configuration; replicated ``sow_delete`` needs a bookmark for deletes first
(docs/replication.md "Limits").

A :class:`Route` decides a whole :class:`~server.txlog.batch.RecordBatch` at once: per
record only dict lookups and a path check; filters run through ``Filter.select`` over the
records that need them, one reused view per filter (the replay's batch form).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Final

from server.config import DestinationConfig
from server.expr import Filter, compile_filter
from server.replication.hops import PassThrough, on_path
from server.txlog.batch import RecordBatch
from server.txlog.record import RecordKind

__all__ = ["REPLICATED_KINDS", "Route", "held_by"]

#: topics whose blocks are remembered (a stream of one-off topic names stays bounded)
_TOPIC_CACHE: Final = 10_000

#: the record kinds a destination is sent (module docstring)
REPLICATED_KINDS: Final = frozenset({int(RecordKind.PUBLISH), int(RecordKind.DELTA_PUBLISH)})

#: per topic: the filters of the blocks that take it (None: a block without a filter)
_Blocks = tuple[Filter | None, ...]


class Route:
    """The routing rules of one destination.

    Args:
        destination: its configuration.
    """

    __slots__ = ("_blocks", "_cache", "_passthrough", "name")

    def __init__(self, destination: DestinationConfig) -> None:
        self.name = destination.name
        self._blocks = tuple(
            (t, compile_filter(t.filter) if t.filter else None) for t in destination.topics
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
        held: Callable[[int, int], bool] | None = None,
    ) -> list[int]:
        """The indices of the records of ``batch`` that go to the destination.

        Args:
            batch: consecutive records of the log.
            remote: the destination instance's actual name (loop protection).
            held: while resyncing, whether the destination already holds a bookmark.
        """
        kinds = batch.kinds()
        if kinds.isdisjoint(REPLICATED_KINDS):
            return []
        mixed = not kinds <= REPLICATED_KINDS  # some records are not messages
        topics = batch.topics
        hashes = batch.pub_hashes
        seqs = batch.pub_seqs
        passthrough = self._passthrough
        taken: list[int] = []
        filtered: dict[Filter, list[int]] = {}
        for i in range(len(topics)):
            blocks = self.blocks_for(topics[i])
            if blocks is None:
                continue
            if mixed and batch.kind(i) not in REPLICATED_KINDS:
                continue
            path = batch.path(i)
            if path and (on_path(path, remote) or not passthrough.allows(path)):
                continue
            if held is not None and held(hashes[i], seqs[i]):
                continue
            if None in blocks:
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


def held_by(
    holdings: Mapping[int, tuple[int, Sequence[tuple[int, int]]]],
) -> Callable[[int, int], bool]:
    """A predicate: does a destination with these holdings already hold ``(pub, seq)``."""

    def held(pub_hash: int, pub_seq: int) -> bool:
        entry = holdings.get(pub_hash)
        if entry is None:
            return False
        last, gaps = entry
        if pub_seq > last:
            return False
        return not any(lo <= pub_seq <= hi for lo, hi in gaps)

    return held
