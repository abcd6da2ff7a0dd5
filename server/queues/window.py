"""A queue's active window (``TargetQueueDepth``): which of its messages are in memory.

A queue with a target keeps at most that many messages *active* (in its state machine:
delivered, counted in depth). The others are *inactive*: they stay in the transaction log
only, and the window keeps just what finds them again there — a **cursor**, the log seq of
the first message not activated yet. The rule that makes recovery simple:

    the active messages are exactly the queue's messages before the cursor that have not
    left it; every message from the cursor on is inactive.

So activation is always in log order (the service reads the log from the cursor, off the
event loop, as active messages leave), and a restart, replaying the log with the same
target, rebuilds the same window: messages enter until the target is reached, the cursor
stops at the first one that does not fit, acks of messages before it take them out, and
the first refill after start-up tops the window up again exactly as the live one did.

An ack (a ``QUEUE_ACK`` seq) of a message at or after the cursor — a removal by filter of
an inactive message, or, during recovery, an ack of a message that was activated and
acked before the restart — is **deferred**: its seq is kept (a compact record) and the
message is skipped, never activated, when the cursor reaches it.

On a replicated queue the depth the window is given counts the active messages this
instance can deliver (not those of an offline owner: ``QueueRuntime.counted``), and the
ownership changes that name an inactive message wait in the ownership
(server/queues/ownership.py) until the message is activated.

Pure: no I/O, no clock (server/queues/service.py reads the log).
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["Window"]


class Window:
    """The active window of one queue.

    Args:
        target: ``TargetQueueDepth`` (at least 1).

    Attributes:
        target: the most messages active at once.
        cursor: the log seq of the first inactive message (0: none; new messages enter
            the state machine directly while it has room).
        inactive: messages of the queue from the cursor on, not deferred.
        deferred: seqs at or after the cursor that left the queue before activation
            (their number is ``/api/queues``' ``deferred_acks``, AMPS's
            ``deferred_ack_count``).
        reading: a refill (or a scan) of the log is under way.
    """

    __slots__ = ("cursor", "deferred", "inactive", "reading", "target")

    def __init__(self, target: int) -> None:
        if target < 1:
            raise ValueError("a window holds at least one message")
        self.target = target
        self.cursor = 0
        self.inactive = 0
        self.deferred: set[int] = set()
        self.reading = False

    def admits(self, seq: int, depth: int) -> bool:
        """A new message of the queue at ``seq`` (live or replayed): whether it enters
        the state machine (``depth`` active now); if not, it is inactive from here on."""
        if not self.cursor and depth < self.target:
            return True
        if not self.cursor:
            self.cursor = seq
        self.inactive += 1
        return False

    def defer(self, seqs: Iterable[int]) -> int:
        """Acks naming these seqs: those at or after the cursor are kept for activation
        (the message will be skipped). Returns how many were deferred."""
        cursor = self.cursor
        if not cursor:
            return 0
        n = 0
        deferred = self.deferred
        for seq in seqs:
            if seq >= cursor and seq not in deferred:
                deferred.add(seq)
                n += 1
        self.inactive -= n
        return n

    def room(self, depth: int) -> int:
        """How many messages a refill may activate now (0: none waiting, or full)."""
        if not self.cursor:
            return 0
        return max(0, self.target - depth)

    def passes(self, seq: int) -> bool:
        """A refill met the queue's message at ``seq``: whether to activate it (False: its
        ack was deferred; it is skipped and forgotten)."""
        if seq in self.deferred:
            self.deferred.discard(seq)
            return False
        self.inactive -= 1
        return True

    def moved(self, next_seq: int, last_seq: int) -> None:
        """A refill read up to ``next_seq`` (exclusive); the log ends at ``last_seq``.
        Past the log's end nothing is inactive any more: new messages enter directly."""
        if next_seq > last_seq:
            self.cursor = 0
            self.inactive = 0
            self.deferred.clear()
        else:
            self.cursor = next_seq
