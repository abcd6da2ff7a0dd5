"""The file format both file stores use: an append-only log of checksummed records.

Byte layout of one record (little-endian)::

    u32 length of payload | u32 CRC-32 of payload | payload

A process killed in the middle of a write leaves a torn tail: a short header, a short
payload or a CRC that does not match. :func:`decode_records` stops at the first such record
and :meth:`RecordFile.open` truncates the file there (the records before it are whole,
since records are only ever appended). Compaction writes the live records to
``<path>.tmp``, fsyncs it, renames it over ``<path>`` and fsyncs the directory, so a crash
at any moment leaves either the old file or the new one, never a mix.

Thread-safety: a :class:`RecordFile` is used by one thread at a time: the
:class:`RecordWriter`'s worker, which runs batches in ``asyncio.to_thread`` one after the
other so the event loop never waits on a write or an fsync. A store that must have a
record in the file before it goes on (the bookmark store's discards) appends with
:meth:`RecordFile.append_now` on the loop instead (one ``write`` to the OS's page cache,
microseconds, never an fsync); it then fsyncs and compacts from a thread only while it
appends nothing (:class:`ImmediateWriter`).

A failed write or fsync (a full disk, ``ENOSPC``; ``EIO``) stops a writer: it writes
nothing more, the store's memory keeping what it drops, until the store recovers it with a
rewrite of its whole state (a compaction: written to ``<path>.tmp`` first, so the old file
stays whole while the disk refuses it). What reached the file before the failure stays
readable; a partly written last record is a torn tail, dropped at the next open. Closing
a file always closes it and releases its lock, whatever the last write did.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import struct
import zlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Protocol

from spool.server.client.ha.errors import StoreClosed, StoreIOError
from spool.server.client.ha.lockfile import StoreLock

_HEAD: Final = struct.Struct("<II")
#: a length above this is a torn or foreign header, not a record
MAX_RECORD: Final = 256 * 1024 * 1024


def encode_record(payload: bytes) -> bytes:
    """One record: length, CRC-32, payload."""
    return _HEAD.pack(len(payload), zlib.crc32(payload)) + payload


def decode_records(data: bytes) -> tuple[list[bytes], int]:
    """The whole records at the start of ``data`` and the length they cover (where a torn
    or corrupt tail starts; ``len(data)`` when there is none)."""
    out: list[bytes] = []
    pos = 0
    end = len(data)
    size = _HEAD.size
    while pos + size <= end:
        length, crc = _HEAD.unpack_from(data, pos)
        if length > MAX_RECORD or pos + size + length > end:
            break
        payload = data[pos + size : pos + size + length]
        if zlib.crc32(payload) != crc:
            break
        out.append(payload)
        pos += size + length
    return out, pos


@dataclass(frozen=True, slots=True)
class Rewrite:
    """A compaction: the file becomes exactly these records (the store's live state)."""

    payloads: Sequence[bytes]


class RecordFile:
    """The store file and its lock. All methods do blocking I/O: call them off the loop.

    Attributes:
        path: the store file.
        dropped: bytes of torn tail removed at :meth:`open`.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.dropped = 0
        self._lock: StoreLock | None = None
        self._fd: int | None = None

    def open(self) -> list[bytes]:
        """Take the lock, read every whole record, truncate a torn tail; returns the
        payloads in file order.

        Raises:
            StoreLocked: another owner holds the store.
        """
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = StoreLock(self.path.with_name(self.path.name + ".lock"))
        fd: int | None = None
        try:
            tmp = self._tmp()
            if tmp.exists():  # a compaction that did not reach its rename
                tmp.unlink()
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            data = b""
            with open(fd, "rb", closefd=False) as f:
                data = f.read()
            payloads, good = decode_records(data)
            if good < len(data):
                self.dropped = len(data) - good
                os.ftruncate(fd, good)
                os.fsync(fd)
            os.lseek(fd, 0, os.SEEK_END)
        except BaseException:
            # a failed open owns nothing: the next open (this process's too) may succeed
            if fd is not None:
                os.close(fd)
            self._lock.release()
            self._lock = None
            raise
        self._fd = fd
        return payloads

    def _tmp(self) -> Path:
        return self.path.with_name(self.path.name + ".tmp")

    def apply(self, ops: Sequence[bytes | Rewrite], fsync: bool) -> None:
        """Append records and run compactions, in order; then fsync once (``fsync``)."""
        if self._fd is None:
            raise StoreClosed(f"store {self.path} is closed")
        chunk: list[bytes] = []
        for op in ops:
            if isinstance(op, Rewrite):
                self._write(b"".join(chunk))
                chunk = []
                self._rewrite(op.payloads)
            else:
                chunk.append(encode_record(op))
        self._write(b"".join(chunk))
        if fsync:
            os.fsync(self._fd)

    def append_now(self, payloads: Sequence[bytes]) -> None:
        """Append records with one ``write`` (to the OS, not necessarily the disk): on the
        caller's thread, for a record that must be in the file before the caller goes on.
        """
        if self._fd is None:
            raise StoreClosed(f"store {self.path} is closed")
        self._write(b"".join(encode_record(p) for p in payloads))

    def fsync(self) -> None:
        """Make what was appended durable (call off the loop)."""
        if self._fd is None:
            raise StoreClosed(f"store {self.path} is closed")
        os.fsync(self._fd)

    def _write(self, data: bytes) -> None:
        assert self._fd is not None
        view = memoryview(data)
        while view:
            n = os.write(self._fd, view)
            view = view[n:]

    def _rewrite(self, payloads: Sequence[bytes]) -> None:
        # 1. the new content to a temporary file, fsynced; 2. rename over the store (atomic);
        # 3. fsync the directory so the rename itself survives a power loss; 4. append to it.
        # A failure before the rename leaves the old file as it was and no temporary file
        # (on a full disk it would hold the space the retry needs); after the rename the
        # store appends to the new file even if the directory's fsync then fails.
        assert self._fd is not None
        tmp = self._tmp()
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            data = memoryview(b"".join(encode_record(p) for p in payloads))
            while data:
                data = data[os.write(fd, data) :]
            os.fsync(fd)
            os.replace(tmp, self.path)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise
        old, self._fd = self._fd, fd
        os.close(old)
        os.lseek(fd, 0, os.SEEK_END)
        dfd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)

    def close(self) -> None:
        """Close the file and release the lock, both whatever the other does."""
        fd, self._fd = self._fd, None
        lock, self._lock = self._lock, None
        try:
            if fd is not None:
                os.close(fd)
        finally:
            if lock is not None:
                lock.release()


class StoreHealth(Protocol):
    """What the HA client sees of a store's disk, for both kinds of store (memory stores
    never fail; a file store stops writing when its disk refuses a write)."""

    #: told, on the loop, when the store stops writing (once per failure)
    on_failure: Callable[[StoreIOError], None] | None

    @property
    def failure(self) -> StoreIOError | None:
        """Why the store writes nothing now (None: it writes)."""
        ...

    async def recover(self) -> None:
        """After a failure: write the whole state again (nothing when it is not failed).

        Raises:
            StoreIOError: the disk still refuses it.
        """
        ...

    async def sync(self) -> None:
        """Return once what the store took so far is as durable as it makes it.

        Raises:
            StoreIOError: the store failed (:attr:`failure`).
        """
        ...

    async def close(self) -> None:
        """Close the store (a file store: its file and lock, whatever happens).

        Raises:
            StoreIOError: what the store held could not all be written: after a reopen
                it holds what reached the file before the failure.
        """
        ...


class _Writer(ABC):
    """What both writers share: the file, the latched error, the worker task, the
    recovery and the close.

    The first write or fsync error is latched (:attr:`error`): the writer then writes
    nothing (appends and submits are dropped: the store's memory still has them) until
    :meth:`recover` rewrites the whole file from the store's state. ``on_error`` hears
    each latched error once, on the loop, as a :class:`StoreIOError` naming the file (not
    the failures of :meth:`recover` itself, which raises them). Everything a writer
    raises for the disk is a :class:`StoreIOError`.
    """

    file: RecordFile
    _error: BaseException | None
    _task: asyncio.Task[None] | None
    _progress: asyncio.Condition
    _on_error: Callable[[StoreIOError], None] | None
    _recovering: bool
    _closing: bool

    @property
    def error(self) -> BaseException | None:
        """What stopped the writer (None: it writes)."""
        return self._error

    @property
    def failure(self) -> StoreIOError | None:
        """:attr:`error` as the store's users see it (None: it writes)."""
        return None if self._error is None else self._failure(self._error)

    def _failure(self, exc: BaseException) -> StoreIOError:
        return StoreIOError(str(self.file.path), "write", exc)

    def _raise_error(self) -> None:
        if self._error is not None:
            raise self._failure(self._error) from self._error

    def _latch(self, exc: BaseException) -> None:
        first = self._error is None
        self._error = exc
        if first and not self._recovering and self._on_error is not None:
            self._on_error(self._failure(exc))

    async def _until(self, predicate: Callable[[], bool]) -> None:
        async with self._progress:
            await self._progress.wait_for(predicate)

    async def _notify(self) -> None:
        async with self._progress:
            self._progress.notify_all()

    @abstractmethod
    async def wait(self) -> None:
        """Until everything queued so far is written (each writer says how)."""

    @abstractmethod
    def _holding(self) -> bool:
        """Whether records wait in memory instead of the file (failure aside)."""

    async def released(self) -> None:
        """Return once no record waits in memory instead of the file: no compaction holds
        them and no error keeps them out (it recovered), or the writer is closing."""
        await self._until(lambda: self._closing or (self._error is None and not self._holding()))

    async def close(self) -> None:
        """Write what is pending, then close the file and release the lock, both whatever
        the writes did; then raise the latched error, if any (what it kept out of the
        file is not in it)."""
        self._closing = True
        await self._notify()
        try:
            if self._error is None:
                await self.wait()
        finally:
            if self._task is not None:
                await asyncio.gather(self._task, return_exceptions=True)
            await asyncio.to_thread(self.file.close)
        self._raise_error()


class RecordWriter(_Writer):
    """Writes a :class:`RecordFile` from the event loop without blocking it.

    Appends and compactions are queued in order; one worker task hands everything queued
    since its last batch to a thread (``asyncio.to_thread``) as one batch, with one fsync.
    The first write error is latched (:class:`_Writer`): :meth:`wait` raises it until
    :meth:`recover`.

    Args:
        file: the opened file.
        fsync: fsync after every batch (off: the page cache only, which survives a killed
            process but not a power loss).
        on_written: called on the loop after each batch with the number of ops written so
            far (the stores use it to know what is on disk).
        on_error: hears each latched error, on the loop.
    """

    def __init__(
        self,
        file: RecordFile,
        *,
        fsync: bool = True,
        on_written: Callable[[int], None] | None = None,
        on_error: Callable[[StoreIOError], None] | None = None,
    ) -> None:
        self.file = file
        self._fsync = fsync
        self._ops: list[bytes | Rewrite] = []
        self._submitted = 0
        self._written = 0
        self._error: BaseException | None = None
        self._task: asyncio.Task[None] | None = None
        self._progress = asyncio.Condition()
        self._on_written = on_written
        self._on_error = on_error
        self._recovering = False
        self._closing = False

    @property
    def submitted(self) -> int:
        return self._submitted

    @property
    def written(self) -> int:
        return self._written

    def _holding(self) -> bool:
        return False

    def submit(self, op: bytes | Rewrite) -> int:
        """Queue one record (or a compaction); returns its ticket for :meth:`wait`. After
        an error, until :meth:`recover`, the op is dropped."""
        self._submitted += 1
        if self._error is not None:
            return self._submitted
        self._ops.append(op)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())
        return self._submitted

    async def _run(self) -> None:
        while self._ops and self._error is None:
            batch = self._ops
            self._ops = []
            try:
                await asyncio.to_thread(self.file.apply, batch, self._fsync)
            except BaseException as exc:  # latched, raised to every waiter
                self._ops = []  # the store's memory has them; recover() rewrites them
                self._latch(exc)
            else:
                self._written += len(batch)
                if self._on_written is not None:
                    self._on_written(self._written)
            await self._notify()

    async def wait(self, ticket: int | None = None) -> None:
        """Return once op ``ticket`` (default: everything submitted) is written."""
        target = self._submitted if ticket is None else ticket
        await self._until(lambda: self._written >= target or self._error is not None)
        if self._written < target:
            self._raise_error()

    async def recover(self, rewrite: Rewrite) -> None:
        """After an error: write ``rewrite`` (the store's whole state, which covers every
        op dropped since) and go on writing; raises :class:`StoreIOError` if that fails
        too."""
        if self._error is None:
            return
        self._recovering = True
        try:
            self._ops = []
            self._written = self._submitted  # superseded by the rewrite
            self._error = None
            await self.wait(self.submit(rewrite))
        finally:
            self._recovering = False


