"""The SOW's part of the REST admin API: ``/api/sow``, one topic's keys, compaction.

Kept out of web/admin.py (which holds the table and the other subsystems) so that each
module stays one noun; web/admin.py adds these rows to its table, so routes, auth, the
event-log entry of the action and ``/api/openapi.json`` come from the same place.

- ``GET /api/sow``: every SOW topic with a store (``server/sow/admin.py`` shapes) that
  the user may read.
- ``GET /api/sow/{topic}``: one topic and a page of its keys (``after``, ``limit``);
  a topic name may contain ``/`` (the parameter takes the rest of the path). Keys are
  values from message bodies: a user without a ``Read`` entitlement for the topic is
  refused (403, before the topic is looked up: web/entitlements.py).
- ``POST /api/sow/{topic}/compact``: rewrite a persistent topic's file now.

An instance without ``SOW/Topic`` rules answers 404 "the SOW is not configured on this
instance" (never an empty list that would look like a SOW with no topics). A topic that
keeps no records is 404; compacting a transient topic (it has no file) is 409.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Final

from starlette.requests import Request

from spool.server.operations import Operations
from spool.server.protocol.errors import InvalidTopic
from spool.server.sow.errors import SowTopicNotFound
from spool.web.api_errors import ApiError, BadRequest, Conflict, NotFound
from spool.web.entitlements import read_check, require_read
from spool.web.openapi import Operation, QueryParam

__all__ = ["KEYS_MAX", "SowApi", "sow_error"]

#: largest page of keys one request returns
KEYS_MAX: Final = 10_000
KEYS_DEFAULT: Final = 1_000
NOT_CONFIGURED: Final = "the SOW is not configured on this instance"

Handler = Callable[[Request], Awaitable[Any]]


def sow_error(exc: Exception) -> ApiError | None:
    """The REST error for a SOW exception (None: not one of the SOW's)."""
    if isinstance(exc, SowTopicNotFound):
        return NotFound(str(exc))
    if isinstance(exc, InvalidTopic):
        # a transient topic: nothing to compact, the state does not allow the action
        return Conflict(exc.detail or exc.reason)
    return None


class SowApi:
    """Handlers of the SOW endpoints for one broker."""

    def __init__(self, ops: Operations) -> None:
        self.ops = ops

    def _require_sow(self) -> None:
        if not self.ops.config.sow:
            raise NotFound(NOT_CONFIGURED)

    async def topics(self, request: Request) -> Any:
        self._require_sow()
        readable = read_check(request, self.ops.auth)
        return {"topics": [t for t in self.ops.sow_topics() if readable(t["topic"])]}

    async def topic(self, request: Request) -> Any:
        self._require_sow()
        topic = request.path_params["topic"]
        require_read(request, self.ops.auth, topic)
        limit = _limit(request)
        after = request.query_params.get("after")
        info = self.ops.sow_topic(topic)
        page = self.ops.sow_keys(topic, after=after, limit=limit)
        return {**info, "keys": page["keys"], "next_after": page["next_after"]}

    async def compact(self, request: Request) -> Any:
        self._require_sow()
        result = await self.ops.compact_sow(request.path_params["topic"])
        return {"ok": True, **result}

    def operations(self) -> list[tuple[Operation, Handler]]:
        """The table rows (web/admin.py wraps them). The compact route comes before the
        topic route: both take the rest of the path, and ``.../compact`` must reach the
        action."""
        return [
            (
                Operation(
                    "GET",
                    "/api/sow",
                    "SOW topics: records, bytes, key paths, file, last compaction",
                    "sow",
                    errors=(404,),
                ),
                self.topics,
            ),
            (
                Operation(
                    "POST",
                    "/api/sow/{topic:path}/compact",
                    "Compact a persistent SOW topic's file",
                    "sow",
                    description=(
                        "Rewrites the file with one entry per record (the old file is kept "
                        "when the rewrite fails). 409 for a transient topic (no file)."
                    ),
                    errors=(404, 409),
                    access="admin",
                ),
                self.compact,
            ),
            (
                Operation(
                    "GET",
                    "/api/sow/{topic:path}",
                    "One SOW topic and a page of its keys, in store order",
                    "sow",
                    description=(
                        "Keys are values taken from message bodies: 403 for a user "
                        "without a Read entitlement for the topic."
                    ),
                    errors=(400, 403, 404),
                    query=(
                        QueryParam("after", "start after this key (next_after of a page)"),
                        QueryParam(
                            "limit",
                            f"keys per page, 1..{KEYS_MAX}, default {KEYS_DEFAULT}",
                            type="integer",
                        ),
                    ),
                ),
                self.topic,
            ),
        ]


def _limit(request: Request) -> int:
    text = request.query_params.get("limit")
    if text is None or text == "":
        return KEYS_DEFAULT
    if not text.isascii() or not text.isdigit():
        raise BadRequest(f"limit must be an integer between 1 and {KEYS_MAX}, got {text!r}")
    value = int(text)
    if not 1 <= value <= KEYS_MAX:
        raise BadRequest(f"limit must be between 1 and {KEYS_MAX}")
    return value
