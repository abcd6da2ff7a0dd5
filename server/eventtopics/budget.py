"""How many messages an event topic may publish: a token bucket on the broker's clock
(pure: no I/O, no sleeping)."""

from __future__ import annotations

from spool.server.clock import Clock

__all__ = ["TokenBucket"]


class TokenBucket:
    """At most ``rate`` takes a second on average and ``burst`` at once.

    Args:
        rate: takes per second, on average.
        burst: takes at once after a quiet time (the bucket starts full).
        clock: where the time comes from (its monotonic seconds).
    """

    def __init__(self, rate: float, burst: float, clock: Clock) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError("a token bucket needs a positive rate and a burst of at least 1")
        self._rate = rate
        self._burst = burst
        self._clock = clock
        self._tokens = burst
        self._at = clock.monotonic()

    def take(self) -> bool:
        """Take one token; False when the bucket is empty."""
        now = self._clock.monotonic()
        if now > self._at:
            self._tokens = min(self._burst, self._tokens + (now - self._at) * self._rate)
            self._at = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return True
        return False
