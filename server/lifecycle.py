"""Where an instance is in its life: starting, serving, stopping.

One small shared object instead of flags on the broker, so the parts that refuse work while
the instance stops (the dispatcher, the client registry, the transports) read the same
state without importing the engine.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(slots=True)
class Lifecycle:
    """The instance's state. Owned by the event loop.

    Attributes:
        started_at: wall-clock time the instance was built.
        ready: recovery is done and clients are served.
        stopping: shutdown began: new connections and commands are refused.
        shutdown_reason: why a shutdown was asked for from inside (an action), or None.
        shutdown_hosts: what can stop the process (``spool serve`` registers uvicorn's
            graceful exit); an instance inside a test has none unless the test adds one.
    """

    started_at: float
    ready: bool = False
    stopping: bool = False
    shutdown_reason: str | None = None
    shutdown_hosts: list[Callable[[str], None]] = field(default_factory=list)

    def request_shutdown(self, reason: str) -> bool:
        """Ask the process to stop gracefully, as SIGTERM does.

        Returns:
            Whether something can act on it (a host is registered); the request is
            remembered either way.
        """
        self.shutdown_reason = reason
        for host in self.shutdown_hosts:
            host(reason)
        return bool(self.shutdown_hosts)
