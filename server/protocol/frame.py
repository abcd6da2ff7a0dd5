"""Frame and header codec of docs/protocol.md ("Transport and framing"), sans-I/O.

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

:func:`parse_frame_py` and :func:`encode_publishes_py` are the definitions and the oracles
of their compiled twins in ``_frame_c.pyx`` (:mod:`spool.server.speedups`); :func:`parse_frame`
and :func:`encode_publishes` are the ones selected at import. The values they return live
in :mod:`spool.server.protocol.message`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Final

import orjson

from spool.server import speedups
from spool.server.protocol.message import (
    LONG,
    LONG_KEYS,
    MAX_HEADER_BYTES,
    FrameError,
    Message,
    ParsedFrame,
    cid_of,
    normalize,
)

__all__ = [
    "LONG_KEYS",
    "MAX_HEADER_BYTES",
    "FrameError",
    "Message",
    "ParsedFrame",
    "encode_frame",
    "encode_message",
    "encode_publishes",
    "encode_publishes_py",
    "json_str",
    "parse_frame",
    "parse_frame_py",
]

# A JSON object whose values contain no nested objects: everything up to the first "}" that
# is not inside a string. Arrays of scalars are allowed (they contain no braces).
_HEADER_RE: Final = re.compile(rb'\{(?:[^"{}]|"(?:[^"\\]|\\.)*")*\}', re.DOTALL)


def parse_frame_py(data: bytes) -> ParsedFrame:
    """Split a frame into messages (the pure-Python implementation and the oracle).

    Never raises: a malformed message ends parsing and is reported in ``error`` (with its
    ``cid`` when the header could be read); the messages before it are returned. Bodies
    are ``bytes`` whatever bytes-like object the frame is.
    """
    if type(data) is not bytes:
        data = bytes(data)
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
        if not LONG.isdisjoint(header):
            header = normalize(header)
        length = header.get("l")
        if length is None:
            body = data[hend:]
            pos = end_of_frame
        else:
            if type(length) is not int or length < 0:
                return ParsedFrame(
                    messages,
                    FrameError("'l' must be a non-negative integer", cid_of(header)),
                )
            bend = hend + length
            if bend > end_of_frame:
                return ParsedFrame(
                    messages,
                    FrameError(
                        f"'l' is {length} but only {end_of_frame - hend} body bytes follow",
                        cid_of(header),
                    ),
                )
            body = data[hend:bend]
            pos = bend
        messages.append(Message(header, body))
    return ParsedFrame(messages)


parse_frame: Callable[[bytes], ParsedFrame] = parse_frame_py
if speedups.ENABLED:
    try:
        from spool.server.protocol._frame_c import parse_frame as _parse_frame_c
    except ImportError:  # not built: speedups.status() says why
        pass
    else:
        parse_frame = _parse_frame_c


def encode_publishes_py(head: bytes, first_seq: int, mid: bytes, bodies: list[bytes]) -> bytes:
    """``head + seq + mid + len(body) + "}" + body`` per body, ``seq`` counting up from
    ``first_seq``: a batch of publishes whose headers differ only in those numbers (the
    clients' publish path; ``head`` ends with ``"s":`` and ``mid`` with ``"l":``)."""
    return b"".join(
        [b"%s%d%s%d}%s" % (head, first_seq + i, mid, len(b), b) for i, b in enumerate(bodies)]
    )


encode_publishes: Callable[[bytes, int, bytes, list[bytes]], bytes] = encode_publishes_py
if speedups.ENABLED:
    try:
        from spool.server.protocol._frame_c import encode_publishes as _encode_publishes_c
    except ImportError:  # not built: speedups.status() says why
        pass
    else:
        encode_publishes = _encode_publishes_c


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
