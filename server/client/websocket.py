"""The client side of RFC 6455, sans-I/O: the opening handshake and the frames a server sends.

Why not the ``websockets`` library's reader: it copies every received byte three times
before the client sees a message (the socket's chunk, appended to its buffer, sliced out
again) through a generator per frame, a large share of a replaying client's time
(docs/performance-log.md "The Python client reads into one buffer"). :class:`Inbound` owns
the one buffer the socket reads into (an asyncio ``BufferedProtocol`` asks it for room) and
slices each message out of it once. Outbound frames are still made by the library (``websockets.frames.Frame``:
client frames must be masked, and its C masking is the fast one).

Only what a Spool client needs is spoken: no extensions (permessage-deflate is off, it
costs more than it saves on the broker's frames), no subprotocol. Everything a server must
not send is a :class:`ProtocolViolation` with the close code RFC 6455 gives it.
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass
from typing import Final

from websockets.frames import Close, Frame, Opcode

__all__ = [
    "ACCEPT_GUID",
    "Closed",
    "Event",
    "HandshakeRejected",
    "Inbound",
    "Ping",
    "ProtocolViolation",
    "Violation",
    "WebSocketMessage",
    "accept_for",
    "encode_close",
    "encode_frame",
    "handshake_request",
    "parse_handshake_response",
    "refusal_text",
]

ACCEPT_GUID: Final = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
"""RFC 6455 section 1.3: the server proves it read the key by hashing it with this."""

MIN_BUFFER: Final = 256 * 1024
"""Room offered to each socket read: large reads are what makes a replay cheap (asyncio's
own transports read 256 KiB at most)."""

MAX_HEAD: Final = 16 * 1024
"""A handshake response whose head is longer than this is not a websocket server."""

MAX_REFUSAL_TEXT: Final = 200
"""How much of a refusal's body (an HTTP status other than 101) goes into its reason: the
broker says there what to do (the websocket paths it serves, for a wrong one)."""


class ProtocolViolation(Exception):
    """The server broke RFC 6455 (or sent a message over the size limit): the connection
    must be closed with :attr:`code`. Raised inside the parser, reported as a
    :class:`Violation` event."""

    def __init__(self, reason: str, code: int = 1002) -> None:
        super().__init__(reason)
        self.reason = reason
        self.code = code


class HandshakeRejected(Exception):
    """The server's answer to the upgrade request is not a websocket upgrade.

    ``status`` is the HTTP status when there was one (``None``: not even HTTP).
    """

    def __init__(self, reason: str, status: int | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status


# -- handshake ------------------------------------------------------------------------------


def accept_for(key: str) -> str:
    """The ``Sec-WebSocket-Accept`` a server must answer ``key`` with."""
    digest = hashlib.sha1(key.encode("ascii") + ACCEPT_GUID).digest()
    return base64.b64encode(digest).decode("ascii")


def handshake_request(host: str, resource: str, key: str) -> bytes:
    """The upgrade request (``key``: 16 random bytes, base64; the caller draws them)."""
    lines = [
        f"GET {resource} HTTP/1.1",
        f"Host: {host}",
        "Upgrade: websocket",
        "Connection: Upgrade",
        f"Sec-WebSocket-Key: {key}",
        "Sec-WebSocket-Version: 13",
        "User-Agent: spool-client",
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("ascii")


def parse_handshake_response(
    data: bytes | bytearray, key: str, *, ended: bool = False
) -> int | None:
    """Check a server's answer to :func:`handshake_request`.

    Returns how many bytes of ``data`` the response head took (what follows is already
    websocket frames), or None when the head is not complete yet, or (a refusal with a
    ``Content-Length``) its first :data:`MAX_REFUSAL_TEXT` bytes of body are not.
    ``ended``: the connection ended, nothing more comes (a refusal is reported with what
    arrived of its body).

    Raises:
        HandshakeRejected: not ``101 Switching Protocols`` with the right headers. A
            refusal's reason ends with the first line of its body, when it has one.
    """
    end = data.find(b"\r\n\r\n")
    if end < 0:
        if len(data) > MAX_HEAD:
            raise HandshakeRejected("the handshake response has no end")
        if ended:
            raise HandshakeRejected("the connection ended during the websocket handshake")
        return None
    try:
        head = bytes(data[:end]).decode("iso-8859-1")
    except UnicodeDecodeError as exc:  # pragma: no cover - latin-1 decodes every byte
        raise HandshakeRejected("the handshake response is not text") from exc
    status_line, *header_lines = head.split("\r\n")
    parts = status_line.split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise HandshakeRejected(f"not an HTTP response: {status_line[:80]!r}")
    status = int(parts[1])
    headers: dict[str, list[str]] = {}
    for line in header_lines:
        name, sep, value = line.partition(":")
        if not sep:
            raise HandshakeRejected(f"a malformed header line: {line[:80]!r}", status)
        headers.setdefault(name.strip().lower(), []).append(value.strip())
    if status != 101:
        body = bytes(data[end + 4 :])
        length = headers.get("content-length", [""])[0]
        wanted = min(int(length), MAX_REFUSAL_TEXT) if length.isdigit() else 0
        if len(body) < wanted and not ended:
            return None
        text = refusal_text(body[:wanted] if length.isdigit() else body)
        raise HandshakeRejected(
            f"the broker refused the upgrade: HTTP {status}" + (f": {text}" if text else ""),
            status,
        )

    def tokens(name: str) -> set[str]:
        return {t.strip().lower() for v in headers.get(name, []) for t in v.split(",")}

    if "websocket" not in tokens("upgrade"):
        raise HandshakeRejected("the response does not upgrade to websocket", status)
    if "upgrade" not in tokens("connection"):
        raise HandshakeRejected("the response has no Connection: Upgrade", status)
    if headers.get("sec-websocket-accept") != [accept_for(key)]:
        raise HandshakeRejected("the response's Sec-WebSocket-Accept does not match", status)
    if headers.get("sec-websocket-extensions"):
        raise HandshakeRejected("the server chose an extension that was not offered", status)
    if headers.get("sec-websocket-protocol"):
        raise HandshakeRejected("the server chose a subprotocol that was not offered", status)
    return end + 4


def refusal_text(body: bytes | bytearray) -> str:
    """The first line of a refusal's body, printable, at most :data:`MAX_REFUSAL_TEXT`
    characters ("" when there is none)."""
    line = bytes(body[:MAX_REFUSAL_TEXT]).decode("utf-8", "replace").strip().splitlines()
    if not line:
        return ""
    return "".join(c if c.isprintable() else "?" for c in line[0]).strip()


# -- frames in ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WebSocketMessage:
    """A whole data message (text or binary, fragments joined): its payload bytes."""

    data: bytes


@dataclass(frozen=True, slots=True)
class Ping:
    """A ping: answer with a pong of the same payload."""

    data: bytes


@dataclass(frozen=True, slots=True)
class Closed:
    """The server's close frame (1005 and no reason when it carried no code)."""

    code: int
    reason: str


