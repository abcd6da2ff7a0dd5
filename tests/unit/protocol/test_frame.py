"""Frame and header codec: round trips (hypothesis) and malformed input of every kind."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spool.server.protocol.commands import (
    CommandError,
    UnknownCommand,
    decode_command,
    encode_ack,
)
from spool.server.protocol.errors import InvalidCommand, InvalidMessage
from spool.server.protocol.frame import (
    LONG_KEYS,
    FrameError,
    Message,
    encode_frame,
    encode_message,
    parse_frame,
)

scalar = st.one_of(
    st.text(max_size=30),
    st.integers(min_value=-(2**53), max_value=2**53),
    st.booleans(),
    st.none(),
)
header_st = st.dictionaries(
    st.text(min_size=1, max_size=10).filter(lambda k: k not in LONG_KEYS and k != "l"),
    scalar,
    max_size=8,
)
body_st = st.binary(max_size=300)


@settings(max_examples=300)
@given(st.lists(st.tuples(header_st, body_st), min_size=1, max_size=6))
def test_frame_round_trip(messages: list[tuple[dict[str, Any], bytes]]) -> None:
    frame = encode_frame(messages)
    parsed = parse_frame(frame)
    assert parsed.error is None
    assert [(m.header, m.body) for m in parsed.messages] == [
        ({**h, "l": len(b)}, b) for h, b in messages
    ]


@settings(max_examples=200)
@given(header_st, body_st)
def test_last_message_may_omit_length(header: dict[str, Any], body: bytes) -> None:
    frame = encode_message(header, body, with_length=False)
    parsed = parse_frame(frame)
    assert parsed.error is None
    assert len(parsed.messages) == 1
    assert parsed.messages[0].header == header
    assert parsed.messages[0].body == body


@settings(max_examples=300)
@given(st.binary(max_size=200))
def test_garbage_never_raises(data: bytes) -> None:
    parsed = parse_frame(data)
    for m in parsed.messages:
        assert isinstance(m, Message)
    if parsed.error is not None:
        assert isinstance(parsed.error, InvalidMessage)
        assert parsed.error.reason == "invalid message"


def test_braces_and_quotes_inside_header_strings() -> None:
    header = {"c": "subscribe", "t": 'a{2}"}', "f": "/x = '}'"}
    frame = orjson.dumps(header) + b'{"body":"}"}'
    parsed = parse_frame(frame)
    assert parsed.error is None
    assert parsed.messages[0].header == header
    assert parsed.messages[0].body == b'{"body":"}"}'


def test_long_keys_are_normalized() -> None:
    parsed = parse_frame(b'{"command":"publish","topic":"orders","command_id":"7","msg_len":2}hi')
    assert parsed.error is None
    assert parsed.messages[0].header == {"c": "publish", "t": "orders", "cid": "7", "l": 2}
    assert parsed.messages[0].body == b"hi"


@pytest.mark.parametrize(
    ("frame", "cid", "fragment"),
    [
        (b"", None, "empty"),
        (b"garbage", None, "expected a JSON header"),
        (b'{"c":"publish"', None, "unterminated"),
        (b'{"c":{"nested":1}}', None, "nested"),
        (b'{"c":"publish",}', None, "not JSON"),
        (b'{"c":"publish","cid":"9","l":10}short', "9", "only 5 body bytes"),
        (b'{"c":"publish","cid":"3","l":-1}', "3", "non-negative"),
        (b'{"c":"publish","cid":4,"l":"x"}', "4", "non-negative"),
    ],
)
def test_malformed_frames(frame: bytes, cid: str | None, fragment: str) -> None:
    parsed = parse_frame(frame)
    assert parsed.messages == []
    assert isinstance(parsed.error, FrameError)
    assert parsed.error.cid == cid
    assert fragment in parsed.error.detail


def test_messages_before_a_bad_one_are_kept() -> None:
    frame = encode_message({"c": "publish", "t": "a"}, b"1") + b'{"c":"publish","l":99}x'
    parsed = parse_frame(frame)
    assert len(parsed.messages) == 1
    assert parsed.error is not None


def test_header_that_is_not_an_object() -> None:
    # a JSON array is not a header; the regex only accepts objects
    assert parse_frame(b"[1,2]").error is not None


def _msg(header: dict[str, Any], body: bytes = b"") -> Message:
    return Message(header, body)


def test_decode_command_fields() -> None:
    cmd = decode_command(
        _msg(
            {
                "c": "subscribe",
                "cid": 5,
                "t": "orders",
                "sub_id": "s1",
                "f": "/a = 1",
                "bm": "0",
                "o": "timestamp",
                "a": "processed,completed",
            }
        )
    )
    assert cmd.name == "subscribe"
    assert cmd.cid == "5"
    assert cmd.topic == "orders"
    assert cmd.sub_id == "s1"
    assert cmd.filter == "/a = 1"
    assert cmd.bookmark == "0"
    assert cmd.options == "timestamp"
    assert cmd.acks == frozenset({"processed", "completed"})


@pytest.mark.parametrize(
    ("header", "exc", "fragment"),
    [
        ({"c": "nope", "cid": "1"}, UnknownCommand, "unknown command"),
        ({"cid": "1"}, UnknownCommand, "unknown command"),
        ({"c": "publish", "cid": "1"}, CommandError, "needs a topic"),
        ({"c": "publish", "cid": "1", "t": 5}, CommandError, "'t' must be a string"),
        ({"c": "publish", "cid": "1", "t": "x", "s": -1}, CommandError, "'s' must be"),
        ({"c": "publish", "cid": "1", "t": "x", "s": True}, CommandError, "'s' must be"),
        ({"c": "publish", "cid": "1", "t": "x", "a": "bogus"}, CommandError, "ack type"),
        ({"c": "logon", "cid": [1]}, CommandError, "'cid'"),
        ({"c": "logon", "hb": "x"}, CommandError, "'hb'"),
    ],
)
def test_decode_command_errors(header: dict[str, Any], exc: type[Exception], fragment: str) -> None:
    with pytest.raises(exc) as info:
        decode_command(_msg(header))
    assert fragment in str(info.value)
    if exc is UnknownCommand:
        assert isinstance(info.value, InvalidCommand)
        assert info.value.reason == "invalid command"
    else:
        assert isinstance(info.value, InvalidMessage)


def test_encode_ack() -> None:
    raw = encode_ack("processed", cid="4", status="failure", reason="bad filter", detail=None)
    parsed = parse_frame(raw)
    assert parsed.error is None
    assert parsed.messages[0].header == {
        "c": "ack",
        "a": "processed",
        "cid": "4",
        "status": "failure",
        "reason": "bad filter",
        "l": 0,
    }
