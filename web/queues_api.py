"""The queues' part of the REST admin API: ``/api/queues`` (docs/admin-api.md).

- ``GET /api/queues``: every queue the user may read: depth, backlog (ready messages),
  leased, owned, transferred in/out, proxied transfer on/off, oldest lease age,
  consumers, counters.
- ``GET /api/queues/{name}``: one queue, with its first 50 leases (403 for a user who may
  not read the queue: web/entitlements.py).
- ``GET /api/queues/{name}/messages``: a page of its messages (cursor ``after``,
  ``limit``) with why each is not being delivered (server/queues/browse.py). Admin only,
  and the user must be entitled to read the queue: it shows message data.
- ``POST /api/queues/release_hold``: end the resync hold (docs/queues.md "Held after a
  loss"): ``{"ok": true, "released": N}``.
- ``GET /api/queues/{name}/dead_letters``: its dead letters (``filter``, ``limit``,
  ``redriven``), with what happened and the start of each message; admin, and the user
  must read the dead-letter topic.
- ``POST /api/queues/{name}/redrive``: send back dead letters (``filter``, ``limit``,
  ``target``); admin, and the user must read the dead-letter topic and write the target.
- ``POST /api/queues/{name}/enable_proxied_transfer`` / ``disable_proxied_transfer``:
  409 with the reason: queues are not replicated in this version, so every message is
  owned by this instance (docs/queues.md); 404 for a queue that does not exist.

An instance without queues answers 404 "queues are not configured on this instance".
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Final

from starlette.requests import Request

from spool.server.config.model import REDRIVE_MAX
from spool.server.operations import Operations
from spool.server.protocol.errors import BadFilter
from spool.server.protocol.topic import is_regex_topic
from spool.server.queues.browse import BROWSE_MAX
from spool.server.queues.errors import ProxiedTransferUnavailable, QueueNotEntitled, QueueNotFound
from spool.server.queues.redrive import RedriveFailed, RedriveRefused
from spool.web.api_errors import ApiError, BadRequest, Conflict, Forbidden, NotFound, NotReady
from spool.web.auth import auth_context, require_admin
from spool.web.entitlements import read_check, require_read
from spool.web.openapi import Operation, QueryParam
from spool.web.params import int_param, json_body

__all__ = ["QueuesApi", "queue_error"]

NOT_CONFIGURED: Final = "queues are not configured on this instance"
#: messages per page of the message browser when ``limit`` is not given
BROWSE_DEFAULT: Final = 100

Handler = Callable[[Request], Awaitable[Any]]


def queue_error(exc: Exception) -> ApiError | None:
    """The REST error for a queue exception (None: not one of the queues')."""
    if isinstance(exc, QueueNotFound):
        return NotFound(str(exc))
    if isinstance(exc, ProxiedTransferUnavailable | RedriveRefused):
        return Conflict(str(exc))
    if isinstance(exc, RedriveFailed):
        return NotReady(str(exc))
    if isinstance(exc, BadFilter):
        return BadRequest(exc.detail or exc.reason)
    if isinstance(exc, QueueNotEntitled):
        return Forbidden(str(exc))
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
        readable = read_check(request, self.ops.auth)
        return {"queues": [q for q in self.ops.queue_infos() if readable(str(q["name"]))]}

    async def queue(self, request: Request) -> Any:
        self._require()
        name = request.path_params["name"]
        # its leases name messages (bookmarks) and who holds them: the queue's readers only
        require_read(request, self.ops.auth, name)
        return self.ops.queue_info(name)

    async def messages(self, request: Request) -> Any:
        self._require()
        context = require_admin(request)
        after = int_param(request, "after", 0, 0, 1 << 62)
        limit = int_param(request, "limit", BROWSE_DEFAULT, 1, BROWSE_MAX)
        return self.ops.queue_messages(request.path_params["name"], after, limit, context.user)

    async def dead_letters(self, request: Request) -> Any:
        self._require()
        context = require_admin(request)
        limit = int_param(request, "limit", 100, 1, REDRIVE_MAX)
        flt = request.query_params.get("filter") or None
        redriven = request.query_params.get("redriven", "false")
        if redriven not in ("true", "false"):
            raise BadRequest("redriven must be true or false")
        return await self.ops.dead_letters(
            request.path_params["name"], filter=flt, limit=limit, redriven=redriven == "true",
            user=context.user,
        )  # fmt: skip

    async def release_hold(self, request: Request) -> Any:
        self._require()
        freed = self.ops.release_queue_hold(auth_context(request).actor)
        return {"ok": True, "released": freed}

    async def redrive(self, request: Request) -> Any:
        self._require()
        context = require_admin(request)
        body = await json_body(request)
        unknown = sorted(set(body) - {"filter", "limit", "target"})
        if unknown:
            raise BadRequest(f"unknown field {unknown[0]!r}: the body is "
                             '{"filter": "...", "limit": N, "target": "topic"}')  # fmt: skip
        flt, limit, target = body.get("filter"), body.get("limit", 100), body.get("target")
        if flt is not None and not isinstance(flt, str):
            raise BadRequest("filter must be a string (a filter over the dead letters)")
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= REDRIVE_MAX:
            raise BadRequest(f"limit must be an integer from 1 to {REDRIVE_MAX}")
        if target is not None and (
            not isinstance(target, str) or not target or is_regex_topic(target)
        ):
            raise BadRequest("target must be a topic name (not a regular expression)")
        done = await self.ops.redrive_dead_letters(
            request.path_params["name"], filter=flt or None, limit=limit, target=target,
            user=context.user, by=context.actor,
        )  # fmt: skip
        return {"ok": True, **done}

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
                    "POST",
                    "/api/queues/release_hold",
                    "Stop waiting for replication sources to resend what this instance lost",
                    "queues",
                    description=(
                        "Ends the queues' resync hold (docs/queues.md \"Held after a "
                        'loss"): the messages held until every source resent what this '
                        "instance lost are delivered; one whose ack only a source not "
                        "heard from holds is delivered again (at least once). Answers "
                        "`released`: how many messages that freed (0: no such hold). "
                        "Fenced ranges are released with their fences."
                    ),
                    errors=(404,),
                    access="admin",
                ),
                self.release_hold,
            ),
            (
                Operation(
                    "GET",
                    "/api/queues/{name}",
                    "One queue and its first leases",
                    "queues",
                    description="403 for a user without a Read entitlement for the queue.",
                    errors=(403, 404),
                ),
                self.queue,
            ),
            (
                Operation(
                    "GET",
                    "/api/queues/{name}/messages",
                    "A page of the queue's messages, with why each is not being delivered",
                    "queues",
                    description=(
                        "Messages in log order after the cursor `after` (the `next_after` "
                        "of the previous page; null on the last page): bookmark, owner, "
                        "epoch, deliveries, lease holder and expiry, and `reason` / "
                        "`detail`: why it is not being delivered. Admin only; the user "
                        "must also be entitled to read the queue (403 otherwise)."
                    ),
                    errors=(400, 403, 404),
                    access="admin",
                    query=(
                        QueryParam("after", "continue after this seq (next_after)", type="integer"),
                        QueryParam(
                            "limit",
                            f"messages per page, 1..{BROWSE_MAX}, default {BROWSE_DEFAULT}",
                            type="integer",
                        ),
                    ),
                ),
                self.messages,
            ),
            (
                Operation(
                    "GET",
                    "/api/queues/{name}/dead_letters",
                    "A queue's dead letters: why each left the queue, and its message",
                    "queues",
                    description=(
                        "The dead letters of the queue that match `filter` (read as the "
                        "dead letter: `/dead_letter/reason = 'rejected'`, `/message/...`), at "
                        "most `limit`, in the dead-letter topic's SOW order; those sent back "
                        "already too with `redriven=true`. Each: the original `bookmark` and "
                        "`topic`, `reason`, `deliveries`, `cancels`, `consumer`, `instance`, "
                        "`enqueued`, `dead_lettered`, `detail`, `redriven` (null, or where "
                        "it went) and the first 256 bytes of the message (`data`, "
                        "`truncated`). Needs the dead-letter topic to be a SOW topic with a "
                        "key (409 otherwise). Admin; the user must read the dead-letter "
                        "topic (403)."
                    ),
                    errors=(400, 403, 404, 409),
                    access="admin",
                    query=(
                        QueryParam("filter", "a filter over the dead letters"),
                        QueryParam(
                            "limit",
                            f"at most this many, 1..{REDRIVE_MAX}, default 100",
                            type="integer",
                            minimum=1,
                            maximum=REDRIVE_MAX,
                        ),
                        QueryParam("redriven", "true: list those sent back already too"),
                    ),
                ),
                self.dead_letters,
            ),
            (
                Operation(
                    "POST",
                    "/api/queues/{name}/redrive",
                    "Send a queue's dead letters back to be worked again",
                    "queues",
                    description=(
                        'Body `{"filter", "limit", "target"}`, all optional: the dead '
                        "letters that match `filter` (read as the dead letter: "
                        "`/dead_letter/reason = 'rejected'`, `/message/...`), at most "
                        f"`limit` (default 100, at most {REDRIVE_MAX}), are published again "
                        "to `target` (default: each to its original topic) with their "
                        "original bookmark as correlation id, and marked `redriven` in the "
                        "dead-letter topic. Needs the dead-letter topic to be a SOW topic "
                        "with a key (409 otherwise). Admin; the user must read the "
                        "dead-letter topic (403) and write the target (409). At least once: "
                        'docs/queues.md "Redrive".'
                    ),
                    errors=(400, 403, 404, 409, 503),
                    access="admin",
                ),
                self.redrive,
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
