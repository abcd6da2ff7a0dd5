"""Frame and header codec of PROTOCOL.md ("Transport and framing"), sans-I/O.

A WebSocket frame carries one or more messages. A message is a compact JSON header object
immediately followed by its body::

    {"c":"publish","t":"orders","l":23}{"id":1,"qty":10,"p":1}

``l`` is the body length in bytes; when it is absent the body runs to the end of the frame
(so only the last message of a frame may omit it).

Headers hold only scalar values (strings, numbers, booleans), so the end of a header is the
first ``}`` outside a string. A compiled regular expression finds it in C, in linear time,
whatever the body contains; orjson then decodes exactly that slice.

Nothing here does I/O: :func:`parse_frame` takes bytes and returns messages plus, at most,
one error (the messages before a malformed one are still delivered, as a stream parser
would), and the ``encode_*`` helpers return bytes for the caller to send.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Final

import orjson

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

#: the largest header we accept; a header is a few hundred bytes in practice.
MAX_HEADER_BYTES: Final = 64 * 1024

# A JSON object whose values contain no nested objects: everything up to the first "}" that
# is not inside a string. Arrays of scalars are allowed (they contain no braces).
_HEADER_RE: Final = re.compile(rb'\{(?:[^"{}]|"(?:[^"\\]|\\.)*")*\}', re.DOTALL)


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


def _normalize(header: dict[str, Any]) -> dict[str, Any]:
    if _LONG.isdisjoint(header):  # the usual case, tested in C
        return header
    out: dict[str, Any] = {}
    for key, value in header.items():
        short = LONG_KEYS.get(key, key)
        if short in out and short != key:
            # both forms given: the short one wins (it is the canonical one)
            continue
        out[short] = value
    return out


_LONG: Final = frozenset(LONG_KEYS)


def _cid_of(header: dict[str, Any]) -> str | None:
    cid = header.get("cid", header.get("command_id"))
    if isinstance(cid, str):
        return cid
    if isinstance(cid, int) and not isinstance(cid, bool):
        return str(cid)
    return None


def parse_frame(data: bytes) -> ParsedFrame:
    """Split a frame into messages.

    Never raises: a malformed message ends parsing and is reported in ``error`` (with its
    ``cid`` when the header could be read); the messages before it are returned.
    """
    messages: list[Message] = []
    pos = 0
    end_of_frame = len(data)
    if end_of_frame == 0:
        return ParsedFrame(messages, FrameError("empty frame"))
    match = _HEADER_RE.match
    loads = orjson.loads
    find = data.find
    decode_error = orjson.JSONDecodeError
    while pos < end_of_frame:
        # Fast path: the slice up to the first "}" is the header whenever it decodes (a
        # "}" inside a string, or a nested object, leaves an invalid slice); otherwise the
        # regex finds the first "}" outside strings.
        header = None
        if data[pos] == 0x7B:  # "{"
            hend = find(b"}", pos) + 1
            if 0 < hend <= pos + MAX_HEADER_BYTES:
                try:
                    header = loads(data[pos:hend])
                except decode_error:
                    header = None
        if header is None:
            m = match(data, pos, min(end_of_frame, pos + MAX_HEADER_BYTES))
            if m is None:
                if data[pos : pos + 1] != b"{":
                    return ParsedFrame(
                        messages, FrameError(f"expected a JSON header at byte {pos}")
                    )
                return ParsedFrame(
                    messages, FrameError(f"unterminated or nested JSON header at byte {pos}")
                )
            hend = m.end()
            try:
                header = loads(data[pos:hend])
            except decode_error as exc:
                return ParsedFrame(messages, FrameError(f"header is not JSON: {exc}"))
        if type(header) is not dict:
            return ParsedFrame(messages, FrameError("header is not a JSON object"))
        if not _LONG.isdisjoint(header):
            header = _normalize(header)
        length = header.get("l")
        if length is None:
            body = data[hend:]
            pos = end_of_frame
        else:
            if type(length) is not int or length < 0:
                return ParsedFrame(
                    messages,
                    FrameError("'l' must be a non-negative integer", _cid_of(header)),
                )
            bend = hend + length
            if bend > end_of_frame:
                return ParsedFrame(
                    messages,
                    FrameError(
                        f"'l' is {length} but only {end_of_frame - hend} body bytes follow",
                        _cid_of(header),
                    ),
                )
            body = data[hend:bend]
            pos = bend
        messages.append(Message(header, body))
    return ParsedFrame(messages)


def encode_message(header: dict[str, Any], body: bytes = b"", *, with_length: bool = True) -> bytes:
    """Encode one message. ``l`` is set from the body unless ``with_length`` is false."""
    if with_length:
        header = {**header, "l": len(body)}
    return orjson.dumps(header) + body


def encode_frame(messages: list[tuple[dict[str, Any], bytes]]) -> bytes:
    """Encode several messages into one frame (every message carries ``l``)."""
    return b"".join(encode_message(h, b) for h, b in messages)


def json_str(value: str) -> bytes:
    """A string as a JSON literal (with quotes), for hand-built hot-path headers."""
    return orjson.dumps(value)
