"""Delayed delivery's part of the REST admin API: ``/api/delayed`` (docs/admin-api.md).

- ``GET /api/delayed``: the pending delayed messages (publishes with ``deliver_at`` /
  ``deliver_after`` not due yet) counted: in all, the next due time, per topic, and how
  many were delivered since the start. The totals are the instance's, every topic's
  messages counted, as ``GET /api/transaction_log`` counts every record (counts and a
  time, no message data); the per-topic list has only the topics the user may read, as
  ``GET /api/queues`` has only their queues.
- ``GET /api/delayed/messages``: a page of them in due order (cursor ``after``, written
  ``DUE_US:SEQ``; ``limit``), without bodies. Admin only, and the messages of a topic
  the user may not read are left out: their bookmarks say which messages exist.

Delayed delivery needs a transaction log: an instance without one answers 404 "delayed
delivery needs a transaction log on this instance".
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Final

from starlette.requests import Request

from spool.server.operations import Operations
from spool.web.api_errors import BadRequest
from spool.web.auth import require_admin
from spool.web.entitlements import read_check
from spool.web.openapi import Operation, QueryParam
from spool.web.params import int_param

__all__ = ["DelayedApi", "parse_after"]

#: messages per page when ``limit`` is not given, and the most one page holds
PAGE_DEFAULT: Final = 100
PAGE_MAX: Final = 1000
#: the largest due time or seq a cursor may name (the log's are 63-bit)
_CURSOR_MAX: Final = (1 << 63) - 1

Handler = Callable[[Request], Awaitable[Any]]


def parse_after(text: str | None) -> tuple[int, int] | None:
    """The cursor ``DUE_US:SEQ`` (the ``next_after`` of a page) as ``(due_us, seq)``;
    None when absent or empty (from the first message).

    Raises:
        BadRequest: not two non-negative integers joined by ``:``.
    """
    if not text:
        return None
    due, sep, seq = text.partition(":")
    if (
        sep
        and due.isascii() and due.isdigit() and seq.isascii() and seq.isdigit()
        and int(due) <= _CURSOR_MAX and int(seq) <= _CURSOR_MAX
    ):  # fmt: skip
        return int(due), int(seq)
    raise BadRequest(
        f"after must be DUE_US:SEQ, two non-negative integers (the next_after of the "
        f"previous page), got {text!r}"
    )


class DelayedApi:
    """Handlers of the delayed-delivery endpoints for one broker."""

    def __init__(self, ops: Operations) -> None:
        self.ops = ops

    async def summary(self, request: Request) -> Any:
        info = self.ops.delayed_info()
        readable = read_check(request, self.ops.auth)
        return {**info, "topics": [t for t in info["topics"] if readable(t["topic"])]}

    async def messages(self, request: Request) -> Any:
        context = require_admin(request)
        after = parse_after(request.query_params.get("after"))
        limit = int_param(request, "limit", PAGE_DEFAULT, 1, PAGE_MAX)
        return await self.ops.delayed_messages(after, limit, context.user)

    def operations(self) -> list[tuple[Operation, Handler]]:
        """The table rows (web/admin.py wraps them)."""
        return [
            (
                Operation(
                    "GET",
                    "/api/delayed",
                    "Delayed messages not due yet: how many, the next due time, per topic",
                    "delayed",
                    description=(
                        "Publishes with `deliver_at` / `deliver_after` stored and not "
                        "delivered yet: `pending`, `next_due` (ISO-8601 UTC) and "
                        "`next_due_us` (epoch microseconds; null: none pending), "
                        "`delivered` since the start, `waiting` (true while deliveries "
                        "wait to be tried again: the log refused the due records, or a "
                        "record is fenced) and `topics`: `{topic, pending}` per topic. "
                        "The totals count every topic's messages (counts, no message data); "
                        "`topics` lists only those the user may read. 404 without a "
                        "transaction log."
                    ),
                    errors=(404,),
                ),
                self.summary,
            ),
            (
                Operation(
                    "GET",
                    "/api/delayed/messages",
                    "A page of the pending delayed messages in due order (no bodies)",
                    "delayed",
                    description=(
                        "Messages after the cursor `after` (`DUE_US:SEQ`, the "
                        "`next_after` of the previous page; null on the last page), each "
                        "`due` (ISO-8601 UTC), `due_us`, `seq` (of its scheduled record), "
                        "`topic` and `bookmark`. Admin only; the messages of a topic the "
                        "user may not read are left out, so a page may hold fewer than "
                        "`limit` while `next_after` is not null. 404 without a "
                        "transaction log."
                    ),
                    errors=(400, 404),
                    access="admin",
                    query=(
                        QueryParam("after", "continue after this DUE_US:SEQ (next_after)"),
                        QueryParam(
                            "limit",
                            f"messages per page, 1..{PAGE_MAX}, default {PAGE_DEFAULT}",
                            type="integer",
                            minimum=1,
                            maximum=PAGE_MAX,
                        ),
                    ),
                ),
                self.messages,
            ),
        ]
