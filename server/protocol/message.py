"""The values of the frame codec (docs/protocol.md "Transport and framing"), sans-I/O.

:class:`Message`, :class:`ParsedFrame` and :class:`FrameError` are what
:func:`spool.server.protocol.frame.parse_frame` returns. They live in their own module because
the frame splitter exists twice (pure Python in ``frame.py``, compiled in ``_frame_c.pyx``,
see :mod:`spool.server.speedups`) and both must build exactly these objects; so do the header
rules they share (long keys, the largest header, where a failure ack's ``cid`` comes from).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

import orjson

from spool.server.protocol.errors import InvalidMessage

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
    "SIDS_CACHE_LIMIT",
    "Delivery",
    "FrameError",
    "Message",
    "ParsedFrame",
    "cid_of",
    "delivery_of",
    "normalize",
    "sub_ids_of",
]


#: most distinct ``sids`` values whose split is kept (a client has a few subscriptions).
SIDS_CACHE_LIMIT: Final = 1024
_sids_cache: dict[str, tuple[str, ...]] = {}


def sub_ids_of(sids: str) -> tuple[str, ...]:
    """The subscription ids of a delivery's ``sids`` (split once per distinct value)."""
    ids = _sids_cache.get(sids)
    if ids is None:
        ids = tuple(sids.split(","))
        if len(_sids_cache) < SIDS_CACHE_LIMIT:
            _sids_cache[sids] = ids
    return ids


class Delivery:
    """A ``publish`` message as a client receives it: the fields it needs, read once.

    The client-side value of a delivered message (``spool.server.client`` names it
    ``Message``). The frame splitters for clients (:func:`spool.server.protocol.delivery.
    split_deliveries`) build it straight from the bytes for the broker's own header
    layout, so the full header dict is built only if someone asks for :attr:`header`,
    and the body is decoded as JSON only by :meth:`json`, once.

    The compiled splitter hands deliveries over untracked by the cycle collector (they
    hold only strings, bytes and a tuple of strings, like the tuples CPython untracks
    itself), so a subscription buffering a replay costs the collector nothing. Do not
    store a message inside its own :meth:`json` value or :attr:`header` (a cycle through
    an untracked object is never collected).

    Attributes:
        topic: the topic it was published to.
        data: the body, byte for byte as published.
        sub_ids: the ids of the subscriptions it matched (one message may serve several).
        bookmark: its bookmark (``PUBHASH|PUBSEQ|``) on recorded topics.
        timestamp: when it was recorded, if the subscription asked for ``timestamp``.
        correlation_id: the publisher's tag, passed through untouched.
    """

    __slots__ = (
        "_header", "_json", "bookmark", "correlation_id", "data", "sub_ids", "timestamp",
        "topic",
    )  # fmt: skip

    def __init__(
        self,
        topic: str,
        data: bytes,
        sub_ids: tuple[str, ...],
        bookmark: str | None = None,
        timestamp: str | None = None,
        correlation_id: str | None = None,
        header: dict[str, Any] | None = None,
    ) -> None:
        self.topic = topic
        self.data = data
        self.sub_ids = sub_ids
        self.bookmark = bookmark
        self.timestamp = timestamp
        self.correlation_id = correlation_id
        self._header = header
        self._json: Any = _UNSET

    @property
    def header(self) -> dict[str, Any]:
        """The whole header, short keys (rebuilt on first use when it was not kept: the
        fast splitters take only the broker's layout, whose header the fields give back)."""
        h = self._header
        if h is None:
            h = {"c": "publish", "t": self.topic, "sids": ",".join(self.sub_ids)}
            if self.bookmark is not None:
                h["bm"] = self.bookmark
            if self.timestamp is not None:
                h["ts"] = self.timestamp
            if self.correlation_id is not None:
                h["x"] = self.correlation_id
            h["l"] = len(self.data)
            self._header = h
        return h

    @property
    def command(self) -> str:
        """``publish`` (a delivery), ``sow`` (a SOW query record) or ``oof`` (the record
        left the subscription's focus). The fast splitters keep no header only for the
        plain ``publish`` layout."""
        h = self._header
        return "publish" if h is None else str(h.get("c", "publish"))

    @property
    def key(self) -> str | None:
        """The record's SOW key (``k``), on SOW topics."""
        h = self._header
        return None if h is None else h.get("k")

    @property
    def reason(self) -> str | None:
        """Why an ``oof`` was sent (``match``, ``deleted``, ``expired``, ``entitlement``)."""
        h = self._header
        return None if h is None else h.get("reason")

    def json(self) -> Any:
        """The body decoded as JSON (decoded on the first call, then kept)."""
        value = self._json
        if value is _UNSET:
            value = self._json = orjson.loads(self.data)
        return value

    def _key(self) -> tuple[Any, ...]:
        return (self.topic, self.data, self.sub_ids, self.bookmark, self.timestamp,
                self.correlation_id, self.header)  # fmt: skip

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Delivery):
            return NotImplemented
        return self._key() == other._key()

    __hash__ = None  # type: ignore[assignment]  # mutable value, like a dataclass

    def __repr__(self) -> str:
        return (
            f"Message(topic={self.topic!r}, data={self.data!r}, sub_ids={self.sub_ids!r}, "
            f"bookmark={self.bookmark!r}, timestamp={self.timestamp!r}, "
            f"correlation_id={self.correlation_id!r})"
        )


_UNSET: Final[Any] = object()


def delivery_of(header: dict[str, Any], body: bytes) -> Delivery:
    """The :class:`Delivery` of a ``publish`` message with any header (the general rule;
    the fast splitters must agree with it)."""
    return Delivery(
        header.get("t", ""),
        body,
        sub_ids_of(str(header.get("sids", ""))),
        header.get("bm"),
        header.get("ts"),
        header.get("x"),
        header,
    )
