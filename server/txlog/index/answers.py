"""Sparse per-journal indexes: seq -> offset, time -> seq, publisher -> sequences.

An index cuts its journal into *blocks* of about :data:`BLOCK_BYTES` (records are never
split) and keeps, per block, where it starts, which seqs it holds, the running maximum
timestamp at its end and the CRC-32C of its bytes; and, per publisher present in a block,
the range of that publisher's sequences in it. A lookup (by seq, time or bookmark) is a
binary search to one block and then a read of that block (at most some 16 KB): never a
scan of the log. The block CRCs let recovery check a whole journal at disk speed.

Indexes are caches: recovery rebuilds a missing or invalid one from the journal, so
deleting ``*.index`` files loses nothing.

An index lives in three modules, one noun each, on top of the answers defined here:

- :mod:`.fileformat`: the bytes of an ``.index`` file (open and sealed forms) and their
  codec, without I/O.
- :mod:`.builder`: :class:`~spool.server.txlog.index.builder.IndexBuilder`, the index of the
  active journal, built in memory record by record.
- :mod:`.sealed`: :class:`~spool.server.txlog.index.sealed.SealedIndex`, a finished
  journal's index read through ``mmap``.

Both index classes answer the same questions (``span_for_seq``, ``span_for_time``,
``span_for_bookmark``, ``publisher``, ``publishers`` and the journal's first/last facts),
with the value types below, so lookups do not care which one a journal has.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

__all__ = ["BLOCK_BYTES", "BlockSpan", "PublisherSummary"]

#: target size of an index block: a lookup reads about this much of a journal. 16 KB, not
#: 4 KB: the append path pays a fixed cost per block closed (its entry, CRC and publisher
#: ranges; ~0.2 us per record at 4 KB with ~170-byte records, ~0.05 at 16 KB), on every
#: instance and twice on a replicated pair, while a lookup reading 16 KB instead of 4 costs
#: one read of a few pages either way. Journals keep the size they were written with (it is
#: in the index header), so older ones read as before.
BLOCK_BYTES: Final = 16384


@dataclass(frozen=True, slots=True)
class BlockSpan:
    """A byte range of a journal to read for a lookup.

    Attributes:
        offset: journal offset of the first record of the span.
        seq: seq of that record.
        length: bytes in the span (whole records).
        count: records in the span.
    """

    offset: int
    seq: int
    length: int
    count: int


@dataclass(frozen=True, slots=True)
class PublisherSummary:
    """One publisher's presence in one journal.

    Attributes:
        pub_hash: the publisher.
        min_pub_seq: its first ``pub_seq`` in the journal.
        max_pub_seq: its last (a publisher's sequences increase along the log).
        last_seq: the seq of the record with ``max_pub_seq``.
        count: its records in the journal.
    """

    pub_hash: int
    min_pub_seq: int
    max_pub_seq: int
    last_seq: int
    count: int
