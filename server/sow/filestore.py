"""The persistent backend of :class:`~spool.server.ports.TopicStore`: memory plus one file.

Reads are answered from memory (a :class:`~spool.server.sow.memory.MemoryStore`); every change
is also written to the topic's file (server/sow/fileformat.py) by a writer task whose
file work (write, fsync, read, rename) runs in a worker thread, never on the loop.

What is written when:

- for a topic recorded in the transaction log, a change is written once its log record is
  durable (:meth:`FileStore.durable`): the file never holds a change the log could lose
  in a crash, so "the file's valid prefix, then the log after the prefix's last sequence"
  is always the exact state (server/sow/stage.py replays that part at start);
- for a topic the log does not record, at once: the file is its only copy.

Changes ready together are written together, the last one per key only (a hot key
updated a thousand times between two writes costs one change in the file), then fsynced.
The file grows with every write; :meth:`FileStore.compact` rewrites it with one put per
live key, from the file itself (never from memory, which may be ahead of the log), and
runs by itself when the file is more than twice the size its live records need.

Thread-safety: the loop owns the records and the lists of changes; a thread only ever
gets immutable records and the file descriptor, under the store's file lock (an
``asyncio.Lock``: one file operation at a time).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

from spool.server.clock import Clock, time_us
from spool.server.ports import SowRecord
from spool.server.sow.fileformat import (
    CHANGE_PUT,
    ChangeRecord,
    Header,
    SowDamage,
    decode_header,
    encode_delete,
    encode_header,
    encode_puts,
    live_changes,
    read_changes,
)
from spool.server.sow.memory import MemoryStore, new_record

__all__ = [
    "AUTO_COMPACT_MIN",
    "CompactReport",
    "FileStore",
    "LoadReport",
    "read_sow_file",
    "write_sow_file",
]

#: a file smaller than this is never compacted by itself
AUTO_COMPACT_MIN: Final = 8 << 20
#: the fixed part of a put change (server/sow/fileformat.py) and its CRC
_PUT_FIXED: Final = 56
#: bytes of a key, for the estimate of what live records take in a file
_TYPICAL_KEY: Final = 16

#: a function that re-derives a key from a body (None: the body gives none)
Rekey = Callable[[bytes], str | None]
EventFn = Callable[[str, str, dict[str, object]], None]

LoadStatus = Literal["created", "loaded", "repaired", "replaced"]


@dataclass(frozen=True, slots=True)
class LoadReport:
    """What opening a SOW file found.

    Attributes:
        topic: the topic.
        path: the file.
        status: ``created`` (no file), ``loaded``, ``repaired`` (its readable part was
            kept and the rest cut off), ``replaced`` (not usable: moved aside, started empty).
        records: records loaded.
        file_seq: the last log sequence the file's state includes (0: none).
        damage: where the readable part ended and why, when it did not reach the end.
        rekeyed: the file was written with other Key paths; keys were derived again.
        dropped: records whose body gives no key under the current Key paths.
        moved_to: where an unusable file was moved.
    """

    topic: str
    path: Path
    status: LoadStatus
    records: int
    file_seq: int
    damage: SowDamage | None = None
    rekeyed: bool = False
    dropped: int = 0
    moved_to: Path | None = None

    def to_dict(self) -> dict[str, object]:
        return {
            "topic": self.topic,
            "path": str(self.path),
            "status": self.status,
            "records": self.records,
            "file_seq": self.file_seq,
            "damage_offset": self.damage.offset if self.damage else None,
            "damage": self.damage.reason if self.damage else None,
            "rekeyed": self.rekeyed,
            "dropped": self.dropped,
            "moved_to": str(self.moved_to) if self.moved_to else None,
        }


@dataclass(frozen=True, slots=True)
class CompactReport:
    """What a compaction did: file sizes before and after, records kept."""

    topic: str
    before: int
    after: int
    records: int
    at_us: int


@dataclass(slots=True)
class _Read:
    """A file read back (in a thread)."""

    header: Header | None
    reason: str | None
    records: dict[str, ChangeRecord]
    file_seq: int
    valid_end: int
    size: int
    damage: SowDamage | None


def read_sow_file(path: Path) -> _Read:
    """Read a SOW file: its header, its live records, where its readable part ends.

    Blocking (a file read): call it in a thread. Also used by ``spool sow verify``.
    """
    buf = path.read_bytes()
    header = decode_header(buf)
    if isinstance(header, str):
        return _Read(None, header, {}, 0, 0, len(buf), None)
    live: dict[str, ChangeRecord] = {}
    top = header.base_seq
    damage: SowDamage | None = None
    valid = header.size
    for change in read_changes(buf, header.size):
        if isinstance(change, SowDamage):
            damage = change
            break
        if change.op == CHANGE_PUT:
            live[change.key] = change
        else:
            live.pop(change.key, None)
        if change.seq > top:
            top = change.seq
        valid += change.size
    return _Read(header, None, live, top, valid, len(buf), damage)


def write_sow_file(
    path: Path, topic: str, keys: tuple[str, ...], base_seq: int, records: list[SowRecord]
) -> int:
    """Blocking: a whole SOW file (header and one put per record), written to a temporary
    file, fsynced and renamed over ``path``. Returns its size.

    Used by a compaction and by ``spool sow rebuild``.
    """
    return _write_file(path, [encode_header(topic, keys, base_seq), encode_puts(records)])


def _write_file(path: Path, parts: list[bytes | memoryview]) -> int:
    """Blocking: ``parts`` as the whole new content of ``path`` (a temporary file,
    fsynced, renamed over it, the directory fsynced). Returns the size."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        data = b"".join(parts)
        _write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    _fsync_dir(path.parent)
    return len(data)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


