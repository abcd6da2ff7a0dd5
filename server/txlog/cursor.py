"""A reading position in the log that replay and replication iterate from.

A :class:`LogCursor` yields :class:`~server.txlog.batch.RecordBatch` objects of durable
records in log order. It remembers where the last read stopped inside its journal, so a
sequential replay does no index lookup per batch, and it holds a retention :class:`Pin`
at its position so the journals ahead of it are not removed while it reads.

Usage::

    async with log.cursor(from_seq, follow=True, owner="replay:sub-1") as cur:
        async for batch in cur:
            for i in range(len(batch)):
                send(batch.topics[i], batch.bodies[i], batch.bookmark(i))

Without ``follow`` the iteration ends at the durable end of the log (or ``upto_seq``);
with it the cursor waits for new durable records until closed.
"""

from __future__ import annotations

from types import TracebackType
from typing import TYPE_CHECKING

from server.txlog.batch import RecordBatch
from server.txlog.errors import TxlogClosed

if TYPE_CHECKING:
    from server.txlog.journal import Journal
    from server.txlog.log import TransactionLog

__all__ = ["LogCursor"]


class LogCursor:
    """Batches of durable records from a position (see the module docstring).

    Use from the event loop that owns the log.
    """

    def __init__(
        self,
        log: TransactionLog,
        from_seq: int,
        *,
        upto_seq: int | None = None,
        follow: bool = False,
        max_count: int = 1000,
        max_bytes: int = 1 << 20,
        owner: str | None = None,
    ) -> None:
        self._log = log
        self._next = max(from_seq, log.first_seq)
        self._upto = upto_seq
        self._follow = follow
        self.max_count = max_count
        self.max_bytes = max_bytes
        self._hint: tuple[Journal, int, int] | None = None
        self._pin = log.pin(owner or f"cursor-{id(self):x}", self._next)
        self._closed = False

    @property
    def position(self) -> int:
        """The next seq this cursor will return."""
        return self._next

    @property
    def closed(self) -> bool:
        return self._closed

    def seek(self, seq: int) -> None:
        """Continue from ``seq`` instead."""
        self._next = max(seq, self._log.first_seq)
        self._hint = None
        if not self._closed:
            self._pin.move(self._next)

    async def next_batch(self) -> RecordBatch | None:
        """The next batch; None at the end (without ``follow``) or once closed.

        Raises:
            TxlogWriteFailed: while following, the log's writes failed.
            CorruptRecord: the journal is damaged at this position.
        """
        log = self._log
        while not self._closed:
            if self._upto is not None and self._next > self._upto:
                return None
            if self._next < log.first_seq:  # removed while we were away (we were unpinned)
                self._next = log.first_seq
                self._hint = None
            batch, position = await log._read(
                self._next, self.max_count, self.max_bytes, self._upto, True, self._hint
            )
            assert isinstance(batch, RecordBatch)
            self._hint = position
            if len(batch):
                self._next = batch.last_seq + 1
                if not self._closed:
                    self._pin.move(self._next)
                return batch
            if not self._follow:
                return None
            if self._next <= log.durable_seq:
                continue  # end of a journal: the next read starts in the following one
            try:
                await log.wait_durable(self._next)
            except TxlogClosed:
                return None
        return None

    def close(self) -> None:
        """Stop reading and release the pin; idempotent."""
        self._closed = True
        self._pin.release()

    def __aiter__(self) -> LogCursor:
        return self

    async def __anext__(self) -> RecordBatch:
        batch = await self.next_batch()
        if batch is None:
            raise StopAsyncIteration
        return batch

    async def __aenter__(self) -> LogCursor:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __del__(self) -> None:
        # a cursor dropped without close() must not keep journals pinned forever
        pin = getattr(self, "_pin", None)
        if pin is not None:
            pin.release()
