"""Errors of the admin surface of the engine (not wire failures: they become 404/409 JSON).

Hierarchy::

    SpoolError
    └── AdminError            .name: what was asked for
        ├── ClientNotFound
        ├── TransportNotFound
        └── JournalNotFound
"""

from __future__ import annotations

from server.protocol.errors import SpoolError


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


class JournalNotFound(AdminError):
    what = "journal"
