"""Placing encoded records into the log: the active journal's pending bytes, its index,
the in-memory tail, and rolling to the next journal.

:meth:`Placement.place` is the bookkeeping half of every append (the facade encodes and
checks; this puts the bytes where the flusher and the readers find them). It does no I/O:
a roll only switches the journal in memory and accounts its room
(:meth:`~spool.server.txlog.append.space.DiskSpace.room_for_roll`); the flusher thread finishes the old
file and creates the new one at the next commit. Event loop only.
"""

from __future__ import annotations

import bisect
from itertools import accumulate
from pathlib import Path

from spool.server.txlog.append.groupcommit import GroupCommit, Pending
from spool.server.txlog.append.space import DiskSpace
from spool.server.txlog.append.tail import TailCache
from spool.server.txlog.errors import TxlogFull
from spool.server.txlog.format.record import DUE_KEY, late_key
from spool.server.txlog.index.builder import IndexBuilder
from spool.server.txlog.publishers.table import Publishers
from spool.server.txlog.storage.files import journal_name
from spool.server.txlog.storage.journal import Journal

__all__ = ["Placement"]


class Placement:
    """Where appended records go (see the module docstring).

    Args:
        pending: what the flusher takes next.
        tail: the in-memory tail readers use.
        publishers: the log's publisher table (highest ``pub_seq`` and its seq; the gaps
            a late record fills).
        space: disk accounting (a roll takes a preallocated file or room).
        commit: the group commit (waiters of appends, the flusher's wake-up).
        directory: the journal directory.
        instance: the instance name (prefixes journal file names).
        journal_size: ``JournalSize``: records roll to a new journal past it.
        block_bytes: index block size of new journals.

    Attributes:
        rolls: journals rolled since open.
    """

    def __init__(
        self,
        pending: Pending,
        tail: TailCache,
        publishers: Publishers,
        space: DiskSpace,
        commit: GroupCommit,
        *,
        directory: Path,
        instance: str,
        journal_size: int,
        block_bytes: int,
    ) -> None:
        self._pending = pending
        self._tail = tail
        self._pubs = publishers
        self._space = space
        self._commit = commit
        self._dir = directory
        self._instance = instance
        self._journal_size = journal_size
        self._block_bytes = block_bytes
        self.rolls = 0

    def place(
        self,
        encoded: list[bytes],
        ts: int,
        pub_hash: int,
        pub_seqs: list[int],
        late: bool = False,
        *,
        due: bool = False,
    ) -> int:
        """Put encoded records (consecutive seqs from ``last_seq + 1``) into the active
        journal's pending bytes, index and tail, rolling to a new journal between records
        when one does not fit; then account them once (publisher table, waiters, flusher).

        The index takes the records a run at a time (:meth:`IndexBuilder.add_run`):
        no Python-level work per record here, only per block and per roll.

        A late record (one record that fills a gap of its publisher, below its highest) is
        indexed under the publisher's late key and leaves the highest alone. Due records
        (``due``) are indexed under ``DUE_KEY`` with their own seqs and leave the publisher
        table alone: they repeat bookmarks the log already holds.

        Returns:
            How many were placed. A roll that fails (``TxlogFull``) ends the run there; it
            is raised only when nothing was placed, so ``TransactionLog.append`` reports it.
        """
        pending = self._pending
        key = late_key(pub_hash) if late and pub_hash else pub_hash
        index_seqs = pub_seqs
        if due:
            key = DUE_KEY
            first = pending.last_seq + 1
            index_seqs = list(range(first, first + len(encoded)))
        tail = self._tail.records
        journal_size = self._journal_size
        sizes = list(map(len, encoded))
        n = len(encoded)
        done = 0
        while done < n:
            # the records that fit in the active journal (one too big for any journal
            # goes alone into an empty one); the rest after a roll
            offset = pending.length
            offsets = list(accumulate(sizes[done:] if done else sizes, initial=offset))
            fit = bisect.bisect_right(offsets, journal_size, 1) - 1
            if not fit and not offset:
                fit = 1
            if fit:
                stop = done + fit
                datas = encoded[done:stop] if done or stop < n else encoded
                pending.add(
                    offsets[: fit + 1], datas, sizes[done:stop], ts, key, index_seqs[done:stop]
                )
                tail.extend(datas)
                done = stop
            if done == n:
                break
            # roll between records
            try:
                self.roll(pending.last_seq + 1)
            except TxlogFull:
                # MaxSize: the records placed so far stay (accounted below), the rest is
                # refused; nothing else is a reason to end a run (a fault propagates)
                if not done:
                    raise
                break
        if done:
            seq = pending.last_seq
            if not due:
                self._pubs.placed(pub_hash, pub_seqs[:done], seq, late=late)
            self._commit.placed(seq)
        return done

    def roll(self, seq: int) -> None:
        """Finish the active journal; the next one starts at ``seq`` (event loop).

        The files are switched by the flusher thread; here only the bookkeeping.

        Raises:
            TxlogFull: a new journal would exceed MaxSize.
        """
        prealloc = self._space.room_for_roll()
        builder = IndexBuilder(seq, self._block_bytes)
        new = Journal(
            seq, self._dir / journal_name(self._instance, seq), builder,
            prealloc=prealloc, created=False, disk_size=self._journal_size,
        )  # fmt: skip
        self._pending.roll(new, builder)
        self.rolls += 1
