"""The queues' part of the REST admin API: ``/api/queues`` (ADMIN_API.md).

- ``GET /api/queues``: every queue: depth, backlog (ready messages), leased, owned,
  transferred in/out, proxied transfer on/off, oldest lease age, consumers, counters.
- ``GET /api/queues/{name}``: one queue, with its first 50 leases.
- ``POST /api/queues/{name}/enable_proxied_transfer`` / ``disable_proxied_transfer``:
  409 with the reason: queues are not replicated in this version, so every message is
  owned by this instance (docs/queues.md); 404 for a queue that does not exist.

An instance without queues answers 404 "queues are not configured on this instance".
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Final

from starlette.requests import Request

from server.operations import Operations
from server.queues.errors import ProxiedTransferUnavailable, QueueNotFound
from web.api_errors import ApiError, Conflict, NotFound
from web.auth import auth_context
from web.openapi import Operation

__all__ = ["QueuesApi", "queue_error"]

NOT_CONFIGURED: Final = "queues are not configured on this instance"

Handler = Callable[[Request], Awaitable[Any]]


def queue_error(exc: Exception) -> ApiError | None:
    """The REST error for a queue exception (None: not one of the queues')."""
    if isinstance(exc, QueueNotFound):
        return NotFound(str(exc))
    if isinstance(exc, ProxiedTransferUnavailable):
        return Conflict(str(exc))
    return None


class QueuesApi:
    """Handlers of the queue endpoints for one broker."""

    def __init__(self, ops: Operations) -> None:
        self.ops = ops

    def _require(self) -> None:
        if not self.ops.has_queues:
            raise NotFound(NOT_CONFIGURED)

    async def queues(self, request: Request) -> Any:
        self._require()
        return {"queues": self.ops.queue_infos()}

    async def queue(self, request: Request) -> Any:
        self._require()
        return self.ops.queue_info(request.path_params["name"])

    def _switch(self, enabled: bool) -> Handler:
        async def handler(request: Request) -> Any:
            self._require()
            taken = self.ops.set_proxied_transfer(
                request.path_params["name"], enabled, auth_context(request).actor
            )
            return {"ok": True, "taken_over": taken}

        return handler

    def operations(self) -> list[tuple[Operation, Handler]]:
        """The table rows (web/admin.py wraps them)."""
        return [
            (
                Operation(
                    "GET",
                    "/api/queues",
                    "Queues: depth, backlog, leases, ownership",
                    "queues",
                    errors=(404,),
                ),
                self.queues,
            ),
            (
                Operation(
                    "GET",
                    "/api/queues/{name}",
                    "One queue and its first leases",
                    "queues",
                    errors=(404,),
                ),
                self.queue,
            ),
            *(
                (
                    Operation(
                        "POST",
                        f"/api/queues/{{name}}/{verb}",
                        verb.replace("_", " ").capitalize(),
                        "queues",
                        description="409 while queues are not replicated (docs/queues.md)",
                        errors=(404, 409),
                        access="admin",
                    ),
                    self._switch(verb.startswith("enable")),
                )
                for verb in ("enable_proxied_transfer", "disable_proxied_transfer")
            ),
        ]