#: one change waiting to be written: (log seq, the record put, or the key deleted)
_Pending = tuple[int, SowRecord | str]


class FileStore(MemoryStore):
    """A SOW topic kept in memory and in one file (the ``persistent`` durability).

    Args:
        topic: the topic.
        path: its file.
        keys: the topic's Key paths (written in the header; a file written with other
            paths has its keys derived again by ``rekey``).
        recorded: whether the transaction log records the topic (then changes are
            written once durable, see the module docstring).
        clock: the time of compactions.
        rekey: derives a key from a body under the current Key paths.
        on_event: ``(level, event, fields)`` for write failures and compactions.
    """

    def __init__(
        self,
        topic: str,
        path: Path,
        keys: tuple[str, ...],
        *,
        recorded: bool,
        clock: Clock,
        rekey: Rekey | None = None,
        on_event: EventFn | None = None,
    ) -> None:
        super().__init__(topic)
        self.path = path
        self._keys = keys
        self.recorded = recorded
        self._clock = clock
        self._rekey = rekey
        self._on_event = on_event
        #: changes whose log records are not durable yet (recorded topics), in log order
        self._pending: list[_Pending] = []
        #: changes to write now
        self._ready: list[_Pending] = []
        self._durable_seq = 0
        self._fd: int | None = None
        self._lock = asyncio.Lock()
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._writer: asyncio.Task[None] | None = None
        self._closing = False
        #: bytes of the file
        self.file_bytes = 0
        #: the last log sequence the file's state includes
        self.file_seq = 0
        self.last_compaction_us = 0
        self.write_error: OSError | None = None
        #: called with ``file_seq`` after each write (the stage moves its journal pin)
        self.on_written: Callable[[int], None] | None = None

    # -- open / close -------------------------------------------------------------------

    async def open(self, *, fresh: bool = False) -> LoadReport:
        """Load the file (creating it when missing) and start the writer.

        Args:
            fresh: the store was made for a topic first seen now, after start-up (a regex
                rule's new topic): a file already there was not loaded at start and is
                not this store's; it is moved aside. Changes made before this returns
                are kept and written once the file is ready.
        """
        report = await asyncio.to_thread(self._open_fresh if fresh else self._open_file)
        self._writer = asyncio.get_running_loop().create_task(self._write_loop())
        return report

    def _open_file(self) -> LoadReport:
        """Blocking: read, repair or replace, then open for appending."""
        path = self.path
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists():
            self._create_file(0)
            return LoadReport(self.topic, path, "created", 0, 0)
        read = read_sow_file(path)
        header = read.header
        if header is None or header.topic != self.topic:
            why = read.reason if header is None else f"it keeps topic {header.topic!r}"
            moved = path.with_name(path.name + ".unusable")
            os.replace(path, moved)
            self._create_file(0)
            self._event(
                "warning",
                "sow_file_replaced",
                {"path": str(path), "reason": why, "moved_to": str(moved)},
            )
            return LoadReport(self.topic, path, "replaced", 0, 0, moved_to=moved)
        rekeyed = header.keys != self._keys
        dropped = 0
        version = 0
        for change in read.records.values():
            key = change.key
            assert change.body is not None
            if rekeyed:
                new_key = self._rekey(change.body) if self._rekey is not None else None
                if new_key is None:
                    dropped += 1
                    continue
                key = new_key
            version += 1
            rec = new_record(
                key,
                change.body,
                change.seq,
                change.timestamp_us,
                change.pub_hash,
                change.pub_seq,
                change.expires_us,
                version,
            )
            self._load(rec)
        self.file_seq = read.file_seq
        if rekeyed:
            # the file must hold the keys of the current paths: write it anew
            self._rewrite(read.file_seq)
        else:
            self._fd = os.open(path, os.O_WRONLY | os.O_APPEND)
            self.file_bytes = read.size
            if read.damage is not None:
                os.ftruncate(self._fd, read.valid_end)
                os.fsync(self._fd)
                self.file_bytes = read.valid_end
        status: LoadStatus = "repaired" if read.damage is not None else "loaded"
        return LoadReport(
            self.topic, path, status, len(self), self.file_seq, read.damage, rekeyed, dropped
        )

    def _open_fresh(self) -> LoadReport:
        """Blocking: a new file, whatever was there."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        moved = None
        if self.path.exists():
            moved = self.path.with_name(self.path.name + ".unusable")
            os.replace(self.path, moved)
        self._create_file(0)
        if moved is not None:
            return LoadReport(self.topic, self.path, "replaced", 0, 0, moved_to=moved)
        return LoadReport(self.topic, self.path, "created", 0, 0)

    def _create_file(self, base_seq: int) -> None:
        """Blocking: a new file with just a header."""
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
        head = encode_header(self.topic, self._keys, base_seq)
        _write_all(fd, head)
        os.fsync(fd)
        _fsync_dir(self.path.parent)
        self._fd = fd
        self.file_bytes = len(head)
        self.file_seq = base_seq

    def _rewrite(self, base_seq: int) -> int:
        """Blocking: write the records in memory as a new file (atomically, by rename).
        Only called while nothing in memory is newer than the file (at open)."""
        size = write_sow_file(self.path, self.topic, self._keys, base_seq, self.records())
        if self._fd is not None:
            os.close(self._fd)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        self.file_bytes = size
        return size

    async def close(self) -> None:
        """Write what is ready (everything, for a topic the log does not record), stop the
        writer and close the file."""
        if self._writer is None:
            return
        self._closing = True
        self._wake.set()
        with contextlib.suppress(Exception):
            await self._writer
        self._writer = None
        if self._fd is not None:
            fd, self._fd = self._fd, None
            await asyncio.to_thread(os.close, fd)

    # -- changes ------------------------------------------------------------------------

    def _changed(self, old: SowRecord | None, new: SowRecord | None, seq: int) -> None:
        item: _Pending
        if new is not None:
            item = (seq, new)
        else:
            assert old is not None
            item = (seq, old.key)
        if self.recorded and seq > self._durable_seq:
            self._pending.append(item)
        else:
            self._ready.append(item)
            self._idle.clear()
            self._wake.set()

    def _changed_run(self, news: list[SowRecord]) -> None:
        if not news:
            return
        items: list[_Pending] = list(zip([r[2] for r in news], news, strict=True))
        if self.recorded and items[-1][0] > self._durable_seq:
            self._pending.extend(items)
        else:
            self._ready.extend(items)
            self._idle.clear()
            self._wake.set()

    def durable(self, seq: int) -> None:
        """The log is durable up to ``seq``: the changes it covers may be written."""
        if seq <= self._durable_seq:
            return
        self._durable_seq = seq
        pending = self._pending
        if not pending or pending[0][0] > seq:
            return
        n = len(pending)
        for i, (s, _) in enumerate(pending):
            if s > seq:
                n = i
                break
        self._ready.extend(pending[:n])
        del pending[:n]
        self._idle.clear()
        self._wake.set()

    @property
    def unwritten(self) -> int:
        """Changes not in the file yet (waiting for durability or for the writer)."""
        return len(self._pending) + len(self._ready)

    async def flush(self) -> None:
        """Return once every change that is ready has been written and fsynced."""
        while self._ready or not self._idle.is_set():
            if self._writer is None or self._writer.done():
                return
            self._wake.set()
            await self._idle.wait()

    # -- the writer ---------------------------------------------------------------------

    async def _write_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            if self._ready and self.write_error is None:
                async with self._lock:
                    batch, self._ready = self._ready, []
                    try:
                        written = await asyncio.to_thread(self._write_batch, batch)
                    except OSError as exc:
                        self.write_error = exc
                        self._event(
                            "error",
                            "sow_write_failed",
                            {"path": str(self.path), "error": repr(exc)},
                        )
                    else:
                        self.file_bytes += written
                        top = max(s for s, _ in batch)
                        if top > self.file_seq:
                            self.file_seq = top
                        if self.on_written is not None:
                            self.on_written(self.file_seq)
                if self._wants_compaction():
                    with contextlib.suppress(OSError):
                        await self.compact()
            if self.write_error is not None:
                # the file is stale from here on (a recorded topic is rebuilt from the log
                # at the next start); changes are not kept for a writer that cannot write
                self._ready.clear()
                self._pending.clear()
            if not self._ready:
                self._idle.set()
            if self._closing and not self._ready:
                return

    def _write_batch(self, batch: list[_Pending]) -> int:
        """Blocking: the last change per key of ``batch``, appended and fsynced."""
        last: dict[str, _Pending] = {}
        for item in batch:
            rec = item[1]
            last[rec if type(rec) is str else rec.key] = item  # type: ignore[union-attr]
        # one change per key: their order in the file does not matter, so the deletes go
        # first and the puts in one compiled pass (encode_puts)
        puts: list[SowRecord] = []
        deletes: list[bytes] = []
        for s, rec in last.values():
            if type(rec) is str:
                deletes.append(encode_delete(rec, s))
            else:
                puts.append(rec)  # type: ignore[arg-type]
        data = b"".join(deletes) + encode_puts(puts)
        fd = self._fd
        if fd is None:
            raise OSError("the SOW file is closed")
        _write_all(fd, data)
        os.fsync(fd)
        return len(data)

    def _wants_compaction(self) -> bool:
        """The file holds more than twice what its live records need (estimated from the
        bodies' bytes and a typical key: counting exactly would cost per change)."""
        live = self._bytes + len(self._records) * (_PUT_FIXED + _TYPICAL_KEY)
        return (
            self.write_error is None
            and self.file_bytes > AUTO_COMPACT_MIN
            and self.file_bytes > 2 * live
        )

    # -- compaction ---------------------------------------------------------------------

    async def compact(self) -> CompactReport:
        """Rewrite the file with one put per live key (from the file itself, in a thread).

        Raises:
            OSError: the new file could not be written (the old one is left as it was).
        """
        async with self._lock:
            before = self.file_bytes
            after, records, fd = await asyncio.to_thread(self._compact_file)
            old, self._fd = self._fd, fd
            if old is not None:
                await asyncio.to_thread(os.close, old)
            self.file_bytes = after
        report = CompactReport(self.topic, before, after, records, time_us(self._clock))
        self.last_compaction_us = report.at_us
        self._event(
            "info",
            "sow_compacted",
            {"topic": self.topic, "before": before, "after": after, "records": records},
        )
        return report

    def _compact_file(self) -> tuple[int, int, int]:
        """Blocking: read the file, write its live changes to a new one, swap them.

        The live puts are copied byte for byte (they are already encoded, CRC included):
        no object per change and no re-encoding, which made compaction a fifth of a SOW
        topic's CPU under a stream of updates.
        """
        buf = self.path.read_bytes()
        header = decode_header(buf)
        if isinstance(header, str):
            raise OSError(f"cannot compact {self.path}: {header}")
        # a damaged tail ends the walk: the writer truncates it at open, nothing after counts
        live, top, _damage = live_changes(buf, header.size, header.base_seq)
        view = memoryview(buf)
        size = _write_file(
            self.path,
            [
                encode_header(self.topic, self._keys, top),
                *(view[a : a + n] for a, n in live.values()),
            ],
        )
        new_fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        return size, len(live), new_fd

    def _event(self, level: str, event: str, fields: dict[str, object]) -> None:
        if self._on_event is not None:
            self._on_event(level, event, fields)
