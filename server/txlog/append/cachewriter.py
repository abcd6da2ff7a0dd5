"""The caches written after each group commit: index entries, sealed indexes, ``clients.ack``.

None of them is on the durability path (recovery rebuilds every one from the journals), so
they are written after the commit, in their own task, in commit order: doing them in the
flusher made every ack of a commit that closed a journal wait for a sealed index to be
built and written (several fsyncs). Failures are reported (``cache_write_failed``), never
latched.

Per journal the index file goes through two forms (see :mod:`..index.fileformat`): while the journal is
active, an *open* index - a header, then one entry appended per closed block; once the
journal is finished, the *sealed* index replaces it atomically, and the journal's in-memory
:class:`~spool.server.txlog.index.builder.IndexBuilder` is swapped for the mmapped
:class:`~spool.server.txlog.index.sealed.SealedIndex` on the loop.

Thread contract: the work of one batch runs in a worker thread, one batch at a time (the
cache task awaits each). The index file descriptors belong to that work; the loop touches
them only at open (before the first batch) and at close (after :meth:`CacheWriter.drain`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import threading
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from spool.server.txlog.append.filethread import FileThread
from spool.server.txlog.append.groupcommit import Batch
from spool.server.txlog.events import EventCallback
from spool.server.txlog.index.builder import IndexBuilder
from spool.server.txlog.index.fileformat import encode_open_header
from spool.server.txlog.index.sealed import SealedIndex
from spool.server.txlog.publishers.clientsack import (
    PublisherIndex,
    encode_clients_ack,
    parse_clients_ack,
    rebuild_publishers,
)
from spool.server.txlog.storage.files import clients_ack_name, index_name, write_atomic
from spool.server.txlog.storage.journal import Journal

__all__ = ["CacheWriter"]

log = logging.getLogger("spool.txlog")


@dataclass(slots=True)
class _Done:
    """What the cache thread reports back to the loop for one batch."""

    sealed: list[tuple[Journal, SealedIndex]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


class CacheWriter:
    """Writes the caches of committed batches (see the module docstring).

    Args:
        directory: the journal directory.
        instance: the instance name (prefixes the file names).
        block_bytes: the index block size (in each open index's header).
        emit: the log's event callback (``cache_write_failed``).
        after: awaited after each batch's caches, in the same task (the log tops up its
            preallocated files there, off the commit path).
    """

    def __init__(
        self,
        directory: Path,
        instance: str,
        block_bytes: int,
        *,
        emit: EventCallback,
        after: Callable[[], Awaitable[None]],
    ) -> None:
        self._dir = directory
        self._instance = instance
        self._block_bytes = block_bytes
        self._emit = emit
        self._after = after
        #: the cache thread (one long-lived thread: server/txlog/append/filethread.py)
        self._thread = FileThread("spool-txlog-caches")
        self._fds: dict[int, int] = {}  # journal base -> open index, O_APPEND (-1: broken)
        self._queue: deque[tuple[Batch, list[Journal]]] = deque()
        self._task: asyncio.Task[None] | None = None
        #: one writer of ``clients.ack`` at a time (the cache thread, a removal, the close):
        #: they share its temp file, and a removal reads the file before deciding
        self._ack_lock = threading.Lock()

    # -- open and close (worker threads, no batch in flight) -----------------------------

    def open_active(self, base: int, *, create: bool) -> None:
        """Open the active journal's open index for appending; ``create`` writes its header
        first (a journal created at open). A failure (a full disk) leaves the journal
        without an index file until it is finished (the next open rebuilds it)."""
        if create:
            try:
                write_atomic(
                    self._dir / index_name(self._instance, base),
                    encode_open_header(base, self._block_bytes),
                    durable=False,
                )
            except OSError as exc:
                log.warning("index of journal %d not written: %s", base, exc)
                self._fds[base] = -1
                return
        self._fds[base] = self._open_fd(base)

    def write_clients_ack(self, covered: int, publishers: dict[int, tuple[int, int]]) -> None:
        """Write ``clients.ack`` as of ``covered`` (at close); a failure is logged only."""
        try:
            with self._ack_lock:
                write_atomic(
                    self._dir / clients_ack_name(self._instance),
                    encode_clients_ack(covered, publishers),
                )
        except OSError as exc:
            log.warning("could not write %s: %s", clients_ack_name(self._instance), exc)

    def cover_publishers(self, indexes: Sequence[PublisherIndex]) -> bool:
        """Make ``clients.ack`` cover the journals of ``indexes`` (the oldest journals, about
        to be removed; worker thread). Returns whether the file had to be written.

        The file is written when a journal rolls and at close, but a journal finished by
        recovery, or a roll whose write failed, leaves journals it does not cover; removing
        those would forget their publishers at the next start. The table written is the
        one as of the newest of them: the file's entries completed from their publisher
        summaries, exactly what recovery would rebuild from them.

        Raises:
            OSError: the file could not be written (the journals must then stay).
        """
        if not indexes:
            return False
        path = self._dir / clients_ack_name(self._instance)
        upto = indexes[-1].last_seq
        with self._ack_lock:
            try:
                data: bytes | None = path.read_bytes()
            except FileNotFoundError:
                data = None
            parsed = parse_clients_ack(data) if data is not None else None
            if parsed is not None and parsed[0] >= upto:
                return False
            table, _ = rebuild_publishers(data, indexes)
            write_atomic(path, encode_clients_ack(upto, table))
        return True

    def close(self) -> None:
        """Close the index files (after :meth:`drain`)."""
        self._thread.close()
        for fd in self._fds.values():
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._fds.clear()

    # -- after each commit (event loop) ---------------------------------------------------

    def queue(self, batch: Batch, created: list[Journal]) -> None:
        """Write ``batch``'s caches (``created``: journals whose file it created) in the
        cache task, started on demand."""
        self._queue.append((batch, created))
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def drain(self) -> None:
        """Until everything queued is written (close and abort)."""
        task = self._task
        if task is not None and not task.done():
            await task

    async def _run(self) -> None:
        while self._queue:
            batch, created = self._queue.popleft()
            done = _Done()
            try:
                await self._thread.run(functools.partial(self._write, batch, created, done))
            except Exception as exc:  # caches are rebuildable: report, never latch
                done.errors.append(f"cache writer: {exc!r}")
            for j, sealed in done.sealed:
                j.index = sealed
            for problem in done.errors:
                log.warning("transaction log cache not written: %s", problem)
                self._emit("cache_write_failed", {"problem": problem})
            await self._after()

    # -- the cache thread ---------------------------------------------------------------

    def _write(self, batch: Batch, created: list[Journal], done: _Done) -> None:
        """New open indexes, index entries, seals, ``clients.ack`` of one batch."""
        for j in created:
            self._new_index(j.base, done)
        # One write per journal, not one per entry: a batch of small records closes many
        # blocks, and a syscall each would weigh on every small persisted publish.
        entries: dict[int, list[bytes]] = {}
        for j, entry in batch.index_entries:
            entries.setdefault(j.base, []).append(entry)
        for base, parts in entries.items():
            fd = self._fds.get(base, -1)
            if fd < 0:
                continue
            try:
                _write_all(fd, b"".join(parts))
            except OSError as exc:
                done.errors.append(f"index of journal {base}: {exc}")
                with contextlib.suppress(OSError):
                    os.close(fd)
                self._fds[base] = -1
        for j in batch.finished:
            self._seal(j, done)
        if batch.clients is not None:
            covered, table = batch.clients
            try:
                with self._ack_lock:
                    write_atomic(
                        self._dir / clients_ack_name(self._instance),
                        encode_clients_ack(covered, table),
                    )
            except OSError as exc:
                done.errors.append(f"{clients_ack_name(self._instance)}: {exc}")

    def _open_fd(self, base: int) -> int:
        try:
            return os.open(
                self._dir / index_name(self._instance, base),
                os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC,
            )
        except OSError as exc:
            log.warning("index of journal %d cannot be appended: %s", base, exc)
            return -1

    def _new_index(self, base: int, done: _Done) -> None:
        path = self._dir / index_name(self._instance, base)
        try:
            write_atomic(path, encode_open_header(base, self._block_bytes), durable=False)
        except OSError as exc:
            done.errors.append(f"{path}: {exc}")
            self._fds[base] = -1
            return
        self._fds[base] = self._open_fd(base)

    def _seal(self, j: Journal, done: _Done) -> None:
        fd = self._fds.pop(j.base, -1)
        if fd >= 0:
            with contextlib.suppress(OSError):
                os.close(fd)
        builder = j.index
        if not isinstance(builder, IndexBuilder):
            return
        path = self._dir / index_name(self._instance, j.base)
        try:
            write_atomic(path, builder.seal())
        except OSError as exc:
            done.errors.append(f"{path}: {exc}")
            return
        sealed = SealedIndex.load(path, j.base)
        if sealed is None:
            done.errors.append(f"{path}: sealed index does not read back")
            return
        done.sealed.append((j, sealed))


def _write_all(fd: int, data: bytes) -> None:
    """``os.write`` until all of ``data`` is written (a write may be short)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
