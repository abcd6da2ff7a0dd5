"""The structured events the transaction log reports, and the callback that receives them.

The log calls ``on_event(name, fields)`` on the event loop; the broker turns them into its
event log. A failing callback is logged and never stops the log (:class:`Emitter`). The
events and their fields are listed in docs/transaction-log.md "Events, statistics".
"""

from __future__ import annotations

import logging
from collections.abc import Callable

__all__ = ["Emitter", "EventCallback"]

log = logging.getLogger("spool.txlog")

EventCallback = Callable[[str, dict[str, object]], None]


class Emitter:
    """Calls the log's ``on_event`` callback, if any, and contains its failures."""

    __slots__ = ("_callback",)

    def __init__(self, callback: EventCallback | None) -> None:
        self._callback = callback

    def __call__(self, name: str, fields: dict[str, object]) -> None:
        if self._callback is not None:
            try:
                self._callback(name, fields)
            except Exception:
                log.exception("transaction log event callback failed")
