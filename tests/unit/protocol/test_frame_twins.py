"""The compiled frame splitter against its pure-Python oracle: same messages (header
dicts with the same keys, order and value types; the same bodies) and the same error (type,
text, ``cid``) on valid, random and adversarial frames."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from spool.server.protocol.frame import LONG_KEYS, ParsedFrame, parse_frame_py
from tests.support.twins import compiled, typed

_c = compiled("spool.server.protocol._frame_c")

# Keys and values that reach every branch of the compiled header parser: the common keys,
# long keys, unknown keys, escapes, non-ASCII, control characters, braces and quotes in
# strings, every JSON scalar, numbers at the edges of its integer fast path.
keys = st.one_of(
    st.sampled_from(["c", "t", "l", "s", "a", "cid", "sids", "bm", "ts", "x", "k", "sub_id"]),
    st.sampled_from(sorted(LONG_KEYS)),
    st.text(max_size=6),
)
ints = st.one_of(
    st.integers(min_value=-5, max_value=300),
    st.integers(min_value=10**17, max_value=10**19 + 5),
    st.integers(min_value=2**63 - 3, max_value=2**64 + 3),
    st.integers(min_value=-(2**70), max_value=2**70),
)
scalars = st.one_of(
    ints,
    st.text(max_size=12),
    st.text(alphabet='ab{}"\\/\x00\x1f\u00e9\u20ac', max_size=8),
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
    st.none(),
)
values = st.one_of(scalars, st.lists(scalars, max_size=3))


@st.composite
def headers(draw: st.DrawFn) -> bytes:
    items = draw(st.lists(st.tuples(keys, values), max_size=5))
    if draw(st.booleans()):
        # a well-formed message: a body length that fits, or none on the last one
        items.append(("l", draw(st.integers(min_value=0, max_value=40))))
    ascii_only = draw(st.booleans())
    text = (
        "{"
        + ",".join(
            json.dumps(k, ensure_ascii=ascii_only) + ":" + json.dumps(v, ensure_ascii=ascii_only)
            for k, v in items
        )
        + "}"
    )
    return text.encode()


@st.composite
def frames(draw: st.DrawFn) -> bytes:
    parts = []
    for _ in range(draw(st.integers(min_value=0, max_value=4))):
        parts.append(draw(headers()))
        parts.append(draw(st.binary(max_size=40)))
    frame = b"".join(parts)
    # adversarial edits: cut it, flip bytes, splice random bytes in
    for _ in range(draw(st.integers(min_value=0, max_value=3))):
        if not frame:
            break
        i = draw(st.integers(min_value=0, max_value=len(frame) - 1))
        op = draw(st.sampled_from(["cut", "flip", "insert"]))
        if op == "cut":
            frame = frame[:i]
        elif op == "flip":
            frame = frame[:i] + bytes([draw(st.integers(0, 255))]) + frame[i + 1 :]
        else:
            frame = frame[:i] + draw(st.binary(min_size=1, max_size=4)) + frame[i:]
    return frame


def _view(parsed: ParsedFrame) -> Any:
    err = parsed.error
    return (
        [(typed(m.header), m.body) for m in parsed.messages],
        None if err is None else (type(err), err.args, err.cid),
    )


def _same(frame: bytes) -> None:
    assert _view(_c.parse_frame(frame)) == _view(parse_frame_py(frame))


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(frames())
@example(b"")
@example(b"{}")
@example(b"{")
@example(b"x")
@example(b'{"l":01}')
@example(b'{"l":-0}')
@example(b'{"l":1.0}')
@example(b'{"l":true}')
@example(b'{"l":18446744073709551616}ab')
@example(b'{"l":9223372036854775808}ab')
@example(b'{"l":999999999999999999}ab')
@example(b'{"a":"}","l":1}x')
@example(b'{"a":{"b":1}}')
@example(b'{"a" :1}')
@example(b'{"t":"\\u00e9"}')
@example(b'{"t":"\xc3\xa9"}')
@example(b'{"t":"\xff"}')
@example(b'{"topic":"a","t":"b","l":0}{"command":"x"}')
@example(b'{"a":1,"a":2}')
@example(b'{"cid":7,"l":5}ab')
@example(b'{"command_id":"q","l":-1}')
@example(b'{"s":1e5}')
@example(b'{"s":"\\"}"}')
def test_parse_frame_twins_agree(frame: bytes) -> None:
    _same(frame)


@given(st.binary(max_size=200))
def test_parse_frame_twins_agree_on_random_bytes(frame: bytes) -> None:
    _same(frame)


def test_long_header_limits_agree() -> None:
    big = b'{"t":"' + b"a" * (64 * 1024) + b'","l":0}'
    _same(big)
    _same(b'{"t":"' + b"a" * (64 * 1024 - 20) + b'","l":0}')
    _same(b'{"t":"' + b"\\u0041" * 20000 + b'"}')


def test_bytes_like_frames_give_bytes_bodies() -> None:
    frame = b'{"c":"publish","l":2}ab{"c":"x"}rest'
    for data in (bytearray(frame), memoryview(frame)):
        got = _c.parse_frame(data)
        assert _view(got) == _view(parse_frame_py(data))
        assert all(type(m.body) is bytes for m in got.messages)


def test_value_cache_never_mixes_up_strings() -> None:
    # Strings of one length that map to one cache slot must still be told apart.
    names = [f"t{i:03d}" for i in range(500)]
    frame = b"".join(b'{"t":"%s","l":0}' % n.encode() for n in names * 2)
    got = _c.parse_frame(frame)
    assert [m.header["t"] for m in got.messages] == names * 2


# -- the client's splitter and publish encoder ---------------------------------------------

from spool.server.protocol.delivery import split_deliveries_py  # noqa: E402
from spool.server.protocol.frame import encode_publishes_py  # noqa: E402
from spool.server.protocol.message import Delivery  # noqa: E402


def _split_view(result: tuple[list[Any], Any]) -> Any:
    items, err = result
    out = []
    for it in items:
        if isinstance(it, Delivery):
            out.append(("delivery", typed(it.topic), it.data, it.sub_ids, typed(it.bookmark),
                        typed(it.timestamp), typed(it.correlation_id), typed(it.header)))  # fmt: skip
        else:
            out.append(("message", typed(it.header), it.body))
    return out, None if err is None else (type(err), err.args, err.cid)


ascii_text = st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=8)


@st.composite
def broker_frames(draw: st.DrawFn) -> bytes:
    """Frames as the broker writes them (the fast layout), with acks mixed in, odd values
    (escapes, non-ASCII, numbers where strings belong) and adversarial edits."""
    parts = []
    for _ in range(draw(st.integers(min_value=0, max_value=5))):
        body = draw(st.binary(max_size=30))
        kind = draw(st.sampled_from(["delivery", "delivery", "odd", "ack"]))
        if kind == "delivery":
            h = b'{"c":"publish","t":%s,"sids":%s' % (
                json.dumps(draw(ascii_text)).encode(),
                json.dumps(draw(ascii_text)).encode(),
            )
            for key in ("bm", "ts", "x"):
                if draw(st.booleans()):
                    h += b',"%s":%s' % (key.encode(), json.dumps(draw(ascii_text)).encode())
            parts.append(h + b',"l":%d}' % len(body) + body)
        elif kind == "odd":
            parts.append(draw(headers()) + body)
        else:
            parts.append(b'{"c":"ack","a":"persisted","s":%d,"l":0}' % draw(st.integers(0, 99)))
    frame = b"".join(parts)
    if frame and draw(st.booleans()):
        i = draw(st.integers(min_value=0, max_value=len(frame) - 1))
        frame = frame[:i] + draw(st.binary(max_size=3)) + frame[i + 1 :]
    return frame


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(broker_frames())
@example(b'{"c":"publish","t":"a","sids":"s1,s2","bm":"1|2|","l":3}abc')
@example(b'{"c":"publish","t":"a","sids":"s1","l":4}abc')
@example(b'{"c":"publish","t":"a","sids":"s1","l":01}a')
@example(b'{"c":"publish","t":"a","sids":"s1","l":}a')
@example(b'{"c":"publish","t":"a","sids":"s1","x":"q","bm":"1|2|","l":1}a')
@example(b'{"c":"publish","t":"\\u00e9","sids":"s1","l":1}a')
@example(b'{"c":"publish","t":"a","sids":7,"l":1}a')
@example(b'{"c":"publish","t":"a","sids":"s1"}rest')
def test_split_deliveries_twins_agree(frame: bytes) -> None:
    assert _split_view(_c.split_deliveries(frame)) == _split_view(split_deliveries_py(frame))


@given(st.binary(max_size=200))
def test_split_deliveries_twins_agree_on_random_bytes(frame: bytes) -> None:
    assert _split_view(_c.split_deliveries(frame)) == _split_view(split_deliveries_py(frame))


@given(
    st.integers(min_value=0, max_value=2**64 + 5),
    st.lists(st.binary(max_size=20), max_size=5),
    st.booleans(),
)
@example(2**64 - 2, [b"a", b"b"], False)
def test_encode_publishes_twins_agree(first: int, bodies: list[bytes], persisted: bool) -> None:
    head, mid = b'{"c":"publish","t":"x","s":', b',"a":"persisted","l":' if persisted else b',"l":'
    assert _c.encode_publishes(head, first, mid, bodies) == encode_publishes_py(
        head, first, mid, bodies
    )
