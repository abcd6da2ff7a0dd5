"""Errors of the SOW that are not wire failures.

Wire failures (a message without its key, a query with a bad ``orderby``...) are the
classes of :mod:`spool.server.protocol.errors`, with the detail saying what was wrong; this
module holds what the SOW raises about its admin surface::

    SpoolError
    └── SowError                    root of this module
        └── SowTopicNotFound        an admin action named a topic that keeps no records
"""

from __future__ import annotations

from spool.server.protocol.errors import SpoolError


class SowError(SpoolError):
    """Root of the SOW's own errors."""


class SowTopicNotFound(SowError):
    """An admin action named a topic that keeps no records (404 on REST)."""

    def __init__(self, topic: str) -> None:
        super().__init__(f"no SOW topic named {topic!r}")
        self.topic = topic
