"""The client's sans-I/O websocket codec: server frames cut at any point, handshakes, and
everything a server must not send. Server frames are made by the ``websockets`` library's
encoder, so the reader is checked against an independent implementation of RFC 6455."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from websockets.frames import Close, Frame, Opcode

from spool.server.client.websocket import (
    MIN_BUFFER,
    Closed,
    Event,
    HandshakeRejected,
    Inbound,
    Ping,
    Violation,
    WebSocketMessage,
    accept_for,
    handshake_request,
    parse_handshake_response,
    refusal_text,
)

KEY = base64.b64encode(bytes(range(16))).decode()


def server_frame(opcode: Opcode, data: bytes, *, fin: bool = True) -> bytes:
    return Frame(opcode, data, fin=fin).serialize(mask=False)


def read_in_chunks(inbound: Inbound, wire: bytes, cuts: list[int]) -> list[Event]:
    """Feed ``wire`` through room()/received() in reads of the given sizes (at most what
    room() offers, as a socket would), then the rest."""
    events: list[Event] = []
    offset = 0
    sizes = iter(cuts)
    while offset < len(wire):
        view = inbound.room()
        assert len(view) > 0
        n = min(len(view), len(wire) - offset, next(sizes, len(wire)) or 1)
        view[:n] = wire[offset : offset + n]
        events.extend(inbound.received(n))
        offset += n
    return events


# A message: its payload, whether it is text, how it is fragmented, pings slipped in.
payloads = st.one_of(
    st.binary(max_size=300),
    st.binary(min_size=60_000, max_size=70_000),  # 16-bit lengths
    st.text(max_size=200).map(lambda s: s.encode()),
)


@st.composite
def conversations(draw: st.DrawFn) -> tuple[bytes, list[Event]]:
    wire: list[bytes] = []
    expected: list[Event] = []
    for _ in range(draw(st.integers(0, 8))):
        data = draw(payloads)
        text = draw(st.booleans())
        if text:
            data = data.decode("utf-8", "replace").encode()
        opcode = Opcode.TEXT if text else Opcode.BINARY
        parts = draw(st.integers(1, 4))
        step = max(1, len(data) // parts)
        chunks = [data[i : i + step] for i in range(0, len(data), step)] or [b""]
        for i, chunk in enumerate(chunks):
            if draw(st.booleans()):
                ping = draw(st.binary(max_size=125))
                wire.append(server_frame(Opcode.PING, ping))
                expected.append(Ping(ping))
            if draw(st.booleans()):
                wire.append(server_frame(Opcode.PONG, draw(st.binary(max_size=10))))
            wire.append(
                server_frame(opcode if i == 0 else Opcode.CONT, chunk, fin=i == len(chunks) - 1)
            )
        expected.append(WebSocketMessage(data))
    if draw(st.booleans()):
        code = draw(st.sampled_from([1000, 1001, 1011, 4001]))
        reason = draw(st.text(max_size=20))
        wire.append(server_frame(Opcode.CLOSE, Close(code, reason).serialize()))
        expected.append(Closed(code, reason))
        wire.append(server_frame(Opcode.BINARY, b"after the close"))  # never parsed
    return b"".join(wire), expected


@settings(max_examples=300)
@given(conversations(), st.lists(st.integers(1, 70_000), max_size=40))
def test_any_cut_of_the_stream_gives_the_same_events(
    convo: tuple[bytes, list[Event]], cuts: list[int]
) -> None:
    wire, expected = convo
    assert read_in_chunks(Inbound(), wire, cuts) == expected
    assert Inbound().feed(wire) == expected  # all at once (the handshake's leftover)


def test_a_64_bit_length_and_a_buffer_that_grows_and_shrinks_back() -> None:
    big = bytes(range(256)) * 8192  # 2 MiB: more than the initial buffer
    frame = server_frame(Opcode.BINARY, big)
    inbound = Inbound()
    assert read_in_chunks(inbound, frame + frame[:20], [65_536] * 100) == [WebSocketMessage(big)]
    assert len(inbound.room()) == len(frame) - 20  # a frame alike in progress: room for it
    assert inbound.feed(frame[20:] + frame[:3]) == [WebSocketMessage(big)]
    assert len(inbound.room()) == len(frame) - 3
    assert inbound.feed(frame[3:]) == [WebSocketMessage(big)]
    assert len(inbound.room()) == len(frame)  # empty, and frames are that large: kept
    assert read_in_chunks(inbound, frame + b"\x82\x05sm", [1 << 20] * 3) == [WebSocketMessage(big)]
    assert len(inbound.room()) == len(frame) - 4  # the next frame's head, at the front
    assert inbound.feed(b"all") == [WebSocketMessage(b"small")]
    assert len(inbound.room()) == MIN_BUFFER  # empty after a small frame: let go


@pytest.mark.parametrize(
    ("wire", "code", "words"),
    [
        (Frame(Opcode.BINARY, b"m").serialize(mask=True), 1002, "masked"),
        (bytes([0x80 | 0x40 | 0x2, 1]) + b"r", 1002, "reserved"),
        (bytes([0x09, 1]) + b"p", 1002, "control"),  # a ping without FIN
        (bytes([0x89, 126, 0, 200]) + b"p" * 200, 1002, "control"),
        (server_frame(Opcode.CONT, b"c"), 1002, "continuation"),
        (server_frame(Opcode.BINARY, b"a", fin=False) + server_frame(Opcode.BINARY, b"b"), 1002,
         "inside"),
        (bytes([0x83, 0]), 1002, "opcode"),
        (bytes([0x82, 127]) + (1 << 63).to_bytes(8, "big"), 1002, "top bit"),
        (bytes([0x81, 2]) + b"\xff\xfe", 1007, "UTF-8"),
        (bytes([0x88, 1]) + b"\x03", 1002, "close"),
    ],
)  # fmt: skip
def test_what_a_server_must_not_send_is_a_violation_with_its_close_code(
    wire: bytes, code: int, words: str
) -> None:
    inbound = Inbound()
    events = inbound.feed(b"\x82\x02ok" + wire)
    assert events[0] == WebSocketMessage(b"ok")  # what came before still counts
    assert len(events) == 2 and isinstance(events[1], Violation)
    assert events[1].code == code and words in events[1].reason
    assert inbound.feed(b"\x82\x02ok") == []  # nothing after it is read


def test_a_message_over_the_size_limit_is_refused_before_it_is_read() -> None:
    inbound = Inbound(max_size=1000)
    assert inbound.feed(server_frame(Opcode.BINARY, b"a" * 1000)) == [WebSocketMessage(b"a" * 1000)]
    [violation] = inbound.feed(server_frame(Opcode.BINARY, b"a" * 1001)[:4])  # the head
    assert isinstance(violation, Violation) and violation.code == 1009
    fragmented = Inbound(max_size=1000)
    fragmented.feed(server_frame(Opcode.BINARY, b"a" * 600, fin=False))
    [violation] = fragmented.feed(server_frame(Opcode.CONT, b"a" * 600))
    assert isinstance(violation, Violation) and violation.code == 1009


def test_a_close_without_a_code_reads_as_1005() -> None:
    assert Inbound().feed(server_frame(Opcode.CLOSE, b"")) == [Closed(1005, "")]


# -- handshake -------------------------------------------------------------------------------


def response(*headers: str, status: str = "101 Switching Protocols") -> bytes:
    return ("\r\n".join([f"HTTP/1.1 {status}", *headers]) + "\r\n\r\n").encode()


GOOD = ("Upgrade: websocket", "Connection: Upgrade", f"Sec-WebSocket-Accept: {accept_for(KEY)}")


def test_the_rfc_example_key_gets_the_rfc_accept() -> None:
    assert accept_for("dGhlIHNhbXBsZSBub25jZQ==") == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="


def test_the_request_asks_for_an_upgrade_without_extensions() -> None:
    request = handshake_request("127.0.0.1:9", "/amps/json?x=1", KEY).decode()
    assert request.startswith("GET /amps/json?x=1 HTTP/1.1\r\nHost: 127.0.0.1:9\r\n")
    assert f"Sec-WebSocket-Key: {KEY}\r\n" in request and request.endswith("\r\n\r\n")
    assert "Extensions" not in request


@given(st.binary(max_size=50), st.integers(0, 200))
def test_a_good_response_is_found_at_any_cut_and_its_leftover_kept(tail: bytes, cut: int) -> None:
    data = response(*GOOD, "Server: x") + tail
    head_len = len(data) - len(tail)
    partial = data[: min(cut, head_len - 1)]
    assert parse_handshake_response(partial, KEY) is None
    assert parse_handshake_response(data, KEY) == head_len


@pytest.mark.parametrize(
    ("data", "status", "words"),
    [
        (response(status="403 Forbidden"), 403, "HTTP 403"),
        (response("Connection: Upgrade", f"Sec-WebSocket-Accept: {accept_for(KEY)}"), 101,
         "upgrade"),
        (response("Upgrade: websocket", f"Sec-WebSocket-Accept: {accept_for(KEY)}"), 101,
         "Connection"),
        (response("Upgrade: websocket", "Connection: Upgrade", "Sec-WebSocket-Accept: x"), 101,
         "Accept"),
        (response(*GOOD, "Sec-WebSocket-Extensions: permessage-deflate"), 101, "extension"),
        (response(*GOOD, "Sec-WebSocket-Protocol: amps"), 101, "subprotocol"),
        (b"SSH-2.0-OpenSSH\r\n\r\n", None, "not an HTTP"),
        (b"x" * 20_000, None, "no end"),
    ],
)  # fmt: skip
def test_a_bad_response_is_rejected_with_its_reason(
    data: bytes, status: int | None, words: str
) -> None:
    with pytest.raises(HandshakeRejected) as info:
        parse_handshake_response(data, KEY)
    assert info.value.status == status and words in info.value.reason


def refusal(body: bytes, *, length: int | None = None) -> bytes:
    size = len(body) if length is None else length
    return (
        response("Content-Type: text/plain", f"Content-Length: {size}", status="404 Not Found")
        + body
    )


NOT_HERE = b"no websocket endpoint at /amps/xml: use /amps/json"


@given(st.integers(0, 300))
def test_a_refusal_waits_for_its_body_and_names_it(cut: int) -> None:
    """A wrong path's 404 says which paths the broker serves: the reason carries the
    body's first line, however the bytes arrive."""
    data = refusal(NOT_HERE)
    partial = data[: min(cut, len(data) - 1)]
    assert parse_handshake_response(partial, KEY) is None
    with pytest.raises(HandshakeRejected) as info:
        parse_handshake_response(data, KEY)
    assert info.value.status == 404
    assert info.value.reason == f"the broker refused the upgrade: HTTP 404: {NOT_HERE.decode()}"


