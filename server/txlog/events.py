"""The structured events the transaction log reports, and the callback that receives them.

The log calls ``on_event(name, fields)`` on the event loop; the broker turns them into its
event log. A failing callback is logged and never stops the log (:class:`Emitter`).

===========================  ===========================================================
name                         fields
===========================  ===========================================================
``recovery_truncated``       ``path``, ``offset``, ``bytes_cut``, ``reason``, ``first_seq_cut``,
                             ``saved_to`` (open found damaged or torn bytes and cut them)
``recovery_lost_unnamed``    a fence's fields (durable records lost from the end of the log
                             that nothing names: their seqs are held, released)
``journal_rolled``           ``journal``, ``path``, ``records``, ``bytes``, ``next``
``flush_failed``             ``path``, ``operation``, ``error``, ``durable_seq``, ``last_seq``,
                             ``retry_in_s`` (a write outage began: appends are refused and the
                             write is retried; once per outage, not at every retry)
``writes_resumed``           ``down_s``, ``retries``, ``records`` (written by the retry that
                             worked), ``durable_seq``, ``error`` (the outage's last failure)
``unwritten_at_close``       ``records``, ``first_seq``, ``last_seq``, ``error`` (closed during an
                             outage: those records, never acknowledged, are lost)
``preallocation_failed``     ``wanted``, ``ready``, ``error`` (a journal file could not be
                             allocated: the log writes without it; once per shortfall)
``preallocation_restored``   ``ready`` (the preallocated files are all there again)
``cache_write_failed``       ``problem`` (an index or ``clients.ack`` could not be written; all
                             are rebuildable)
``journal_archived``         ``journal``, ``path``
``journal_compressed``       ``journal``, ``path``, ``bytes``
``journal_removed``          ``journal``, ``path``
``journal_damaged``          a :class:`~spool.server.txlog.damage.DamagedRange` (``journal``,
                             ``path``, ``offset``, ``end``, ``first_seq``, ``last_seq``,
                             ``records``, ``reason``, ``found_by``, ``found_us``): records a
                             check found damaged; once per range
``index_damaged``            ``journal``, ``path`` (an index file failed its own CRC)
``index_rebuilt``            ``journal``, ``path`` (written again from its journal)
``own_floor_failed``         ``floor``, ``error`` (the own identity's skipped highest could not
                             be written: server/txlog/ownfloor.py)
===========================  ===========================================================
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
