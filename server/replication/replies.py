"""Where the publish pipeline answers a replicated run: only failures come back.

A replicated run (an inbound link's batch, a bootstrap's copy) asks for no acks; a refusal
of the pipeline (the user may not write the topic, the log is full) must not be lost, so it
is collected here and the caller ends the link or the copy with it (the source keeps the
records and sends them again).
"""

from __future__ import annotations

import asyncio

from spool.server.backpressure import MAX_FRAME
from spool.server.ports import AckValue
from spool.server.protocol.errors import ProtocolFailure

__all__ = ["FailureReplies"]


#: the paced readers' turn of a peer that is never replayed to
_NO_TURN = asyncio.Lock()


class FailureReplies:
    """Where the pipeline answers a replicated run: no acks are asked, only failures
    come back, and they end the link."""

    closed = False

    def __init__(self) -> None:
        self.failures: list[ProtocolFailure] = []

    def send(self, data: bytes) -> None:
        pass

    def send_messages(self, data: bytes, count: int) -> None:
        pass

    def send_batch(self, data: bytes, count: int) -> None:
        pass

    def live_fits(self, nbytes: int, *, readable: bool) -> bool:
        return True  # nothing is ever queued here

    def overflow(self, nbytes: int) -> None:
        pass

    def ack(
        self,
        kind: str,
        cid: str | None,
        status: str = "success",
        reason: str | None = None,
        **fields: AckValue,
    ) -> None:
        pass

    def fail(self, cid: str | None, exc: ProtocolFailure, **fields: AckValue) -> None:
        self.failures.append(exc)

    def has_room(self) -> bool:
        return True

    @property
    def piece_bytes(self) -> int:
        return MAX_FRAME  # nothing is ever queued here

    async def wait_room(self) -> None:
        return None

    @property
    def paced_turn(self) -> asyncio.Lock:
        """Nothing is ever replayed here: a lock nobody waits for."""
        return _NO_TURN