def test_a_refusal_cut_short_by_the_end_of_the_connection_says_what_came() -> None:
    data = refusal(NOT_HERE)
    head = data[: len(data) - len(NOT_HERE)]
    with pytest.raises(HandshakeRejected) as info:
        parse_handshake_response(data[:-10], KEY, ended=True)
    assert info.value.status == 404 and info.value.reason.endswith(NOT_HERE[:-10].decode().strip())
    with pytest.raises(HandshakeRejected) as info:
        parse_handshake_response(head, KEY, ended=True)
    assert info.value.reason == "the broker refused the upgrade: HTTP 404"
    with pytest.raises(HandshakeRejected) as info:
        parse_handshake_response(head[:20], KEY, ended=True)
    assert info.value.status is None and "ended" in info.value.reason


def test_a_long_refusal_body_is_read_only_as_far_as_its_reason_needs() -> None:
    body = b"x" * 5000
    data = refusal(body)[:-4000]  # the rest never needed
    with pytest.raises(HandshakeRejected) as info:
        parse_handshake_response(data, KEY)
    assert info.value.reason.endswith(": " + "x" * 200)


@pytest.mark.parametrize(
    ("body", "text"),
    [
        (b"", ""),
        (b"\r\n  \n", ""),
        (b"first line\nsecond", "first line"),
        (b"  padded  ", "padded"),
        (b"bell\x07 and \xff", "bell? and \ufffd"),
        (b"y" * 300, "y" * 200),
    ],
)
def test_refusal_text_is_one_printable_line(body: bytes, text: str) -> None:
    assert refusal_text(body) == text
