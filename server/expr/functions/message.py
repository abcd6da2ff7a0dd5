"""Message functions: ``TOPIC``, ``BOOKMARK``, ``TIMESTAMP``, ``CLIENT_NAME``.

They read the :class:`~spool.server.expr.view.MessageView` being filtered instead of arguments,
so they are never folded, and callers check :attr:`Filter.functions
<spool.server.expr.compiled.Filter.functions>` to prepare only the metadata a filter reads.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from spool.server.expr.functions.function import Function

if TYPE_CHECKING:
    from spool.server.expr.view import MessageView


def _topic(view: MessageView) -> str:
    return view.topic


def _bookmark(view: MessageView) -> str:
    return view.bookmark


def _timestamp(view: MessageView) -> str:
    return view.timestamp


def _client_name(view: MessageView) -> str:
    return view.client_name


MESSAGE_FUNCTIONS: Final[tuple[Function, ...]] = (
    Function("TOPIC", 0, 0, _topic, kind="message", summary="topic of the message"),
    Function("BOOKMARK", 0, 0, _bookmark, kind="message", summary="bookmark of the message"),
    Function(
        "TIMESTAMP", 0, 0, _timestamp, kind="message", summary="time the message was recorded"
    ),
    Function("CLIENT_NAME", 0, 0, _client_name, kind="message", summary="name of the publisher"),
)
"""The message functions, in the order docs/filters.md lists them."""
