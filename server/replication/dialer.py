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

__all__ = ["FIRST_DELAY", "MAX_DELAY", "STABLE_AFTER", "Dialer"]

#: the wait after the first failed pass (seconds)
FIRST_DELAY: Final = 0.1
#: the longest wait between passes
MAX_DELAY: Final = 5.0
#: a link that streamed this long resets the back-off
STABLE_AFTER: Final = 1.0
#: +- this fraction of a wait is random
JITTER: Final = 0.1


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
        self._rng = rng if rng is not None else random.Random()
        self._first_delay = first_delay
        self._max_delay = max_delay
        self._index = 0
        self._failed_passes = 0
        self._connected_at: float | None = None

    @property
    def failed_passes(self) -> int:
        """Passes over the whole list that failed since the last stable link."""
        return self._failed_passes

    def next_attempt(self) -> tuple[tuple[str, int], float]:
        """The address to try now, and how long to wait before trying it."""
        delay = 0.0
        if self._index == 0 and self._failed_passes:
            base = min(self._max_delay, self._first_delay * 2 ** (self._failed_passes - 1))
            delay = base * (1.0 + self._rng.uniform(-JITTER, JITTER))
        return self.addresses[self._index], delay

    def failed(self) -> None:
        """The attempt at the current address failed (no connection, or refused)."""
        self._index += 1
        if self._index == len(self.addresses):
            self._index = 0
            self._failed_passes += 1

    def streaming(self, now: float) -> None:
        """The link at the current address validated and streams."""
        self._connected_at = now

    def dropped(self, now: float) -> None:
        """A streaming link ended: the next attempt starts from the top of the list."""
        started = self._connected_at
        self._connected_at = None
        self._index = 0
        if started is not None and now - started >= STABLE_AFTER:
            self._failed_passes = 0
        else:
            self._failed_passes += 1  # dropped at once: as if the whole pass had failed

    def reset(self) -> None:
        """Start over from the top at once (an operator's reconnect)."""
        self._index = 0
        self._failed_passes = 0
        self._connected_at = None
