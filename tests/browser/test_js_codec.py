"""The frame codec of static/spool-client.js, run in Chromium, against the server's codec.

server/protocol/frame.py is the oracle: frames it encodes must parse the same in the
browser, frames the browser encodes must parse in Python to what was encoded, and a
truncated frame must yield the same good messages (and an error) on both sides. The
client's fast parsers, ``parseFrame`` and ``splitFrame``, are also held to its readable
one-header-at-a-time definition, ``parseFrameOneByOne``.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st
from playwright.sync_api import Page

from spool.server.protocol.frame import LONG_KEYS, encode_frame, encode_message, parse_frame

pytestmark = pytest.mark.browser

JS_PARSE = """(bytes) => {
  const r = window.spool.parseFrame(new Uint8Array(bytes));
  return {error: r.error, messages: r.messages.map((m) => [m.header, Array.from(m.body)])};
}"""
JS_ENCODE = """(messages) => Array.from(window.spool.encodeFrame(
  messages.map(([h, body]) => [h, new Uint8Array(body)])))"""

# header values as the protocol has them: strings (with JSON's awkward characters), numbers
# within JavaScript's exact integer range, booleans
header_values = st.one_of(
    st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=12),
    st.text(alphabet='{}[]"\\:,é€😀 ', max_size=8),
    st.integers(min_value=-(2**53) + 1, max_value=2**53 - 1),
    st.booleans(),
)
header_keys = st.one_of(
    st.sampled_from(["c", "t", "cid", "sub_id", "bm", "f", "o", "s", "ts", "x", "k"]),
    # long keys are read as their short forms (a round trip would rename them)
    st.text(min_size=1, max_size=6).filter(lambda k: k != "l" and k not in LONG_KEYS),
)
headers = st.dictionaries(header_keys, header_values, max_size=5)
bodies = st.one_of(st.binary(max_size=40), st.text(max_size=20).map(str.encode))
messages = st.lists(st.tuples(headers, bodies), min_size=1, max_size=4)

SETTINGS = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def _python_view(data: bytes) -> dict[str, Any]:
    parsed = parse_frame(data)
    return {
        "error": parsed.error is not None,
        "messages": [[m.header, list(m.body)] for m in parsed.messages],
    }


def _js_view(page: Page, data: bytes) -> dict[str, Any]:
    result = page.evaluate(JS_PARSE, list(data))
    return {"error": result["error"] is not None, "messages": result["messages"]}


@SETTINGS
@given(messages)
def test_frames_encoded_by_the_server_parse_the_same_in_the_browser(
    static_origin: Page, msgs: list[tuple[dict[str, Any], bytes]]
) -> None:
    frame = encode_frame(msgs)
    assert _js_view(static_origin, frame) == _python_view(frame)


@SETTINGS
@given(messages)
def test_frames_encoded_in_the_browser_parse_in_python(
    static_origin: Page, msgs: list[tuple[dict[str, Any], bytes]]
) -> None:
    frame = bytes(static_origin.evaluate(JS_ENCODE, [[h, list(b)] for h, b in msgs]))
    parsed = parse_frame(frame)
    assert parsed.error is None
    assert [(m.header, m.body) for m in parsed.messages] == [
        ({**h, "l": len(b)}, b) for h, b in msgs
    ]


@SETTINGS
@given(messages, st.data())
def test_a_truncated_frame_fails_alike_after_the_same_good_messages(
    static_origin: Page, msgs: list[tuple[dict[str, Any], bytes]], data: st.DataObject
) -> None:
    frame = encode_frame(msgs)
    cut = data.draw(st.integers(min_value=1, max_value=len(frame)))
    assert _js_view(static_origin, frame[:cut]) == _python_view(frame[:cut])


def test_the_last_message_may_omit_its_length(static_origin: Page) -> None:
    frame = encode_message({"c": "publish", "t": "a"}, b'{"x":1}') + encode_message(
        {"c": "publish", "t": "b"}, 'héllo {"}'.encode(), with_length=False
    )
    view = _js_view(static_origin, frame)
    assert view == _python_view(frame)
    assert bytes(view["messages"][1][1]).decode() == 'héllo {"}'


def test_lengths_count_bytes_not_characters(static_origin: Page) -> None:
    encoded = bytes(
        static_origin.evaluate(
            "() => Array.from(window.spool.encodeMessage({c: 'publish', t: 'p'}, 'é€😀'))"
        )
    )
    parsed = parse_frame(encoded)
    assert parsed.error is None
    assert parsed.messages[0].header["l"] == len("é€😀".encode()) == 9
    assert parsed.messages[0].body.decode() == "é€😀"


def test_long_keys_are_read_as_short_ones(static_origin: Page) -> None:
    frame = b'{"command":"publish","topic":"orders","bookmark":"1|2|","msg_len":2}{}'
    view = _js_view(static_origin, frame)
    assert view["messages"] == [[{"c": "publish", "t": "orders", "bm": "1|2|", "l": 2}, [123, 125]]]


@pytest.mark.parametrize(
    "frame",
    [b"", b"x{}", b'{"c":"publish"', b'{"c":"publish","l":5}abc', b'{"c":"a","l":-1}', b"[1]"],
    ids=["empty", "no-header", "unterminated", "short-body", "negative-length", "not-object"],
)
def test_malformed_frames_are_reported_not_thrown(static_origin: Page, frame: bytes) -> None:
    view = _js_view(static_origin, frame)
    assert view["error"] is True
    assert view == _python_view(frame)


JS_TWINS = """(bytes) => {
  const data = new Uint8Array(bytes);
  const view = (r) => ({error: r.error,
    messages: r.messages.map((m) => [JSON.stringify(Object.entries(m.header)),
                                     Array.from(m.body)])});
  return [view(window.spool.parseFrame(data)), view(window.spool.parseFrameOneByOne(data))];
}"""


@st.composite
def adversarial_frames(draw: st.DrawFn) -> bytes:
    """Server-encoded frames, some with long keys, duplicate or odd `l`, cut or spliced."""
    msgs = draw(messages)
    frame = encode_frame(msgs)
    edit = draw(st.sampled_from(["none", "cut", "splice", "long", "dup", "spaced", "nol"]))
    if edit == "cut":
        frame = frame[: draw(st.integers(0, len(frame)))]
    elif edit == "splice" and frame:
        i = draw(st.integers(0, len(frame) - 1))
        frame = frame[:i] + draw(st.binary(min_size=1, max_size=3)) + frame[i + 1 :]
    elif edit == "long":
        frame = b'{"topic":"a","msg_len":1}x' + frame
    elif edit == "dup":
        frame = b'{"l":1,"l":0}' + frame
    elif edit == "spaced":
        frame = b'{"c":"x", "l" : 2}ab' + frame
    elif edit == "nol":
        frame = frame + b'{"c":"tail"}rest of the frame'
    return frame


@SETTINGS
@given(adversarial_frames())
def test_the_one_pass_parser_agrees_with_the_one_by_one_definition(
    static_origin: Page, frame: bytes
) -> None:
    fast, slow = static_origin.evaluate(JS_TWINS, list(frame))
    assert fast == slow


JS_SPLIT_TWINS = """(bytes) => {
  const data = new Uint8Array(bytes);
  const view = (items) => items.map((m) => [JSON.stringify(Object.entries(m.header)),
                                            Array.from(m.body)]);
  const split = window.spool.splitFrame(data);
  const lazy = split.items.filter((m) => m instanceof window.spool.SpoolMessage).length;
  const one = window.spool.parseFrameOneByOne(data);
  // the lazy fields agree with the header they stand for
  const fields = split.items.filter((m) => m instanceof window.spool.SpoolMessage).every((m) =>
    m.topic === m.header.t && m.bookmark === m.header.bm && m.command === "publish" &&
    JSON.stringify(m.subIds) ===
      JSON.stringify(m.header.sids ? m.header.sids.split(",") : []));
  return [{error: split.error, messages: view(split.items)},
          {error: one.error, messages: view(one.messages)}, lazy, fields];
}"""

ascii_text = st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=8)


@st.composite
def broker_frames(draw: st.DrawFn) -> bytes:
    """Frames in the broker's delivery layout, mixed with acks and odd headers, then cut
    or spliced."""
    parts = []
    for _ in range(draw(st.integers(min_value=0, max_value=5))):
        body = draw(st.binary(max_size=20))
        kind = draw(st.sampled_from(["delivery", "delivery", "delivery", "odd", "ack"]))
        if kind == "delivery":
            h = b'{"c":"publish","t":%s,"sids":%s' % (
                json.dumps(draw(ascii_text)).encode(),
                json.dumps(draw(st.sampled_from(["s1", "a,b", ""]))).encode(),
            )
            for key in ("bm", "ts", "x"):
                if draw(st.booleans()):
                    h += b',"%s":%s' % (key.encode(), json.dumps(draw(ascii_text)).encode())
            parts.append(h + b',"l":%d}' % len(body) + body)
        elif kind == "odd":
            parts.append(encode_message(draw(headers), body))
        else:
            parts.append(b'{"c":"ack","a":"persisted","s":3,"l":0}')
    frame = b"".join(parts)
    if frame and draw(st.booleans()):
        i = draw(st.integers(0, len(frame) - 1))
        frame = frame[:i] + draw(st.binary(max_size=3)) + frame[i + 1 :]
    return frame


@SETTINGS
@given(broker_frames())
def test_the_session_splitter_agrees_with_the_definition(static_origin: Page, frame: bytes) -> None:
    split, one, _lazy, fields_agree = static_origin.evaluate(JS_SPLIT_TWINS, list(frame))
    assert split == one
    assert fields_agree


def test_broker_deliveries_take_the_lazy_path(static_origin: Page) -> None:
    frame = b"".join(
        b'{"c":"publish","t":"a/b","sids":"s1","bm":"7|%d|","l":3}abc' % i for i in range(50)
    )
    split, one, lazy, fields_agree = static_origin.evaluate(JS_SPLIT_TWINS, list(frame))
    assert split == one and lazy == 50 and fields_agree


JS_ALL_TWINS = """(bytes) => {
  const data = new Uint8Array(bytes);
  const view = (r, items) => ({error: r.error, messages: items.map((m) =>
    [JSON.stringify(Object.entries(m.header)), Array.from(m.body)])});
  const split = window.spool.splitFrame(data);
  const fast = window.spool.parseFrame(data);
  const one = window.spool.parseFrameOneByOne(data);
  const lazy = split.items.filter((m) => m instanceof window.spool.SpoolMessage);
  const fields = lazy.every((m) => m.topic === m.header.t && m.bookmark === m.header.bm);
  return [view(split, split.items), view(fast, fast.messages), view(one, one.messages),
          lazy.length, fields];
}"""

plain_text = st.text(alphabet="abc/|,.-_ 019{}[]:", max_size=8)
# strings as a delivery header may carry them: printable ASCII, JSON's awkward
# characters, brackets and braces, and text beyond ASCII
header_text = st.one_of(
    ascii_text,
    st.text(alphabet='{}[]"\\:,é€😀 |', max_size=8),
    st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=6),
)


@st.composite
def edge_frames(draw: st.DrawFn) -> bytes:
    """Deliveries in the broker's layout with any strings (raw UTF-8 or escaped), empty
    and bracket-filled bodies, other messages, a last message without ``l``; then
    maybe cut anywhere or just before its end, spliced, or followed by bytes that are no
    message."""
    parts = []
    for _ in range(draw(st.integers(min_value=0, max_value=5))):
        body = draw(st.one_of(st.just(b""), st.binary(max_size=12), header_text.map(str.encode)))
        if draw(st.booleans()):
            # half of them with plain strings only: the layout splitFrame reads lazily
            text = plain_text if draw(st.booleans()) else header_text
            ascii_only = draw(st.booleans())

            def lit(value: str, ascii_only: bool = ascii_only) -> bytes:
                return json.dumps(value, ensure_ascii=ascii_only).encode()

            topic, sids = lit(draw(text)), lit(draw(text))
            h = b'{"c":"publish","t":%s,"sids":%s' % (topic, sids)
            for key in ("bm", "ts", "x"):
                if draw(st.booleans()):
                    h += b',"%s":%s' % (key.encode(), lit(draw(text)))
            parts.append(h + b',"l":%d}' % len(body) + body)
        else:
            parts.append(encode_message(draw(headers), body))
    frame = b"".join(parts)
    edit = draw(
        st.sampled_from(["none", "none", "cut", "short", "short", "splice", "nol", "garbage"])
    )
    if edit == "cut":
        frame = frame[: draw(st.integers(0, len(frame)))]
    elif edit == "short":  # a byte or two short of its end: mostly inside the last body
        frame = frame[: -draw(st.integers(1, 2))]
    elif edit == "splice" and frame:
        i = draw(st.integers(0, len(frame) - 1))
        frame = frame[:i] + draw(st.binary(min_size=1, max_size=3)) + frame[i + 1 :]
    elif edit == "nol":
        frame += encode_message(draw(headers), draw(bodies), with_length=False)
    elif edit == "garbage":
        frame += draw(st.sampled_from([b"x", b"[]", b'{"c":"a"', b'{"l":9}ab', b"}{"]))
    return frame


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(edge_frames())
@example(b"")
@example(b'{"c":"publish","t":"a","sids":"s","l":0}')
@example(b'{"c":"publish","t":"a","sids":"s","l":3}ab')  # a lazy body cut short
@example('{"c":"publish","t":"é{","sids":"[s]","l":2}{}'.encode())
def test_both_fast_parsers_agree_with_the_definition_on_edge_frames(
    static_origin: Page, frame: bytes
) -> None:
    """``parseFrame`` and ``splitFrame`` (the fast twins) against ``parseFrameOneByOne``
    (the readable twin): the same messages (header keys in the same order, the same
    bodies) and the same error, whatever the frame; a lazily read delivery's fields are
    its header's."""
    split, fast, one, lazy, fields_agree = static_origin.evaluate(JS_ALL_TWINS, list(frame))
    event("lazy deliveries" if lazy else "no lazy delivery")
    event("error" if one["error"] is not None else "no error")
    assert split == one
    assert fast == one
    assert fields_agree
    if frame == b"":
        assert one == {"error": "empty frame", "messages": []}
