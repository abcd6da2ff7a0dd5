"""The values of the frame codec (PROTOCOL.md "Transport and framing"), sans-I/O.

:class:`Message`, :class:`ParsedFrame` and :class:`FrameError` are what
:func:`server.protocol.frame.parse_frame` returns. They live in their own module because
the frame splitter exists twice (pure Python in ``frame.py``, compiled in ``_frame_c.pyx``,
see :mod:`server.speedups`) and both must build exactly these objects; so do the header
rules they share (long keys, the largest header, where a failure ack's ``cid`` comes from).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from server.protocol.errors import InvalidMessage

#: long header keys accepted on input, mapped to the short keys used everywhere inside.
LONG_KEYS: Final[dict[str, str]] = {
    "command": "c",
    "command_id": "cid",
    "topic": "t",
    "query_id": "qid",
    "bookmark": "bm",
    "options": "o",
    "filter": "f",
    "ack_type": "a",
    "seq": "s",
    "timestamp": "ts",
    "sow_key": "k",
    "correlation_id": "x",
    "msg_len": "l",
    "lease_period": "lp",
    "expiration": "e",
    "heartbeat": "hb",
}

#: the long keys as a set (``isdisjoint`` with a header is tested in C).
LONG: Final = frozenset(LONG_KEYS)

#: the largest header we accept; a header is a few hundred bytes in practice.
MAX_HEADER_BYTES: Final = 64 * 1024


class FrameError(InvalidMessage):
    """A frame that cannot be decoded.

    Attributes:
        cid: the command id of the offending message when it could be read, so the session
            can answer with a failure ack instead of closing the connection.
    """

    def __init__(self, detail: str, cid: str | None = None) -> None:
        super().__init__(detail)
        self.cid = cid


@dataclass(slots=True)
class Message:
    """One decoded message: header with short keys, and the body bytes (never decoded here)."""

    header: dict[str, Any]
    body: bytes


@dataclass(slots=True)
class ParsedFrame:
    """The result of parsing one frame: the good messages, then at most one error."""

    messages: list[Message]
    error: FrameError | None = None


def normalize(header: dict[str, Any]) -> dict[str, Any]:
    """``header`` with long keys replaced by short ones (the short one wins when both
    are given: it is the canonical form)."""
    if LONG.isdisjoint(header):  # the usual case, tested in C
        return header
    out: dict[str, Any] = {}
    for key, value in header.items():
        short = LONG_KEYS.get(key, key)
        if short in out and short != key:
            continue
        out[short] = value
    return out


def cid_of(header: dict[str, Any]) -> str | None:
    """The command id of a header that failed, for the failure ack (None if unreadable)."""
    cid = header.get("cid", header.get("command_id"))
    if isinstance(cid, str):
        return cid
    if isinstance(cid, int) and not isinstance(cid, bool):
        return str(cid)
    return None


__all__ = [
    "LONG",
    "LONG_KEYS",
    "MAX_HEADER_BYTES",
    "FrameError",
    "Message",
    "ParsedFrame",
    "cid_of",
    "normalize",
]
