"""Which address a destination's link tries next, and how long it waits first (pure).

A destination lists its addresses in order (``Transport/InetAddr``, a failover list).
Every reconnect starts from the top of the list; the addresses are tried one after the
other without waiting; when a whole pass failed, the next pass waits, and each failed pass
waits longer (doubling from :data:`FIRST_DELAY` up to :data:`MAX_DELAY`, with a little
jitter so a fabric that lost a node does not reconnect in lockstep). A link that streamed
for at least :data:`STABLE_AFTER` seconds resets the back-off; one that drops sooner counts
as a failed pass, so a link that fails right after it connects cannot spin.

Time and randomness are given (the caller's clock, a ``random.Random``): the dialer only
decides. Tested alone (tests/unit/replication/test_dialer.py).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Final

__all__ = ["FIRST_DELAY", "MAX_DELAY", "STABLE_AFTER", "Backoff", "Dialer"]

#: the wait after the first failed pass (seconds)
FIRST_DELAY: Final = 0.1
#: the longest wait between passes
MAX_DELAY: Final = 5.0
#: a link that streamed this long resets the back-off
STABLE_AFTER: Final = 1.0
#: +- this fraction of a wait is random
JITTER: Final = 0.1


class Backoff:
    """The waits between attempts: none after a success, then doubling from
    :data:`FIRST_DELAY` to :data:`MAX_DELAY` (with jitter) for each failed attempt; a
    link that streamed for :data:`STABLE_AFTER` seconds starts over. A :class:`Dialer`
    counts a pass over its whole list as one attempt; a passive destination (no list:
    it runs over the connection its peer dialed) counts each attempt.

    Args:
        rng: jitter source (seed it in tests).
        first_delay: the wait after the first failed attempt.
        max_delay: the longest wait.
    """

    def __init__(
        self,
        *,
        rng: random.Random | None = None,
        first_delay: float = FIRST_DELAY,
        max_delay: float = MAX_DELAY,
    ) -> None:
        self._rng = rng if rng is not None else random.Random()
        self._first_delay = first_delay
        self._max_delay = max_delay
        self.failures = 0
        self._connected_at: float | None = None

    def delay(self) -> float:
        """How long to wait before the next attempt."""
        if not self.failures:
            return 0.0
        base: float = min(self._max_delay, self._first_delay * 2.0 ** (self.failures - 1))
        return base * (1.0 + self._rng.uniform(-JITTER, JITTER))

    def failed(self) -> None:
        self.failures += 1

    def streaming(self, now: float) -> None:
        self._connected_at = now

    def dropped(self, now: float) -> None:
        """A streaming link ended: a stable one starts over, a short one counts as failed."""
        started = self._connected_at
        self._connected_at = None
        if started is not None and now - started >= STABLE_AFTER:
            self.failures = 0
        else:
            self.failures += 1

    def reset(self) -> None:
        self.failures = 0
        self._connected_at = None


class Dialer:
    """The failover list of one destination.

    Args:
        addresses: ``(host, port)`` in the order to try.
        rng: jitter source (seed it in tests).
        first_delay: the wait after the first failed pass.
        max_delay: the longest wait.
    """

    def __init__(
        self,
        addresses: Sequence[tuple[str, int]],
        *,
        rng: random.Random | None = None,
        first_delay: float = FIRST_DELAY,
        max_delay: float = MAX_DELAY,
    ) -> None:
        if not addresses:
            raise ValueError("a destination needs at least one address")
        self.addresses = tuple(addresses)
        self.backoff = Backoff(rng=rng, first_delay=first_delay, max_delay=max_delay)
        self._index = 0

    @property
    def failed_passes(self) -> int:
        """Passes over the whole list that failed since the last stable link."""
        return self.backoff.failures

    def next_attempt(self) -> tuple[tuple[str, int], float]:
        """The address to try now, and how long to wait before trying it."""
        delay = self.backoff.delay() if self._index == 0 else 0.0
        return self.addresses[self._index], delay

    def failed(self) -> None:
        """The attempt at the current address failed (no connection, or refused)."""
        self._index += 1
        if self._index == len(self.addresses):
            self._index = 0
            self.backoff.failed()

    def streaming(self, now: float) -> None:
        """The link at the current address validated and streams."""
        self.backoff.streaming(now)

    def dropped(self, now: float) -> None:
        """A streaming link ended: the next attempt starts from the top of the list (one
        that dropped at once counts as if the whole pass had failed)."""
        self._index = 0
        self.backoff.dropped(now)

    def reset(self) -> None:
        """Start over from the top at once (an operator's reconnect)."""
        self._index = 0
        self.backoff.reset()
