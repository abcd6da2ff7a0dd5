"""SOW keys from Key paths, the k header, or the body's digest."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from spool.server.protocol.errors import InvalidMessage
from spool.server.sow.keys import MAX_KEY_CHARS, KeySpec, check_given_key
from spool.server.txlog.format.record import sow_key_field, split_sow_key_field

scalars = st.one_of(
    st.text(max_size=20),
    st.integers(-(10**12), 10**12),
    st.booleans(),
    st.floats(allow_nan=False, allow_infinity=False),
)


def test_one_path_gives_the_value_text() -> None:
    spec = KeySpec("t", ("/id",))
    assert spec.key("t", b'{"id":"IBM","px":1}', None) == "IBM"
    assert spec.key("t", b'{"id":42}', None) == "42"
    assert spec.key("t", b'{"id":true}', None) == "true"
    assert spec.key("t", b'{"id":"tab\\there"}', None) == "tab\\u0009here"


def test_nested_and_several_paths() -> None:
    spec = KeySpec("t", ("/order/id", "/region"))
    assert spec.key("t", b'{"region":"eu","order":{"id":7}}', None) == "7|eu"
    # a '|' inside a value cannot make two tuples collide
    a = spec.key("t", b'{"region":"c","order":{"id":"a|b"}}', None)
    b = spec.key("t", b'{"region":"b|c","order":{"id":"a"}}', None)
    assert a != b


@given(st.lists(st.tuples(scalars, scalars), min_size=2, max_size=2, unique=True))
def test_different_tuples_never_share_a_key(pairs: list[tuple[object, object]]) -> None:
    spec = KeySpec("t", ("/a", "/b"))
    keys = {spec.key("t", orjson.dumps({"a": a, "b": b}), None) for a, b in pairs}
    texts = {(orjson.dumps(a), orjson.dumps(b)) for a, b in pairs}
    # equal texts (1 and 1.0 are not: their JSON differs) give equal keys, others differ
    assert len(keys) == len(texts)
    for key in keys:
        assert not any(ord(ch) < 32 for ch in key)  # never a control character


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (b'{"px":1}', "has no value at /id"),
        (b'{"id":null}', "has no value at /id"),
        (b'{"id":{"a":1}}', "is dict, not a string, number or boolean"),
        (b'{"id":[1]}', "is list"),
        (b"[1,2]", "is not an object"),
        (b"not json", "is not JSON"),
    ],
)
def test_a_body_without_a_key_is_refused(body: bytes, fragment: str) -> None:
    with pytest.raises(InvalidMessage, match=fragment):
        KeySpec("t", ("/id",)).key("t", body, None)


def test_a_given_k_must_agree_with_the_key_paths() -> None:
    spec = KeySpec("t", ("/id",))
    assert spec.key("t", b'{"id":"a"}', "a") == "a"
    with pytest.raises(InvalidMessage, match="contradicts"):
        spec.key("t", b'{"id":"a"}', "b")


def test_without_paths_the_k_header_or_a_digest_of_the_body() -> None:
    spec = KeySpec("t", ())
    assert spec.key("t", b"anything", "my-key") == "my-key"
    d1 = spec.key("t", b'{"x":1}', None)
    assert d1 == spec.key("t", b'{"x":1}', None) and len(d1) == 32
    assert d1 != spec.key("t", b'{"x":2}', None)


@pytest.mark.parametrize("bad", ["", "a\x1eb", "line\n", "x" * (MAX_KEY_CHARS + 1)])
def test_a_given_key_is_checked(bad: str) -> None:
    with pytest.raises(InvalidMessage):
        check_given_key(bad, "t")


@given(st.text(max_size=30).filter(lambda s: "\x1e" not in s), st.none() | st.integers(0, 10**9))
def test_the_log_key_field_round_trips(key: str, expiration: int | None) -> None:
    assert split_sow_key_field(sow_key_field(key, expiration)) == (key, expiration)
