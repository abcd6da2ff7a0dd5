"""The sync durability horizon: the local fsync and every destination that is sync now.

A :class:`~spool.server.ports.DurabilityHorizon` for an instance that replicates: persisted
acks, flush acks and ``fully_durable`` subscriptions wait on it. Its position is the lowest
of the local durable seq and, for each destination whose *effective* sync type is sync,
how far that destination is done with the log (acknowledged, or not for it). It only moves
forward; a downgrade recomputes at once. The replication push follows the local horizon,
not this one. Its :attr:`failure` is the local log's; a sync destination that is down is
not a failure. :attr:`SyncHorizon.replicated` is the replicated watermark: how far the log
has reached every destination, sync or not. See docs/replication.md "The sync horizon,
downgrade and upgrade".
"""

from __future__ import annotations

import asyncio
import heapq
from collections.abc import Callable
from typing import Protocol

from spool.server.acks import LocalHorizon
from spool.server.protocol.errors import ProtocolFailure
from spool.server.txlog import TransactionLog

__all__ = ["HorizonMember", "ReplicatedWatermark", "SyncHorizon"]


class HorizonMember(Protocol):
    """A destination as the horizon sees it."""

    @property
    def holds_acks(self) -> bool:
        """Whether persisted acks wait for it now (effective sync type sync)."""
        ...

    @property
    def settled(self) -> int:
        """Every local seq up to this is acknowledged by it or not for it."""
        ...


class ReplicatedWatermark:
    """How far the log has reached every destination (sync or async): every local seq up
    to :attr:`seq` is durable here and acknowledged by, or not for, each destination.
    Moves only forward; :class:`SyncHorizon` computes it."""

    def __init__(self) -> None:
        self._seq = 0
        self._listeners: list[Callable[[int], None]] = []

    @property
    def seq(self) -> int:
        return self._seq

    def on_advance(self, callback: Callable[[int], None]) -> None:
        """Call ``callback(seq)`` on the loop whenever :attr:`seq` moves."""
        self._listeners.append(callback)

    def advance(self, seq: int) -> None:
        """Move to ``seq`` (ignored unless it is ahead)."""
        if seq <= self._seq:
            return
        self._seq = seq
        for callback in self._listeners:
            callback(seq)


class SyncHorizon:
    """Durable here and at every sync destination. Owned by the event loop.

    Args:
        txlog: the local transaction log (its durable position and listener).
    """

    def __init__(self, txlog: TransactionLog) -> None:
        self._txlog = txlog
        self._local = LocalHorizon(txlog)
        self._members: list[HorizonMember] = []
        self._listeners: list[Callable[[int], None]] = []
        self._seq = 0
        self._waiters: list[tuple[int, int, asyncio.Future[None]]] = []
        self._tick = 0
        #: how far the log has reached every destination, sync or not
        self.replicated = ReplicatedWatermark()
        txlog.add_durable_listener(self._local_advanced)

    def add(self, member: HorizonMember) -> None:
        """A destination whose acks may count."""
        self._members.append(member)

    @property
    def seq(self) -> int:
        return max(self._seq, 0)

    def holding(self) -> list[HorizonMember]:
        """The destinations persisted acks wait for now."""
        return [m for m in self._members if m.holds_acks]

    def on_advance(self, callback: Callable[[int], None]) -> None:
        self._listeners.append(callback)

    @property
    def failure(self) -> ProtocolFailure | None:
        return self._local.failure

    def on_failure(self, callback: Callable[[ProtocolFailure | None], None]) -> None:
        self._local.on_failure(callback)

    async def wait(self, seq: int) -> None:
        if seq <= self._seq:
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._tick += 1
        heapq.heappush(self._waiters, (seq, self._tick, future))
        await future

    def _local_advanced(self, _seq: int) -> None:
        self.recompute()

    def recompute(self) -> None:
        """Move the horizon if every holding destination and the local log allow it, and
        the replicated watermark if every destination does."""
        new = everywhere = self._txlog.durable_seq
        for member in self._members:
            h = member.settled
            if h < everywhere:
                everywhere = h
            if h < new and member.holds_acks:
                new = h
        if new > self._seq:
            self._seq = new
            waiters = self._waiters
            while waiters and waiters[0][0] <= new:
                _, _, future = heapq.heappop(waiters)
                if not future.done():
                    future.set_result(None)
            for callback in self._listeners:
                callback(new)
        # after the persisted acks it covers: a client hears "persisted" before "replicated"
        self.replicated.advance(everywhere)
