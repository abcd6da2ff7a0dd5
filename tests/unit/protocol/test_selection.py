"""Select lists: the grammar and its refusals, and the projection against its readable
definition (hypothesis)."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spool.server.protocol.errors import InvalidOptions
from spool.server.protocol.options import parse_subscribe_options
from spool.server.protocol.selection import SelectList, parse_select, project_readable


def sel(text: str) -> SelectList:
    return parse_select(text, f"select={text}")


def project(text: str, body: object) -> object:
    return orjson.loads(sel(text).project(orjson.dumps(body)))


# -- grammar --------------------------------------------------------------------------


def test_forms() -> None:
    assert sel("[-/,+/id,+/px]") == SelectList(True, ((True, ("id",)), (True, ("px",))))
    assert sel("[-/secret]") == SelectList(False, ((False, ("secret",)),))
    assert sel("[ -/ , +/a/b ]") == SelectList(True, ((True, ("a", "b")),))


def test_order_of_items_does_not_matter() -> None:
    one, two = sel("[-/,+/a,-/a/b,+/c]"), sel("[-/,+/c,-/a/b,+/a]")
    assert one == two and hash(one) == hash(two)
    assert one.to_text() == two.to_text()


def test_in_subscribe_options() -> None:
    options = parse_subscribe_options("timestamp,select=[-/,+/id,+/a/b],live")
    assert options.select == sel("[-/,+/id,+/a/b]")
    assert "select=[-/,+/a/b,+/id]" in options.to_text()
    assert parse_subscribe_options("live").select is None


@pytest.mark.parametrize(
    ("text", "detail"),
    [
        ("select=-/a", "bracketed"),
        ("select=[-/a", "unbalanced"),
        ("select=[]", "empty"),
        ("select=[ ]", "empty"),
        ("select=[-/]", "selects no field"),
        ("select=[-/,]", "empty item"),
        ("select=[+/a,,+/b]", "empty item"),
        ("select=[a]", "unknown select item"),
        ("select=[*/a]", "unknown select item"),
        ("select=[/a]", "unknown select item"),
        ("select=[+]", "empty path"),
        ("select=[-]", "empty path"),
        ("select=[+/]", "whole message"),
        ("select=[+/a,-/]", "whole message"),
        ("select=[+a]", "/a/b"),
        ("select=[+/a//b]", "/a/b"),
        ("select=[+/a/]", "/a/b"),
        ("select=[+/a b]", "/a/b"),
        ("select=[+/a,+/a]", "listed twice"),
        ("select=[+/a,-/a]", "listed twice"),
        ("select", "needs a value"),
        ("select=[+/a],select=[+/b]", "given twice"),
    ],
)
def test_refused(text: str, detail: str) -> None:
    with pytest.raises(InvalidOptions) as info:
        parse_subscribe_options(text)
    assert detail in info.value.detail


names = st.sampled_from(["a", "b", "c", "id", "x_1", "Ünï"])
path_tuples = st.lists(names, min_size=1, max_size=3).map(tuple)
rules = st.dictionaries(path_tuples, st.booleans(), min_size=1, max_size=5)
select_lists = st.builds(
    lambda nothing, r: SelectList(nothing, tuple(sorted((k, p) for p, k in r.items()))),
    st.booleans(),
    rules,
)


def item_text(keep: bool, path: tuple[str, ...]) -> str:
    return ("+/" if keep else "-/") + "/".join(path)


@settings(max_examples=300)
@given(st.booleans(), rules, st.randoms(use_true_random=False))
def test_parse_of_any_order_gives_the_list(
    nothing: bool, r: dict[tuple[str, ...], bool], rnd: object
) -> None:
    items = [item_text(keep, path) for path, keep in r.items()]
    rnd.shuffle(items)  # type: ignore[attr-defined]
    text = "[" + ",".join((["-/"] if nothing else []) + items) + "]"
    parsed = sel(text)
    assert parsed == SelectList(nothing, tuple(sorted((k, p) for p, k in r.items())))
    assert sel(parsed.to_text()) == parsed


_pieces = st.sampled_from(["+", "-", "/", "a", "b", ",", " ", "[", "]", "//", "-/", "+/"])


@settings(max_examples=500)
@given(st.lists(_pieces, max_size=14).map("".join))
def test_garbage_is_refused_or_round_trips(text: str) -> None:
    try:
        parsed = sel("[" + text + "]")
    except InvalidOptions as exc:
        assert exc.detail.startswith("'select=[")
        return
    assert sel(parsed.to_text()) == parsed


# -- projection -----------------------------------------------------------------------

ORDER = {"id": 7, "px": 1.5, "qty": 10, "meta": {"src": "x", "notes": "n", "tags": [1, 2]}}


def test_projection_examples() -> None:
    assert project("[-/,+/id,+/px]", ORDER) == {"id": 7, "px": 1.5}
    assert project("[-/meta]", ORDER) == {"id": 7, "px": 1.5, "qty": 10}
    assert project("[-/,+/meta/src]", ORDER) == {"meta": {"src": "x"}}
    assert project("[-/,+/meta,-/meta/notes]", ORDER) == {"meta": {"src": "x", "tags": [1, 2]}}
    assert project("[-/meta,+/meta/src]", ORDER) == {
        "id": 7,
        "px": 1.5,
        "qty": 10,
        "meta": {"src": "x"},
    }
    # a path does not reach into an array, nor into a scalar
    assert project("[-/,+/meta/tags/0]", ORDER) == {}
    assert project("[-/,+/id/x]", ORDER) == {}
    assert project("[-/id/x]", ORDER) == ORDER
    # an object whose every field is left out is left out
    assert project("[-/meta/src,-/meta/notes,-/meta/tags]", ORDER) == {
        "id": 7,
        "px": 1.5,
        "qty": 10,
    }
    assert project("[-/,+/absent]", ORDER) == {}


def test_bodies_that_are_not_objects() -> None:
    for body in (b"not json", b"[1,2]", b"42", b'"text"', b""):
        assert sel("[-/secret]").project(body) == body
        assert sel("[-/,+/id]").project(body) == b"{}"
    assert sel("[-/secret]").project(b"{}") == b"{}"


def test_json_beyond_orjson() -> None:
    body = b'{"big":123456789012345678901234567890,"secret":1}'
    assert sel("[-/secret]").project(body) == b'{"big":123456789012345678901234567890}'


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.text(max_size=4)
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(names, inner, max_size=4),
    max_leaves=20,
)
json_objects = st.dictionaries(names, json_values, max_size=5)


@settings(max_examples=1000)
@given(select_lists, json_objects)
def test_projection_matches_its_definition(select: SelectList, doc: dict[str, object]) -> None:
    body = orjson.dumps(doc)
    fast = select.project(body)
    assert orjson.loads(fast) == orjson.loads(project_readable(select, body))
    assert isinstance(orjson.loads(fast), dict)


@settings(max_examples=200)
@given(select_lists, json_values | st.binary(max_size=8))
def test_non_objects_match_their_definition(select: SelectList, value: object) -> None:
    body = value if isinstance(value, bytes) else orjson.dumps(value)
    assert select.project(body) == project_readable(select, body) or (
        orjson.loads(select.project(body)) == orjson.loads(project_readable(select, body))
    )


@given(json_objects)
def test_keep_everything_is_identity(doc: dict[str, object]) -> None:
    # a list that starts from everything and leaves out a field the message lacks
    assert orjson.loads(sel("[-/zz_absent]").project(orjson.dumps(doc))) == doc
