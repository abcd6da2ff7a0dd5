"""A bounded pool of threads for password checks.

A password check is an scrypt derivation: tens of milliseconds of CPU and 16 MiB of
memory by design. Run in the event loop's default executor (``asyncio.to_thread``), a
flood of logons would fill the threads the journal's fsync and file reads also use, and
the fsync would queue behind hundreds of derivations: persisted acks stall. This pool has
its own threads (``Tuning/PasswordCheckThreads``, default 1, so on a small machine the
loop and the flusher keep the other cores), and at most ``max_pending`` checks may wait
for them; beyond that a logon is refused at once (``auth failure`` with a ``retry_after``)
instead of queueing without bound. ``hashlib.scrypt`` releases the GIL while it works, so
a busy pool costs the loop a core, not the interpreter.

Counters (``checks``, ``refused``, ``busy_seconds``) feed ``/metrics``; ``checks`` is the
number of derivations run, which the tests use to prove a throttled logon ran none.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Final, TypeVar

from spool.server.protocol.errors import SpoolError

__all__ = ["PoolBusy", "ScryptPool"]

T = TypeVar("T")

#: checks allowed to wait per thread before new ones are refused
PENDING_PER_THREAD: Final = 64


class PoolBusy(SpoolError):
    """Too many password checks are already waiting (``retry_after`` seconds)."""

    def __init__(self, pending: int, retry_after: float) -> None:
        super().__init__(f"{pending} password checks are already waiting")
        self.retry_after = retry_after


class ScryptPool:
    """Runs password checks on its own threads (see the module docstring).

    Args:
        threads: worker threads.
        max_pending: checks queued or running at most (default 64 per thread).
    """

    def __init__(self, threads: int = 1, max_pending: int | None = None) -> None:
        self.threads = threads
        self.max_pending = max_pending if max_pending is not None else PENDING_PER_THREAD * threads
        self._executor: ThreadPoolExecutor | None = None
        self.pending = 0
        self.checks = 0
        self.refused = 0
        self.busy_seconds = 0.0

    def _pool(self) -> ThreadPoolExecutor:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(self.threads, thread_name_prefix="spool-scrypt")
        return self._executor

    async def run(self, check: Callable[[], T]) -> T:
        """Run ``check`` on a pool thread.

        Raises:
            PoolBusy: ``max_pending`` checks are already queued or running.
        """
        if self.pending >= self.max_pending:
            self.refused += 1
            raise PoolBusy(self.pending, retry_after=1.0)
        self.pending += 1
        try:
            loop = asyncio.get_running_loop()
            result, seconds = await loop.run_in_executor(self._pool(), _timed, check)
        finally:
            self.pending -= 1
        # counted on the loop (the pool's threads never write shared state)
        self.checks += 1
        self.busy_seconds += seconds
        return result

    def close(self) -> None:
        """Stop the threads (queued checks are cancelled)."""
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None


def _timed(check: Callable[[], T]) -> tuple[T, float]:
    started = time.perf_counter()
    result = check()
    return result, time.perf_counter() - started
