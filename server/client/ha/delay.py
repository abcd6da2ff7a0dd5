"""Reconnect delay strategies: how long to wait before the next connection attempt.

Pure: time comes from an injected ``clock`` (monotonic seconds) and randomness from an
injected :class:`random.Random`, so tests assert exact schedules on a virtual clock.

The reconnect handler calls :meth:`DelayStrategy.get_connect_wait_duration` with the URI it
is about to try, waits that long, tries, and calls :meth:`DelayStrategy.reset` after a
successful logon. A strategy gives up by raising :class:`~spool.server.client.ha.errors.
ReconnectGaveUp`.

Exponential schedule (``ExponentialDelayStrategy``), per URI, counted from the last reset:

- the first attempt on a URI waits nothing (a failover to another server is immediate);
- attempt ``k >= 2`` on the same URI waits ``min(maximum, initial * backoff ** (k - 2))``
  plus a jitter drawn uniformly from ``[0, jitter * initial)``, the sum capped at
  ``maximum``;
- with ``max_total`` > 0, an attempt that would start more than ``max_total`` seconds after
  the first failed one (since the last reset) is not made: ``ReconnectGaveUp``.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Protocol

from spool.server.client.ha.errors import ReconnectGaveUp

#: a monotonic clock in seconds (``time.monotonic`` by default; a virtual one in tests).
MonotonicClock = Callable[[], float]


class DelayStrategy(Protocol):
    """When to try the next connection."""

    def get_connect_wait_duration(self, uri: str) -> float:
        """Seconds to wait before connecting to ``uri``; raises ``ReconnectGaveUp`` to stop."""
        ...

    def reset(self) -> None:
        """A connection succeeded: the next outage starts a fresh schedule."""
        ...


class FixedDelayStrategy:
    """The same wait before every attempt but the first of an outage.

    Args:
        delay: seconds between attempts.
        max_total: give up once attempts have gone on this long (0: never).
        clock: monotonic seconds.
    """

    def __init__(
        self, delay: float = 0.2, max_total: float = 0.0, *, clock: MonotonicClock = time.monotonic
    ) -> None:
        if delay < 0 or max_total < 0:
            raise ValueError("delay and max_total must be >= 0")
        self.delay = delay
        self.max_total = max_total
        self._clock = clock
        self._started: float | None = None

    def get_connect_wait_duration(self, uri: str) -> float:
        now = self._clock()
        if self._started is None:
            self._started = now
            return 0.0
        if self.max_total and now + self.delay - self._started > self.max_total:
            raise ReconnectGaveUp(
                f"gave up reconnecting after {now - self._started:.3f} s "
                f"(max_total {self.max_total} s)"
            )
        return self.delay

    def reset(self) -> None:
        self._started = None


class ExponentialDelayStrategy:
    """Waits growing geometrically per URI, with jitter and an optional total limit (the
    schedule is in the module docstring).

    Args:
        initial: seconds of the first wait on a URI already tried.
        maximum: the longest wait.
        backoff: the factor between consecutive waits (>= 1).
        max_total: seconds of retrying after which it gives up (0: never).
        jitter: random extra wait, as a fraction of ``initial`` (0: none).
        clock: monotonic seconds; ``rng``: the randomness of the jitter.
    """

    def __init__(
        self,
        initial: float = 0.2,
        maximum: float = 20.0,
        backoff: float = 2.0,
        max_total: float = 0.0,
        jitter: float = 1.0,
        *,
        clock: MonotonicClock = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        if initial < 0 or maximum < initial or backoff < 1 or max_total < 0 or jitter < 0:
            raise ValueError(
                "need 0 <= initial <= maximum, backoff >= 1, max_total >= 0, jitter >= 0"
            )
        self.initial = initial
        self.maximum = maximum
        self.backoff = backoff
        self.max_total = max_total
        self.jitter = jitter
        self._clock = clock
        self._rng = rng or random.Random()
        self._attempts: dict[str, int] = {}
        self._started: float | None = None

    def get_connect_wait_duration(self, uri: str) -> float:
        now = self._clock()
        if self._started is None:
            self._started = now
        k = self._attempts.get(uri, 0) + 1
        self._attempts[uri] = k
        if k == 1:
            wait = 0.0
        else:
            base = min(self.maximum, self.initial * self.backoff ** (k - 2))
            extra = self._rng.random() * self.jitter * self.initial if self.jitter else 0.0
            wait = min(self.maximum, base + extra)
        if self.max_total and now + wait - self._started > self.max_total:
            raise ReconnectGaveUp(
                f"gave up reconnecting to {uri} after {now - self._started:.3f} s "
                f"(max_total {self.max_total} s, {k - 1} attempts on it)"
            )
        return wait

    def reset(self) -> None:
        self._attempts.clear()
        self._started = None


__all__ = ["DelayStrategy", "ExponentialDelayStrategy", "FixedDelayStrategy", "MonotonicClock"]
