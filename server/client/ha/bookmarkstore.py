"""Bookmark stores: where each bookmark subscription resumes, kept per subscription id.

The HA client asks the store for a subscription's resume bookmark when it subscribes and
resubscribes (same ``sub_id``), and tells it about every message it hands out
(:meth:`BookmarkStore.receive`, which also says whether it is a duplicate to drop), every
message the application is done with (:meth:`BookmarkStore.discard`) and the broker's
durable position (:meth:`BookmarkStore.persisted`); the per-subscription logic is
:class:`~spool.server.client.ha.resume.ResumeState`. :class:`MemoryBookmarkStore` keeps the
states in memory (optionally with a recovery-point adapter, e.g. a SOW topic);
:class:`FileBookmarkStore` logs them as JSON records in a
:mod:`~spool.server.client.ha.recordlog`, ``writes="each"`` (a crash window of one
message) or ``"batched"``, compacted into ``snap`` records, and keeps them in memory when
its disk fails until :meth:`FileBookmarkStore.recover`. See docs/ha-client.md "Bookmark
subscriptions" and "When a store's disk fails".
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, Protocol

import orjson

from spool.server.client.ha.errors import StoreClosed, StoreIOError
from spool.server.client.ha.recordlog import (
    ImmediateWriter,
    RecordFile,
    RecordWriter,
    Rewrite,
    StoreHealth,
)
from spool.server.client.ha.recovery import RecoveryPointAdapter
from spool.server.client.ha.resume import EPOCH, MAX_GAPS, ResumeState

#: how a file store writes: each record when it happens, or in batches per loop turn
Writes = Literal["each", "batched"]


class BookmarkStore(StoreHealth, Protocol):
    """What the HA client needs of a bookmark store (both stores pass the same tests); a
    failed one keeps its state in memory and :meth:`holding_discards` is true."""

    async def open(self) -> None: ...

    def register(self, sub_id: str, start: str = EPOCH) -> str:
        """A bookmark subscription ``sub_id`` starts at ``start`` unless the store already
        knows it; returns where it resumes."""
        ...

    def resume_bookmark(self, sub_id: str) -> str:
        """MOST_RECENT for ``sub_id``; EPOCH when nothing is stored."""
        ...

    def has_resume_point(self, sub_id: str) -> bool:
        """Whether ``sub_id`` resumes after messages it processed (something was
        discarded, or the broker reported a durable position), not from its start."""
        ...

    def holding_discards(self) -> bool:
        """Whether discards made so far wait in memory instead of where the store keeps
        them (a file store's compaction): a subscription then waits for
        :meth:`discards_written` before it hands out the next message."""
        ...

    async def discards_written(self) -> None:
        """Return once no discard waits in memory."""
        ...

    def receive(self, sub_id: str, bookmarks: list[str]) -> list[bool]:
        """Note delivered messages; per bookmark, False for a duplicate to drop."""
        ...

    def discard(self, sub_id: str, bookmark: str) -> None: ...

    def persisted(self, sub_id: str, bookmark: str) -> None: ...

    def is_discarded(self, sub_id: str, bookmark: str) -> bool: ...

    def purge(self, sub_id: str | None = None) -> None:
        """Forget one subscription, or all."""
        ...

    def prune(self) -> None:
        """Compact what the store keeps to what resuming needs."""
        ...


class MemoryBookmarkStore:
    """Bookmark store in memory (see the module docstring).

    Args:
        adapter: where recovery points are also saved and loaded from at :meth:`open`.
        max_gaps: gap intervals kept per publisher and subscription: the most messages
            of one publisher that can be on their way out of its order at once (delayed
            ones, late records) and still be delivered once
            (:class:`~spool.server.client.ha.resume.ResumeState`).
    """

    def __init__(
        self, adapter: RecoveryPointAdapter | None = None, *, max_gaps: int = MAX_GAPS
    ) -> None:
        if max_gaps < 1:
            raise ValueError(f"max_gaps must be at least 1, not {max_gaps}")
        self._states: dict[str, ResumeState] = {}
        self._adapter = adapter
        self.max_gaps = max_gaps
        self._dirty: set[str] = set()
        self._flush_scheduled = False
        self._closed = False
        self.on_failure: Callable[[StoreIOError], None] | None = None

    async def open(self) -> None:
        if self._adapter is not None:
            for sub_id, bookmark in (await self._adapter.load()).items():
                if sub_id not in self._states:
                    state = ResumeState(bookmark, max_gaps=self.max_gaps)
                    self._states[sub_id] = state

    def _state(self, sub_id: str) -> ResumeState:
        if self._closed:
            raise StoreClosed("bookmark store is closed")
        state = self._states.get(sub_id)
        if state is None:
            state = self._states[sub_id] = ResumeState(max_gaps=self.max_gaps)
        return state

    def register(self, sub_id: str, start: str = EPOCH) -> str:
        state = self._states.get(sub_id)
        if state is None:
            state = self._states[sub_id] = ResumeState(start, max_gaps=self.max_gaps)
            self._logged_start(sub_id, start)
        return state.resume_bookmark()

    def resume_bookmark(self, sub_id: str) -> str:
        state = self._states.get(sub_id)
        return EPOCH if state is None else state.resume_bookmark()

    def has_resume_point(self, sub_id: str) -> bool:
        state = self._states.get(sub_id)
        return state is not None and state.recovery is not None

    def holding_discards(self) -> bool:
        """Memory holds every discard where it keeps them."""
        return False

    async def discards_written(self) -> None:
        """Nothing waits."""

    def receive(self, sub_id: str, bookmarks: list[str]) -> list[bool]:
        state = self._state(sub_id)
        accepted = [state.receive(bm) for bm in bookmarks]
        self._logged_received(
            sub_id, [bm for bm, ok in zip(bookmarks, accepted, strict=True) if ok]
        )
        return accepted

    def discard(self, sub_id: str, bookmark: str) -> None:
        state = self._state(sub_id)
        before = state.recovery
        if state.discard(bookmark):
            self._logged_discard(sub_id, bookmark)
            if state.recovery != before:
                self._changed(sub_id)

    def persisted(self, sub_id: str, bookmark: str) -> None:
        if self._state(sub_id).persisted(bookmark):
            self._logged_persisted(sub_id, bookmark)
            self._changed(sub_id)

    def is_discarded(self, sub_id: str, bookmark: str) -> bool:
        state = self._states.get(sub_id)
        return state is not None and state.is_discarded(bookmark)

    def purge(self, sub_id: str | None = None) -> None:
        ids = list(self._states) if sub_id is None else [sub_id]
        for sid in ids:
            self._states.pop(sid, None)
            self._logged_purge(sid)
            if self._adapter is not None:
                self._adapter.purge(sid)

    def prune(self) -> None:
        """Memory keeps only what resuming needs already (discarded runs are dropped as the
        recovery point passes them)."""

    def states(self) -> dict[str, ResumeState]:
        return self._states

    # -- the recovery point adapter ------------------------------------------------------

    def _changed(self, sub_id: str) -> None:
        if self._adapter is None:
            return
        self._dirty.add(sub_id)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush_adapter)

    def _flush_adapter(self) -> None:
        self._flush_scheduled = False
        adapter = self._adapter
        assert adapter is not None
        for sid in self._dirty:
            state = self._states.get(sid)
            if state is not None:
                adapter.update(sid, state.resume_bookmark())
        self._dirty.clear()

    # -- the log (the file store writes these) -------------------------------------------

    def _logged_start(self, sub_id: str, start: str) -> None:
        pass

    def _logged_received(self, sub_id: str, bookmarks: list[str]) -> None:
        pass

    def _logged_discard(self, sub_id: str, bookmark: str) -> None:
        pass

    def _logged_persisted(self, sub_id: str, bookmark: str) -> None:
        pass

    def _logged_purge(self, sub_id: str) -> None:
        pass

    @property
    def failure(self) -> StoreIOError | None:
        """Memory does not fail."""
        return None

    async def recover(self) -> None:
        """Nothing to recover."""

    async def sync(self) -> None:
        await self._sync_adapter()

    async def _sync_adapter(self) -> None:
        if self._adapter is not None:
            if self._flush_scheduled:
                self._flush_adapter()
            await self._adapter.sync()

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            await self._close_adapter()

    async def _close_adapter(self) -> None:
        """Save the last recovery points and close the adapter (whatever the save did)."""
        if self._adapter is not None:
            try:
                await self._sync_adapter()
            finally:
                await self._adapter.close()


class FileBookmarkStore(MemoryBookmarkStore):
    """A bookmark store that survives a killed client process (see the module docstring).

    Args:
        path: the store file (``<path>.lock``: one owner at a time).
        fsync: fsync what is written (from a thread; off: survives a killed process, not
            a power loss).
        compact_every: compact after this many records.
        adapter: as for :class:`MemoryBookmarkStore`.
        writes: ``"each"`` (every record in the file when it happens: a killed process
            repeats at most the message it was processing) or ``"batched"`` (a batch per
            loop turn, off the loop: a few hundred at most); module docstring.
        max_gaps: as for :class:`MemoryBookmarkStore` (a ``snap`` record with more
            gaps of a publisher loads its newest ``max_gaps``).

    Raises (from :meth:`open`):
        StoreLocked: another client holds the store.
        StoreIOError: the file could not be read or repaired.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        fsync: bool = True,
        compact_every: int = 50_000,
        adapter: RecoveryPointAdapter | None = None,
        writes: Writes = "each",
        max_gaps: int = MAX_GAPS,
    ) -> None:
        if writes not in ("each", "batched"):
            raise ValueError(f"writes must be 'each' or 'batched', not {writes!r}")
        super().__init__(adapter, max_gaps=max_gaps)
        self.path = Path(path)
        self.writes: Writes = writes
        self._file = RecordFile(self.path)
        self._fsync = fsync
        self._writer: RecordWriter | ImmediateWriter | None = None
        self._compact_every = compact_every
        self._records = 0
        self._discards: dict[str, list[str]] = {}
        self._discard_scheduled = False

    @property
    def dropped_bytes(self) -> int:
        """Bytes of torn tail removed when the store was opened."""
        return self._file.dropped

    async def open(self) -> None:
        if self._writer is not None:
            return
        try:
            payloads = await asyncio.to_thread(self._file.open)
        except OSError as exc:
            raise StoreIOError(str(self.path), "open", exc) from exc
        states = self._states
        max_gaps = self.max_gaps
        for p in payloads:
            rec: dict[str, Any] = orjson.loads(p)
            kind = rec["k"]
            sid = rec["s"]
            if kind == "snap":
                states[sid] = ResumeState.from_snapshot(rec["v"], max_gaps=max_gaps)
            elif kind == "start":
                states.setdefault(sid, ResumeState(rec["v"], max_gaps=max_gaps))
            elif kind == "x":
                states.pop(sid, None)
            else:
                state = states.setdefault(sid, ResumeState(max_gaps=max_gaps))
                if kind == "r":
                    for bm in rec["v"]:
                        state.receive(bm)
                elif kind == "d":
                    for bm in rec["v"]:
                        state.discard(bm)
                elif kind == "p":
                    state.persisted(rec["v"])
        for state in states.values():
            state.reloaded()
        self._records = len(payloads)
        if self.writes == "each":
            self._writer = ImmediateWriter(self._file, fsync=self._fsync, on_error=self._failed)
        else:
            self._writer = RecordWriter(self._file, fsync=self._fsync, on_error=self._failed)
        await super().open()

    def _failed(self, failure: StoreIOError) -> None:
        if self.on_failure is not None:
            self.on_failure(failure)

    @property
    def failure(self) -> StoreIOError | None:
        """Why the store writes nothing now: a write or fsync failed (None: it writes).
        Meanwhile it keeps every record in memory only and :meth:`holding_discards` is
        true; :meth:`recover` writes its whole state."""
        writer = self._writer
        return None if writer is None else writer.failure

    def _log(self, kind: str, sub_id: str, value: Any) -> None:
        writer = self._writer
        if writer is None or self._closed:
            raise StoreClosed(f"bookmark store {self.path} is not open")
        if writer.error is not None:
            return  # kept in memory: recover() writes the whole state
        payload = orjson.dumps({"k": kind, "s": sub_id, "v": value})
        if isinstance(writer, ImmediateWriter):
            writer.append(payload)
        else:
            writer.submit(payload)
        self._records += 1
        if self._records >= self._compact_every:
            self._compact(writer)

    def _logged_start(self, sub_id: str, start: str) -> None:
        self._log("start", sub_id, start)

    def _logged_received(self, sub_id: str, bookmarks: list[str]) -> None:
        if bookmarks:
            self._flush_discards()  # the log keeps the application's order of events
            self._log("r", sub_id, bookmarks)

    def _logged_discard(self, sub_id: str, bookmark: str) -> None:
        if self.writes == "each":
            self._log("d", sub_id, [bookmark])
            return
        self._discards.setdefault(sub_id, []).append(bookmark)
        if not self._discard_scheduled:
            self._discard_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush_discards)

    def _flush_discards(self) -> None:
        self._discard_scheduled = False
        if not self._discards:
            return
        pending = self._discards
        self._discards = {}
        for sid, bms in pending.items():
            self._log("d", sid, bms)

    def _logged_persisted(self, sub_id: str, bookmark: str) -> None:
        self._flush_discards()
        self._log("p", sub_id, bookmark)

    def _logged_purge(self, sub_id: str) -> None:
        self._flush_discards()
        self._log("x", sub_id, None)

    def _compact(self, writer: RecordWriter | ImmediateWriter) -> None:
        rewrite = self._rewrite()
        if isinstance(writer, ImmediateWriter):
            writer.rewrite(rewrite)
        else:
            writer.submit(rewrite)

    def _rewrite(self) -> Rewrite:
        """The whole state as one snapshot record per subscription."""
        self._flush_discards()
        snaps = [
            orjson.dumps({"k": "snap", "s": sid, "v": state.snapshot()})
            for sid, state in self._states.items()
        ]
        self._records = len(snaps)
        return Rewrite(snaps)

    def holding_discards(self) -> bool:
        """``each``: while a compaction holds records; never in ``batched`` mode (its
        window is the loop turn, module docstring); in both while the store is failed
        (:attr:`failure`): the next message waits until the discards are written."""
        writer = self._writer
        if writer is None:
            return False
        return writer.error is not None or (isinstance(writer, ImmediateWriter) and writer.holding)

    async def discards_written(self) -> None:
        """Return once no discard waits in memory (or the store closes)."""
        writer = self._writer
        if writer is not None:
            await writer.released()

    async def recover(self) -> None:
        """Rewrite the file from memory after a failure (crash-safe, as a compaction):
        then it records each discard again and the subscriptions go on.

        Raises:
            StoreIOError: the disk still refuses it.
        """
        writer = self._writer
        if writer is None or self._closed:
            raise StoreClosed(f"bookmark store {self.path} is not open")
        if writer.error is not None:
            await writer.recover(self._rewrite())

    def prune(self) -> None:
        """Rewrite the file as one snapshot per subscription (crash-safe)."""
        writer = self._writer
        if writer is None or self._closed:
            raise StoreClosed(f"bookmark store {self.path} is not open")
        self._compact(writer)

    async def sync(self) -> None:
        self._flush_discards()
        if self._writer is not None:
            await self._writer.wait()
        await super().sync()

    async def close(self) -> None:
        """Write what is pending (after a failure: try :meth:`recover` once), save the
        adapter's recovery points, then close the file and release its lock whatever the
        writes did.

        Raises:
            StoreIOError: the store could not write all it recorded: a reopen reads what
                reached the file before the failure (discards recorded since are not
                there: those messages come again).
        """
        if self._closed:
            return
        writer = self._writer
        try:
            self._flush_discards()
            if writer is not None and writer.error is not None:
                with contextlib.suppress(StoreIOError):  # a disk with room again takes it
                    await self.recover()
        finally:
            self._closed = True
            self._writer = None
            try:
                await self._close_adapter()
            finally:
                if writer is not None:
                    await writer.close()


__all__ = ["BookmarkStore", "FileBookmarkStore", "MemoryBookmarkStore"]
