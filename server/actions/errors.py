"""Why an action cannot be run on demand (``POST /api/actions/NAME``).

Hierarchy::

    SpoolError
    └── ActionError            .action: the name asked for
        ├── ActionNotFound     no action has that name                      (REST 404)
        ├── NotOnAdmin         the action has no amps-action-on-admin trigger  (409)
        ├── BadParameters      a parameter is unknown, missing or does not match (400)
        └── ActionBusy         a run of the action is in progress              (409)

A run that starts but fails is not an exception: its record says so (outcome ``failed``).
"""

from __future__ import annotations

from spool.server.protocol.errors import SpoolError

__all__ = ["ActionBusy", "ActionError", "ActionNotFound", "BadParameters", "NotOnAdmin"]


class ActionError(SpoolError):
    """An action that cannot be run as asked."""

    def __init__(self, action: str, message: str) -> None:
        super().__init__(message)
        self.action = action


class ActionNotFound(ActionError):
    def __init__(self, action: str) -> None:
        super().__init__(action, f"no action named {action!r} is configured")


class NotOnAdmin(ActionError):
    def __init__(self, action: str, triggers: list[str]) -> None:
        super().__init__(
            action,
            f"action {action!r} runs on {', '.join(triggers)}, not on demand: give it an "
            "<On><Module>amps-action-on-admin</Module></On> to run it from the API",
        )


class BadParameters(ActionError):
    pass


class ActionBusy(ActionError):
    """A run of the action is in progress (a run never overlaps another of itself).

    Attributes:
        started: when the run in progress started (epoch seconds).
    """

    def __init__(self, action: str, started: float, since: str) -> None:
        super().__init__(action, f"action {action!r} is running (since {since})")
        self.started = started
