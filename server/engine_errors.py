"""Errors of the admin surface of the engine (not wire failures: they become 404/409 JSON).

Hierarchy::

    SpoolError
    └── AdminError            .name: what was asked for
        ├── ClientNotFound
        ├── TransportNotFound
        ├── PinNotFound       no retention pin taken over the admin API has that owner
        └── NoTransactionLog  the instance records nothing (no TransactionLog configured)
    StatsUnavailable              the statistics database is not open
    TlsNotConfigured              a TLS action on a listener without TLS
    PublishRefused                the broker's own publish was refused (.reason, .detail)

A journal that does not exist is :class:`spool.server.txlog.errors.JournalNotFound` (the log's
own error; the admin API maps both families to 404).
"""

from __future__ import annotations

from spool.server.protocol.errors import SpoolError


class AdminError(SpoolError):
    """An admin action named something that does not exist."""

    what = "object"

    def __init__(self, name: str) -> None:
        super().__init__(f"no {self.what} named {name!r}")
        self.name = name


class ClientNotFound(AdminError):
    what = "client"


class TransportNotFound(AdminError):
    what = "transport"


class PinNotFound(AdminError):
    what = "retention pin"


class NoTransactionLog(AdminError):
    """The instance has no transaction log, so nothing to pin."""

    what = "transaction log"

    def __init__(self) -> None:
        super().__init__("(not configured)")


class DelayedNotConfigured(SpoolError):
    """A read of the delayed messages on an instance without a transaction log (404)."""

    def __init__(self) -> None:
        super().__init__("delayed delivery needs a transaction log on this instance")


class StatsUnavailable(SpoolError):
    """The statistics database is not open (before start, or after stop)."""


class TlsNotConfigured(SpoolError):
    """A TLS action (reload) on an instance whose listener has no TLS (404)."""


class PublishRefused(SpoolError):
    """A message the broker itself published was refused by the publish pipeline.

    Attributes:
        reason: the docs/protocol.md failure reason (``invalid topic``, ``txlog full``...).
        detail: the explanation.
    """

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail
