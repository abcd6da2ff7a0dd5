"""Where an instance is in its life: starting, serving, stopping.

One small shared object instead of flags on the broker, so the parts that refuse work while
the instance stops (the dispatcher, the client registry, the transports) read the same
state without importing the engine.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class Lifecycle:
    """The instance's state. Owned by the event loop.

    Attributes:
        started_at: wall-clock time the instance was built.
        ready: recovery is done and clients are served.
        stopping: shutdown began: new connections and commands are refused.
    """

    started_at: float
    ready: bool = False
    stopping: bool = False
