"""A finished journal's index file written again while the log runs.

An index file is a cache of its journal (docs/transaction-log.md "Indexes"): when the
scrub finds one that fails its own CRC, the journal is scanned record by record into a new
index, which is sealed, written (temporary file, fsync, rename) and mapped in place of the
damaged one. A journal whose records do not all check is not re-indexed here: its damage
is the log's to handle first.

Blocking I/O: call from a worker thread.
"""

from __future__ import annotations

from pathlib import Path

from spool.server.txlog.index.builder import IndexBuilder
from spool.server.txlog.index.sealed import SealedIndex
from spool.server.txlog.recovery.checking import scan_into
from spool.server.txlog.storage.files import Compression, write_atomic
from spool.server.txlog.storage.source import open_source

__all__ = ["reindex"]


def reindex(
    journal: Path,
    compression: Compression | None,
    base: int,
    index_path: Path,
    *,
    block_bytes: int,
    data_len: int,
) -> SealedIndex | None:
    """Scan ``journal`` into a new sealed index at ``index_path`` and map it.

    Args:
        journal: the journal file.
        compression: its compression.
        base: its first seq.
        index_path: where its index file goes.
        block_bytes: block size of the new index.
        data_len: the length of its data (what the log knows it holds).

    Returns:
        The new index; None when the journal's records did not all check up to
        ``data_len`` (nothing is written then).
    """
    source = open_source(journal, compression)
    try:
        builder = IndexBuilder(base, block_bytes)
        end, reason, _ = scan_into(builder, source, 0, data_len)
    finally:
        source.retire()
    if reason not in (None, "end of data") or end != data_len:
        return None
    write_atomic(index_path, builder.seal())
    return SealedIndex.load(index_path, base)
