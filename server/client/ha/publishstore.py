"""Publish stores: every publish the broker has not acked as persisted, kept for resending.

The HA client numbers each publish, stores it, sends it with ``a=persisted`` and discards
up to each persisted ack; after a reconnect it trims the store to the logon ack's ``s`` and
resends the rest with their own sequence numbers (the broker drops what it already has).
:class:`MemoryPublishStore` survives reconnects and failovers; :class:`FilePublishStore`
also a killed client process (an append-only :mod:`~spool.server.client.ha.recordlog` of
``P`` and ``D`` records, fsynced off the loop, compacted crash-safely, the highest sequence
kept across compactions and restarts). A store holds at most ``capacity`` messages
(``PublishStoreFull``, ``wait_for_room``); a file store whose disk fails refuses new
publishes with :class:`StoreIOError` until :meth:`~FilePublishStore.recover`. See
docs/ha-client.md "Sizing the publish store", "FilePublishStore on disk" and "When a
store's disk fails".
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Protocol

import orjson

from spool.server.client.ha.errors import StoreClosed, StoreIOError
from spool.server.client.ha.recordlog import RecordFile, RecordWriter, Rewrite, StoreHealth

_P: Final = struct.Struct("<QH")
_U32: Final = struct.Struct("<I")
_D: Final = struct.Struct("<Q")
#: compact once discarded records take this many bytes and more than the live ones
COMPACT_MIN_BYTES: Final = 4 * 1024 * 1024
#: messages a store holds at most unless told otherwise
DEFAULT_CAPACITY: Final = 1_000_000


@dataclass(slots=True)
class StoredPublish:
    """One publish waiting for its persisted ack.

    Attributes:
        seq: its sequence number (kept across resends).
        topic / body: what was published.
        extra: the other header fields to resend (``k`` SOW key, ``e`` expiration, ``x``
            correlation id, ``o`` publish options such as ``deliver_at=...``, ``delta``
            for a delta_publish), or ``None``.
    """

    seq: int
    topic: str
    body: bytes
    extra: dict[str, Any] | None = None


class PublishStore(StoreHealth, Protocol):
    """What the HA client needs of a publish store (both stores pass the same tests); a
    failed one refuses :meth:`store` with its :attr:`~StoreHealth.failure`."""

    @property
    def last_seq(self) -> int:
        """The highest sequence ever stored (or discarded)."""
        ...

    @property
    def last_discarded(self) -> int:
        """Everything up to this sequence was confirmed (persisted, or replicated when
        failover is unsafe) and dropped."""
        ...

    @property
    def capacity(self) -> int | None:
        """The most messages it holds (None: no bound)."""
        ...

    async def open(self) -> None:
        """Load what a previous run left (file stores); idempotent."""
        ...

    def store(self, entry: StoredPublish) -> None:
        """Keep ``entry`` (its ``seq`` above every stored one) until it is discarded."""
        ...

    def discard_up_to(self, seq: int) -> int:
        """The broker persisted everything up to ``seq``; returns how many were removed."""
        ...

    def entries_after(self, seq: int, upto: int | None = None) -> list[StoredPublish]:
        """The stored publishes above ``seq`` (and at most ``upto``), in order."""
        ...

    def unpersisted_count(self) -> int:
        """How many publishes it holds (waiting to be confirmed)."""
        ...

    def count_after(self, seq: int) -> int:
        """How many of the publishes it holds are numbered above ``seq``."""
        ...


def _check_capacity(capacity: int | None) -> int | None:
    if capacity is not None and capacity < 1:
        raise ValueError(f"a publish store's capacity must be at least 1, not {capacity}")
    return capacity


class MemoryPublishStore:
    """A publish store in memory: it survives reconnects, not the process.

    Args:
        capacity: the most messages it holds (None: no bound).
    """

    def __init__(self, *, capacity: int | None = DEFAULT_CAPACITY) -> None:
        self._capacity = _check_capacity(capacity)
        self._items: list[StoredPublish] = []
        self._head = 0  # discarded entries before it are dropped lazily
        self._last_seq = 0
        self._last_discarded = 0
        self._closed = False
        self.on_failure: Callable[[StoreIOError], None] | None = None

    @property
    def last_seq(self) -> int:
        return self._last_seq

    @property
    def last_discarded(self) -> int:
        return self._last_discarded

    @property
    def capacity(self) -> int | None:
        return self._capacity

    async def open(self) -> None:
        """Nothing to load."""

    def _load(self, entry: StoredPublish) -> None:
        self._items.append(entry)
        self._last_seq = max(self._last_seq, entry.seq)

    def store(self, entry: StoredPublish) -> None:
        if self._closed:
            raise StoreClosed("publish store is closed")
        if entry.seq <= self._last_seq:
            raise ValueError(f"sequence {entry.seq} is not above the last stored {self._last_seq}")
        self._load(entry)

    def discard_up_to(self, seq: int) -> int:
        if seq <= self._last_discarded:
            return 0
        self._last_discarded = seq
        self._last_seq = max(self._last_seq, seq)
        items = self._items
        head = self._head
        start = head
        while head < len(items) and items[head].seq <= seq:
            head += 1
        removed = head - start
        if head > 1024 and head * 2 > len(items):
            del items[:head]
            head = 0
        self._head = head
        return removed

    def _first_above(self, seq: int) -> int:
        items = self._items
        lo, hi = self._head, len(items)
        while lo < hi:
            mid = (lo + hi) // 2
            if items[mid].seq <= seq:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def entries_after(self, seq: int, upto: int | None = None) -> list[StoredPublish]:
        start = self._first_above(seq)
        end = len(self._items) if upto is None else self._first_above(upto)
        return self._items[start:end]

    def unpersisted_count(self) -> int:
        return len(self._items) - self._head

    def count_after(self, seq: int) -> int:
        return len(self._items) - self._first_above(seq)

    def live(self) -> list[StoredPublish]:
        return self._items[self._head :]

    @property
    def failure(self) -> StoreIOError | None:
        """Memory does not fail."""
        return None

    async def recover(self) -> None:
        """Nothing to recover."""

    async def sync(self) -> None:
        """Memory is as durable as it gets."""

    async def close(self) -> None:
        self._closed = True


def encode_publish(entry: StoredPublish) -> bytes:
    topic = entry.topic.encode()
    extra = orjson.dumps(entry.extra) if entry.extra else b""
    return b"".join(
        (b"P", _P.pack(entry.seq, len(topic)), topic, _U32.pack(len(extra)), extra, entry.body)
    )


def encode_discard(seq: int) -> bytes:
    return b"D" + _D.pack(seq)


def decode_publish(payload: bytes) -> StoredPublish:
    seq, tlen = _P.unpack_from(payload, 1)
    pos = 1 + _P.size
    topic = payload[pos : pos + tlen].decode()
    pos += tlen
    (elen,) = _U32.unpack_from(payload, pos)
    pos += _U32.size
    extra = orjson.loads(payload[pos : pos + elen]) if elen else None
    return StoredPublish(seq, topic, payload[pos + elen :], extra)


def _compacted(last_discarded: int, live: Sequence[StoredPublish]) -> list[bytes]:
    """A store's whole state as the records of a compacted file: the discard mark
    first (so the highest sequence survives), then every live publish."""
    payloads = [encode_discard(last_discarded)]
    payloads.extend(encode_publish(e) for e in live)
    return payloads


class FilePublishStore(MemoryPublishStore):
    """A publish store that survives a killed client process (see the module docstring).

    Args:
        path: the store file (``<path>.lock`` is its lock file; one owner at a time).
        fsync: fsync each batch (off: survives a killed process, not a power loss).
        capacity: the most messages it holds (None: no bound); a store reopened with
            more than that (a smaller capacity than the last run) takes no new message
            until the broker confirmed enough.

    Raises (from :meth:`open`):
        StoreLocked: another client holds the store.
    """

    def __init__(
        self, path: str | Path, *, fsync: bool = True, capacity: int | None = DEFAULT_CAPACITY
    ) -> None:
        super().__init__(capacity=capacity)
        self.path = Path(path)
        self._file = RecordFile(self.path)
        self._writer: RecordWriter | None = None
        self._fsync = fsync
        self._live_bytes = 0
        self._dead_bytes = 0

    @property
    def dropped_bytes(self) -> int:
        """Bytes of torn tail removed when the store was opened."""
        return self._file.dropped

    async def open(self) -> None:
        """Load the file (taking its lock).

        Raises:
            StoreLocked: another client holds the store.
            StoreIOError: the file could not be read or repaired.
        """
        if self._writer is not None:
            return
        try:
            payloads = await asyncio.to_thread(self._file.open)
        except OSError as exc:
            raise StoreIOError(str(self.path), "open", exc) from exc
        for p in payloads:
            if p[:1] == b"P":
                entry = decode_publish(p)
                if entry.seq > self._last_discarded:
                    self._load(entry)
                    self._live_bytes += len(p)
                else:
                    self._dead_bytes += len(p)
            elif p[:1] == b"D":
                (seq,) = _D.unpack_from(p, 1)
                super().discard_up_to(seq)
                self._dead_bytes += len(p)
        self._live_bytes = sum(len(encode_publish(e)) for e in self.live())
        self._writer = RecordWriter(self._file, fsync=self._fsync, on_error=self._failed)

    def _failed(self, failure: StoreIOError) -> None:
        if self.on_failure is not None:
            self.on_failure(failure)

    @property
    def failure(self) -> StoreIOError | None:
        """Why the store writes nothing now: a write or fsync failed (None: it writes).
        It refuses :meth:`store` meanwhile; what it held then, and every discard since,
        is written by :meth:`recover`."""
        writer = self._writer
        return None if writer is None else writer.failure

    def _w(self) -> RecordWriter:
        if self._writer is None or self._closed:
            raise StoreClosed(f"publish store {self.path} is not open")
        return self._writer

    def store(self, entry: StoredPublish) -> None:
        writer = self._w()
        failure = writer.failure
        if failure is not None:
            raise failure
        super().store(entry)
        payload = encode_publish(entry)
        self._live_bytes += len(payload)
        writer.submit(payload)

    def discard_up_to(self, seq: int) -> int:
        writer = self._w()
        if seq <= self._last_discarded:
            return 0
        freed = 0
        items = self._items
        i = self._head
        while i < len(items) and items[i].seq <= seq:
            e = items[i]
            freed += (
                len(e.body) + len(e.topic) + 16 + (len(orjson.dumps(e.extra)) if e.extra else 0)
            )
            i += 1
        removed = super().discard_up_to(seq)
        self._live_bytes -= freed
        self._dead_bytes += freed + 9
        if self._dead_bytes > COMPACT_MIN_BYTES and self._dead_bytes > self._live_bytes:
            self._compact(writer)
        else:
            writer.submit(encode_discard(seq))
        return removed

    def _compact(self, writer: RecordWriter) -> None:
        writer.submit(self._rewrite(_compacted(self._last_discarded, self.live())))

    def _rewrite(self, payloads: list[bytes]) -> Rewrite:
        self._live_bytes = sum(len(p) for p in payloads)
        self._dead_bytes = 0
        return Rewrite(payloads)

    async def recover(self) -> None:
        """Rewrite the file from memory after a failure (crash-safe, as a compaction);
        then the store takes publishes again. The records are encoded in a thread: the
        HA client retries this while the disk stays full, and a large store must not
        hold the loop each time (what changes meanwhile: only discards, which the next
        ``D`` record, cumulative, covers).

        Raises:
            StoreIOError: the disk still refuses it.
        """
        writer = self._w()
        if writer.error is not None:
            live = list(self.live())  # references only; the entries do not change
            payloads = await asyncio.to_thread(_compacted, self._last_discarded, live)
            await writer.recover(self._rewrite(payloads))

    async def sync(self) -> None:
        await self._w().wait()

    async def close(self) -> None:
        """Write what is pending (after a failure: try :meth:`recover` once), then close
        the file and release its lock whatever the writes did.

        Raises:
            StoreIOError: the store could not write all it held: a reopen reads what
                reached the file before the failure (the publishes accepted since are
                not there).
        """
        writer, self._writer = self._writer, None
        self._closed = True
        if writer is None:
            return
        if writer.error is not None:
            with contextlib.suppress(StoreIOError):  # a disk with room again takes it all
                live = _compacted(self._last_discarded, self.live())
                await writer.recover(self._rewrite(live))
        await writer.close()


__all__ = [
    "COMPACT_MIN_BYTES",
    "DEFAULT_CAPACITY",
    "FilePublishStore",
    "MemoryPublishStore",
    "PublishStore",
    "StoredPublish",
]
