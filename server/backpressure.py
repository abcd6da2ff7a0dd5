"""Back-pressure: what happens to a live message when its connection is behind (pure).

A connection's outbound buffer is bounded by ``Tuning/SlowClientBufferLimit`` (L). Three
kinds of bytes enter it, each with its own rule (:class:`BufferLimits`):

- **live messages of recorded topics** are queued while the buffer stays at or below L/2.
  A delivery that would pass L/2 is not queued: the subscriptions it was for *spill*
  (they leave the live path and read the transaction log from the first record they
  were not given; server/spills.py runs that read). Half of L, not L, so that what
  cannot be read back keeps room during a burst;
- **paced messages** (a replay, a spilled subscription catching up) come in pieces of at
  most L/4 (:attr:`BufferLimits.piece_max`; one message larger than that goes alone),
  each queued only while the buffer is below L/4. The check and the queueing happen in
  one turn of the event loop, so the paced producers of one connection take turns at it
  and, together, never bring the buffer past L/2: what cannot be read back keeps the
  other half, and data that could be read back never disconnects anyone. (Pieces are
  bounded in bytes, not sized by the average record of a read: a piece of a subscription
  taking the large records among small ones, or two catch-ups, would otherwise pass L,
  and the next heartbeat would be refused.)
  A bookmark replay queues the first piece of each read without the check (its cursor
  may hand the subscription to another cursor meanwhile, which must not overtake it),
  right after waiting for room at the end of the previous read: one piece over L/2 per
  replay between two reads;
- **what cannot be read back** (live messages of topics the log does not record, and of a
  subscription whose filter reads ``CLIENT_NAME()``, which records do not keep; acks and
  heartbeats) is queued up to L; the one that would pass L disconnects the client with
  ``slow client`` (*overflow*).

Besides, a client whose connection takes nothing at all for ``Tuning/SlowClientTimeout``
while something waits for it is disconnected with ``slow client`` (server/stalls.py).

:class:`LiveFeed` is one live subscription's state machine::

                      spill(first_seq)                       (the read reached the end
        ┌──────┐  ─────────────────────────►  ┌─────────────┐ of the log: next_seq ==
        │ live │                              │ catching_up │ last_seq + 1, nothing
        └──────┘  ◄─────────────────────────  └─────────────┘ appended since)
                      rejoin(next_seq, last_seq)

While it catches up, the fan-out skips it for runs of recorded topics (the log read
delivers them) and still hands it runs of topics the log does not record (nothing could
read them back later). The boundary has no gap and no duplicate because both edges happen
on the event loop between two appends: a run is fanned out synchronously right after its
append, so at a spill every record before ``first_seq`` was handled by the live path and
every record from it on is left to the read; and at a rejoin the read has delivered every
record appended so far, so the next append's fan-out is the next record it needs.

:func:`route` is what the fan-out does with one connection's share of a run once its
bytes are known. No I/O, no clock (times are passed in): the whole policy is tested alone
(tests/unit/test_backpressure.py, with a model of a log, a buffer and a reader).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

__all__ = ["MAX_FRAME", "BufferLimits", "FeedError", "LiveFeed", "Route", "route"]

#: largest frame a connection's writer builds (several leave when more is queued)
MAX_FRAME: Final = 1 << 20

Route = Literal["deliver", "spill", "overflow"]


class FeedError(RuntimeError):
    """A transition the state machine does not have (a defect of the caller)."""


@dataclass(frozen=True, slots=True)
class BufferLimits:
    """The thresholds of one connection's outbound buffer, from ``SlowClientBufferLimit``.

    Attributes:
        limit: L, the most that bytes which cannot be read back may bring it to.
    """

    limit: int

    @property
    def spill_at(self) -> int:
        """Live messages of recorded topics are queued up to this (L/2)."""
        return self.limit // 2

    @property
    def paced_at(self) -> int:
        """Paced producers (replays, catch-ups) wait while the buffer is at or above this (L/4)."""
        return self.limit // 4

    @property
    def frame_max(self) -> int:
        """The largest frame to build: a quarter of L, at most :data:`MAX_FRAME`.

        "Progress" for ``SlowClientTimeout`` is one frame taken by the client, so a frame
        must be small enough for a slow but steady reader to take one in that time.
        """
        return max(1, min(MAX_FRAME, self.limit // 4))

    def live_fits(self, depth: int, nbytes: int, *, readable: bool) -> bool:
        """Whether ``nbytes`` of live messages may be queued on ``depth`` buffered bytes
        (``readable``: a subscription could read them back from the log instead)."""
        return depth + nbytes <= (self.spill_at if readable else self.limit)

    @property
    def piece_max(self) -> int:
        """The most bytes a paced producer queues at once (L/4; one delivery larger than
        that goes alone): queued only below L/4, so the pieces of every paced producer
        of the connection, taking turns at that check, stay below L/2 together."""
        return max(1, self.limit // 4)

    def fits(self, depth: int, nbytes: int) -> bool:
        """Whether ``nbytes`` that cannot be read back (acks, heartbeats) may be queued."""
        return depth + nbytes <= self.limit

    def has_room(self, depth: int) -> bool:
        """Whether a paced producer may queue its next piece."""
        return depth < self.paced_at


def route(*, fits: bool, readable: bool) -> Route:
    """What the fan-out does with one connection's share of a run (its bytes encoded).

    Args:
        fits: :meth:`BufferLimits.live_fits` said yes.
        readable: every subscription it is for could read it back from the log (the
            topic is recorded and no filter reads ``CLIENT_NAME()``).

    Returns:
        ``deliver`` (queue it), ``spill`` (queue nothing; those subscriptions catch up
        from the log from the run's first record) or ``overflow`` (queue nothing; the
        connection is disconnected with ``slow client``).
    """
    if fits:
        return "deliver"
    return "spill" if readable else "overflow"


@dataclass(slots=True)
class LiveFeed:
    """One live subscription's path for messages of recorded topics (see the module doc).

    Attributes:
        catching_up: it reads the log instead of being fed by the fan-out.
        resume_seq: while catching up, the first record its read started at.
        since: monotonic time the current catch-up began.
        spills: how many times it spilled.
        caught_up: how many times it rejoined the live path.
    """

    catching_up: bool = False
    resume_seq: int = 0
    since: float = 0.0
    spills: int = 0
    caught_up: int = 0

    def takes(self, recorded: bool) -> bool:
        """Whether the fan-out hands it a run (of a recorded topic or not)."""
        return not (recorded and self.catching_up)

    def spill(self, first_seq: int, now: float) -> None:
        """A run starting at ``first_seq`` could not be queued: catch up from it.

        Raises:
            FeedError: it is catching up already (the fan-out skips it then), or
                ``first_seq`` is not a record's sequence.
        """
        if self.catching_up:
            raise FeedError("a subscription that is catching up cannot spill again")
        if first_seq < 1:
            raise FeedError(f"a spill starts at a record of the log, not at {first_seq}")
        self.catching_up = True
        self.resume_seq = first_seq
        self.since = now
        self.spills += 1

    def can_rejoin(self, next_seq: int, last_seq: int) -> bool:
        """Whether the read has delivered every record appended so far (``next_seq`` is
        the first it has not read; ``last_seq`` the newest appended)."""
        return self.catching_up and next_seq == last_seq + 1

    def rejoin(self, next_seq: int, last_seq: int, now: float) -> float:
        """Back to the live path; returns how long the catch-up took.

        Raises:
            FeedError: not catching up, or the read is not at the end of the log (a rejoin
                there would lose the records in between, or repeat them).
        """
        if not self.can_rejoin(next_seq, last_seq):
            raise FeedError(
                f"cannot rejoin the live path at {next_seq} with {last_seq} appended"
                if self.catching_up
                else "a live subscription has nothing to rejoin"
            )
        self.catching_up = False
        self.caught_up += 1
        return max(0.0, now - self.since)

    def end(self, now: float) -> float:
        """The subscription ends (unsubscribed, connection closed): how long it had been
        catching up (0 when live)."""
        if not self.catching_up:
            return 0.0
        self.catching_up = False
        return max(0.0, now - self.since)
