"""What a scan keeps: ranges of seq and time, topics, publishers and record kinds.

A :class:`ScanPredicate` is the conjunction a reader applies to each record's header
before it copies the body, and the planner uses to skip whole index blocks (seq and
publisher ranges exactly, time by the blocks' running maximum). It is a plain value:
picklable, hashable, no Spark in it; :mod:`spool.server.pipeline.pushdown` builds one from the
filters Spark pushes, the jobs build one from their command line.

Bounds are inclusive. Times are microseconds since the Unix epoch (UTC), as in the log.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Final

from spool.server.txlog.format.record import RecordKind

__all__ = ["KIND_CODES", "KIND_NAMES", "MAX_SEQ", "ScanPredicate"]

MAX_SEQ: Final = (1 << 64) - 1
_MIN_TS: Final = -(1 << 63)
_MAX_TS: Final = (1 << 63) - 1

#: record kind code -> the name the source shows (``publish``, ``sow_delete``...)
KIND_NAMES: Final[dict[int, str]] = {int(k): k.name.lower() for k in RecordKind}
#: and back
KIND_CODES: Final[dict[str, int]] = {name: code for code, name in KIND_NAMES.items()}


@dataclass(frozen=True, slots=True)
class ScanPredicate:
    """Records to keep (all of them by default).

    Attributes:
        seq_lo, seq_hi: seq range.
        ts_lo, ts_hi: time range (microseconds).
        topics: exact topics kept (None: any).
        topic_prefix: topics must start with this ("" : any).
        publishers: publisher ids kept (None: any).
        kinds: record kind codes kept (None: any).
    """

    seq_lo: int = 0
    seq_hi: int = MAX_SEQ
    ts_lo: int = _MIN_TS
    ts_hi: int = _MAX_TS
    topics: frozenset[str] | None = None
    topic_prefix: str = ""
    publishers: frozenset[int] | None = None
    kinds: frozenset[int] | None = None

    @property
    def empty(self) -> bool:
        """Nothing can match (contradictory bounds or an empty set)."""
        return (
            self.seq_lo > self.seq_hi
            or self.ts_lo > self.ts_hi
            or (self.topics is not None and not self.topics)
            or (self.publishers is not None and not self.publishers)
            or (self.kinds is not None and not self.kinds)
        )

    @property
    def everything(self) -> bool:
        """Every record matches (no test needed per record)."""
        return self == ScanPredicate()

    @property
    def bounds_time(self) -> bool:
        return self.ts_lo != _MIN_TS or self.ts_hi != _MAX_TS

    def seqs(self, lo: int, hi: int) -> ScanPredicate:
        """This predicate narrowed to seqs ``lo..hi``."""
        return replace(self, seq_lo=max(self.seq_lo, lo), seq_hi=min(self.seq_hi, hi))

    def times(self, lo: int | None, hi: int | None) -> ScanPredicate:
        """Narrowed to times ``lo..hi`` (None: unbounded on that side)."""
        return replace(
            self,
            ts_lo=self.ts_lo if lo is None else max(self.ts_lo, lo),
            ts_hi=self.ts_hi if hi is None else min(self.ts_hi, hi),
        )

    def only_topics(self, topics: frozenset[str]) -> ScanPredicate:
        """Narrowed to these exact topics."""
        keep = topics if self.topics is None else self.topics & topics
        return replace(self, topics=keep)

    def prefix(self, prefix: str) -> ScanPredicate:
        """Narrowed to topics starting with ``prefix`` (two prefixes: the longer, if they
        agree; an impossible pair keeps no topic)."""
        cur = self.topic_prefix
        if prefix.startswith(cur):
            return replace(self, topic_prefix=prefix)
        if cur.startswith(prefix):
            return self
        return replace(self, topics=frozenset())

    def only_publishers(self, ids: frozenset[int]) -> ScanPredicate:
        keep = ids if self.publishers is None else self.publishers & ids
        return replace(self, publishers=keep)

    def only_kinds(self, codes: frozenset[int]) -> ScanPredicate:
        keep = codes if self.kinds is None else self.kinds & codes
        return replace(self, kinds=keep)

    def keeps_topic(self, topic: str) -> bool:
        """The topic conditions alone."""
        if self.topics is not None and topic not in self.topics:
            return False
        return topic.startswith(self.topic_prefix)

    def keeps(self, seq: int, ts: int, pub_hash: int, kind: int, topic: str) -> bool:
        """Whether a record with these header fields is kept (the reference test; the
        scanner inlines the same conditions)."""
        return (
            self.seq_lo <= seq <= self.seq_hi
            and self.ts_lo <= ts <= self.ts_hi
            and (self.publishers is None or pub_hash in self.publishers)
            and (self.kinds is None or kind in self.kinds)
            and self.keeps_topic(topic)
        )
