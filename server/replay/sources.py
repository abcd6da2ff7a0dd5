"""Replay sources other than the transaction log itself."""

from __future__ import annotations

from spool.server.txlog import TransactionLog
from spool.server.txlog.format.batch import RecordBatch


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
        return self._log.seq_for_bookmark(pub_hash, pub_seq, delivered=True)

    def seq_for_later(self, pub_hash: int, pub_seq: int) -> int | None:
        return self._log.seq_for_later(pub_hash, pub_seq)

    def seq_for_time(self, timestamp_us: int) -> int:
        return self._log.seq_for_time(timestamp_us)

    async def read_view(
        self,
        from_seq: int,
        *,
        max_count: int = 1000,
        max_bytes: int = 1 << 20,
        upto_seq: int | None = None,
    ) -> RecordBatch:
        """Appended records from ``from_seq``, as a :class:`RecordBatch` (the protocol's
        one read; see ``ReplaySource``).

        Durable records come from the log's own columnar read, as for any other bookmark
        subscription (a log read never crosses the durable point); records not on disk yet
        come from the in-memory tail (``read_appended``) and are wrapped in a batch.
        """
        if from_seq <= self._log.durable_seq:
            return await self._log.read_view(
                from_seq, max_count=max_count, max_bytes=max_bytes, upto_seq=upto_seq
            )
        records = await self._log.read_appended(
            from_seq, max_count=max_count, max_bytes=max_bytes, upto_seq=upto_seq
        )
        return RecordBatch.from_records(records)

    async def wait_durable(self, seq: int) -> None:
        await self._log.wait_durable(seq)
