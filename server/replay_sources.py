"""Replay sources other than the transaction log itself."""

from __future__ import annotations

from server.txlog import TransactionLog
from server.txlog.record import Record


class AppendedSource:
    """The log as a ``live`` bookmark subscription sees it: appended, not only durable."""

    def __init__(self, txlog: TransactionLog) -> None:
        self._log = txlog

    @property
    def durable_seq(self) -> int:
        return self._log.durable_seq

    @property
    def first_seq(self) -> int:
        return self._log.first_seq

    def seq_for_bookmark(self, pub_hash: int, pub_seq: int) -> int | None:
        return self._log.seq_for_bookmark(pub_hash, pub_seq)

    def seq_for_time(self, timestamp_us: int) -> int:
        return self._log.seq_for_time(timestamp_us)

    async def read_batch(
        self,
        from_seq: int,
        *,
        max_count: int = 1000,
        max_bytes: int = 1 << 20,
        upto_seq: int | None = None,
    ) -> list[Record]:
        return await self._log.read_appended(
            from_seq, max_count=max_count, max_bytes=max_bytes, upto_seq=upto_seq
        )

    async def wait_durable(self, seq: int) -> None:
        await self._log.wait_durable(seq)