@dataclass(frozen=True, slots=True)
class Violation:
    """The server broke RFC 6455 (or the size limit): close with ``code``; the last event,
    nothing after it is read."""

    code: int
    reason: str


Event = WebSocketMessage | Ping | Closed | Violation
"""What :meth:`Inbound.received` returns, in the order received."""

_CONTINUATION: Final = 0x0
_TEXT: Final = 0x1
_BINARY: Final = 0x2
_CLOSE: Final = 0x8
_PING: Final = 0x9
_PONG: Final = 0xA


class Inbound:
    """Parses what a server sends, from a buffer the socket reads into.

    Use: ``view = inbound.room()``, read up to ``len(view)`` bytes into it, then
    ``events = inbound.received(n)``. A frame is parsed once it is whole; a message's
    payload becomes a ``bytes`` with one copy out of the buffer. The buffer grows to hold
    the largest frame seen (bounded by ``max_size``) and is reused: nothing is resized while
    the caller may hold a view, a new buffer replaces it instead.

    Pongs are dropped (the client does not ping). After a close frame, nothing more is
    parsed.
    """

    def __init__(self, max_size: int | None = None) -> None:
        self.max_size = max_size
        self._buf = bytearray(MIN_BUFFER)
        self._view = memoryview(self._buf)
        self._start = 0  # first byte not parsed
        self._end = 0  # end of the data read
        self._need = 0  # bytes from _start the next frame takes, once its header is read
        self._last = 0  # bytes the last whole frame took
        self._fragments: list[bytes] = []
        self._fragment_size = 0
        self._fragment_text = False
        self._closed = False

    @property
    def buffered(self) -> int:
        """Bytes read and not parsed yet (a frame not whole)."""
        return self._end - self._start

    def room(self) -> memoryview:
        """Where the next read goes (never empty)."""
        start = self._start
        if start == self._end:
            start = self._start = self._end = 0
            if len(self._buf) > 4 * max(MIN_BUFFER, self._last):  # outsized: let it go
                self._buf = bytearray(MIN_BUFFER)
                self._view = memoryview(self._buf)
        size = len(self._buf)
        pending = self._end - start
        # The whole next frame once its length is known, else at least one more byte.
        want = max(self._need, pending + 1)
        if start + want > size:
            # Move the partial frame to the front of a new buffer that holds all of it.
            # New, not resized: a view handed out earlier may still be alive. Keep the size
            # (frames of a stream are alike) unless the frame needs more, or far less.
            floor = max(want, MIN_BUFFER)
            shrink = self._need and size > 4 * floor  # the next frame's length is known
            new_size = floor if shrink else max(size, floor)
            buf = bytearray(new_size)
            buf[:pending] = self._view[start : self._end]
            self._buf = buf
            self._view = memoryview(buf)
            self._end = pending
            self._start = 0
        return self._view[self._end :]

    def received(self, n: int) -> list[Event]:
        """``n`` bytes were written at the start of the last :meth:`room`: the events
        they complete, a :class:`Violation` last if they break RFC 6455."""
        self._end += n
        if self._closed:
            self._start = self._end
            return []
        return self._parse()

    def feed(self, data: bytes) -> list[Event]:
        """``received`` for bytes the caller already holds (the handshake's leftover)."""
        events: list[Event] = []
        offset = 0
        while offset < len(data):
            view = self.room()
            n = min(len(view), len(data) - offset)
            view[:n] = data[offset : offset + n]
            view.release()
            events.extend(self.received(n))
            offset += n
        return events

    def _parse(self) -> list[Event]:
        events: list[Event] = []
        try:
            self._parse_into(events)
        except ProtocolViolation as exc:
            # What came before the violation still counts; nothing after it is read.
            events.append(Violation(exc.code, exc.reason))
            self._closed = True
            self._start = self._end
        return events

    def _parse_into(self, events: list[Event]) -> None:
        buf = self._buf
        view = self._view
        start = self._start
        end = self._end
        max_size = self.max_size
        while True:
            avail = end - start
            if avail < 2:
                break
            b0 = buf[start]
            b1 = buf[start + 1]
            if b0 & 0x70:
                raise ProtocolViolation("a frame with reserved bits set (no extension)")
            if b1 & 0x80:
                raise ProtocolViolation("a masked frame from the server")
            opcode = b0 & 0x0F
            length = b1 & 0x7F
            head = 2
            if length == 126:
                if avail < 4:
                    break
                length = (buf[start + 2] << 8) | buf[start + 3]
                head = 4
            elif length == 127:
                if avail < 10:
                    break
                length = int.from_bytes(view[start + 2 : start + 10], "big")
                if length >> 63:
                    raise ProtocolViolation("a frame length with its top bit set")
                head = 10
            fin = b0 & 0x80
            if opcode >= _CLOSE:
                if length > 125 or not fin:
                    raise ProtocolViolation("a control frame fragmented or over 125 bytes")
            elif max_size is not None and self._fragment_size + length > max_size:
                raise ProtocolViolation(
                    f"a message over the size limit ({self._fragment_size + length} > "
                    f"{max_size} bytes)",
                    1009,
                )
            total = head + length
            if avail < total:
                self._need = total
                break
            payload = bytes(view[start + head : start + total])
            start += total
            self._need = 0
            self._last = total
            if opcode in (_BINARY, _TEXT):
                if self._fragments:
                    raise ProtocolViolation("a new message inside a fragmented one")
                if fin:
                    if opcode == _TEXT:
                        _check_text(payload)
                    events.append(WebSocketMessage(payload))
                else:
                    self._fragments.append(payload)
                    self._fragment_size = length
                    self._fragment_text = opcode == _TEXT
            elif opcode == _CONTINUATION:
                if not self._fragments:
                    raise ProtocolViolation("a continuation frame with no message to continue")
                self._fragments.append(payload)
                self._fragment_size += length
                if fin:
                    whole = b"".join(self._fragments)
                    self._fragments = []
                    self._fragment_size = 0
                    if self._fragment_text:
                        _check_text(whole)
                    events.append(WebSocketMessage(whole))
            elif opcode == _PING:
                events.append(Ping(payload))
            elif opcode == _PONG:
                pass
            elif opcode == _CLOSE:
                events.append(_parse_close(payload))
                self._closed = True
                start = end
                break
            else:
                raise ProtocolViolation(f"an unknown opcode {opcode}")
            self._start = start
        self._start = start


def _check_text(payload: bytes) -> None:
    try:
        payload.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProtocolViolation("a text message that is not UTF-8", 1007) from exc


def _parse_close(payload: bytes) -> Closed:
    if not payload:
        return Closed(1005, "")
    try:
        close = Close.parse(payload)
    except Exception as exc:  # the library's ProtocolError or UnicodeDecodeError
        raise ProtocolViolation(f"a malformed close frame: {exc}") from exc
    return Closed(int(close.code), close.reason)


# -- frames out -----------------------------------------------------------------------------


def encode_frame(opcode: Opcode, payload: bytes) -> bytes:
    """One masked client frame (the library's encoder: C masking with a fresh key)."""
    return Frame(opcode, payload).serialize(mask=True)


def encode_close(code: int, reason: str) -> bytes:
    """A masked close frame."""
    return encode_frame(Opcode.CLOSE, Close(code, reason).serialize())