class ImmediateWriter(_Writer):
    """Writes a :class:`RecordFile` so that each record is in the file (the OS's page
    cache) when :meth:`append` returns, without blocking the event loop on a disk.

    - :meth:`append` writes at once, on the loop (one ``write`` call);
    - fsyncs (``fsync``) run in a thread, one for everything appended since the last;
    - a compaction (:meth:`rewrite`) runs in a thread; meanwhile :meth:`append` holds its
      records in memory (:attr:`holding`) and writes them, in order, once it is done. A
      caller that must not go on before its records are in the file waits for
      :meth:`released` then.

    The first write or fsync error is latched (:class:`_Writer`): :meth:`append` does not
    raise it (the record is dropped; the caller learns of it from ``on_error`` and
    :attr:`error`), :meth:`wait` does, until :meth:`recover`.

    Args:
        file: the opened file.
        fsync: fsync what was appended, from a thread, as soon as possible.
        on_error: hears each latched error, on the loop.
    """

    def __init__(
        self,
        file: RecordFile,
        *,
        fsync: bool = True,
        on_error: Callable[[StoreIOError], None] | None = None,
    ) -> None:
        self.file = file
        self._fsync = fsync
        self._held: list[bytes] = []
        self._rewrite: Rewrite | None = None
        self._covers = 0
        self._compacting = False
        self._dirty = False
        self._appended = 0
        self._synced = 0
        self._error: BaseException | None = None
        self._task: asyncio.Task[None] | None = None
        self._progress = asyncio.Condition()
        self._on_error = on_error
        self._recovering = False
        self._closing = False

    @property
    def holding(self) -> bool:
        """A compaction runs: appended records wait in memory until it is done."""
        return self._compacting

    def _holding(self) -> bool:
        return self._compacting

    def append(self, payload: bytes) -> None:
        """Append one record: in the file when this returns, unless :attr:`holding` or
        failed (:attr:`error`: dropped)."""
        self._appended += 1
        if self._error is not None:
            return
        if self._compacting:
            self._held.append(payload)
        else:
            try:
                self.file.append_now((payload,))
            except BaseException as exc:
                self._latch(exc)
                return
        if self._fsync:
            self._dirty = True
            self._start()

    def rewrite(self, rewrite: Rewrite) -> None:
        """Replace the file's records by ``rewrite``'s (from a thread, crash-safe); the
        records appended after this call follow them. Dropped after an error."""
        if self._error is not None:
            return
        self._rewrite = rewrite
        self._covers = self._appended  # the snapshot holds everything appended so far
        self._compacting = True
        self._start()

    def _start(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        file = self.file
        while self._error is None and (self._rewrite is not None or self._dirty):
            try:
                rewrite, self._rewrite = self._rewrite, None
                if rewrite is not None:
                    covers = self._covers
                    await asyncio.to_thread(file.apply, [rewrite], True)
                    self._synced = max(self._synced, covers)
                    held, self._held = self._held, []
                    self._compacting = False
                    if held:
                        file.append_now(held)
                        self._dirty = self._fsync
                else:
                    self._dirty = False
                    target = self._appended
                    await asyncio.to_thread(file.fsync)
                    self._synced = max(self._synced, target)
            except BaseException as exc:  # latched, raised to every waiter
                self._held = []  # the store's memory has them; recover() rewrites them
                self._latch(exc)
            await self._notify()

    async def wait(self) -> None:
        """Return once everything appended so far is in the file, and fsynced when the
        writer fsyncs."""
        target = self._appended
        await self._until(
            lambda: (
                self._error is not None
                or (not self._compacting and (not self._fsync or self._synced >= target))
            )
        )
        self._raise_error()

    async def recover(self, rewrite: Rewrite) -> None:
        """After an error: write ``rewrite`` (the store's whole state, which covers every
        record dropped since) and go on appending; raises :class:`StoreIOError` if that
        fails too."""
        if self._error is None:
            return
        self._recovering = True
        try:
            self._held = []
            self._error = None
            self.rewrite(rewrite)
            await self._until(lambda: not self._compacting or self._error is not None)
            self._raise_error()
        finally:
            self._recovering = False


__all__ = [
    "MAX_RECORD",
    "ImmediateWriter",
    "RecordFile",
    "RecordWriter",
    "Rewrite",
    "StoreHealth",
    "decode_records",
    "encode_record",
]
