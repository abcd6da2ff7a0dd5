"""Differential property test: compiled closures agree with the tree-walking reference.

Hypothesis generates expression text (from a grammar that reaches every node kind, the
constant-comparison templates, the constant ``IN`` sets, the ``BETWEEN`` and ``LIKE`` fast
paths and constant folding) and JSON documents over the same field names, then checks
that the compiled value, the reference value and ``Filter.matches`` agree exactly.
"""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spool.server.clock import VirtualClock
from spool.server.expr import MessageView, compile_filter, compile_value, evaluate_reference, parse
from spool.server.expr.ast import render
from spool.server.expr.values import truth
from tests.unit.expr.helpers import same

CLOCK = VirtualClock(start=1_700_000_000.25)

KEYS = ["a", "b", "s", "arr", "o", "objs", "nul", "e"]
PATHS = [
    "/a",
    "/b",
    "/s",
    "/arr",
    "/arr[0]",
    "/arr[-1]",
    "/arr[2]",
    "/o/x",
    "/o/arr",
    "/o/arr[1]",
    "/objs/v",
    "/objs[0]/v",
    "/missing",
    "/nul",
    "/e",
    "/a[0]",
]
STRINGS = ["", "a", "B", "ab", "10", " 10 ", "2.5", "-3", "x y", "true", "FALSE", "1e2", "é"]
PATTERNS = ["a", "^a", "b$", "^$", r"\d", "(?i)AB", "1|2", ".", "^-?[0-9]+$", "é"]

# --- documents ---------------------------------------------------------------------------

# A small pool shared by documents and literals, so that equal values (the edge of every
# comparison) are common; the wider strategies after it find the odd values.
POOL: list[Any] = [None, True, False, 0, 1, 2, 10, -3, 0.5, 2.5, 10.0, "10", "a", "", "2.5"]
pool = st.sampled_from(POOL)
scalars = st.one_of(
    pool,
    pool,
    pool,
    st.none(),
    st.booleans(),
    st.integers(min_value=-5, max_value=12),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False, width=64),
    st.sampled_from([0.5, -0.0, 2.5, 10.0, 1e300]),
    st.sampled_from(STRINGS),
    st.text(alphabet="ab1 -.", max_size=4),
)
arrays = st.lists(st.one_of(scalars, st.lists(scalars, max_size=2)), max_size=4)
inner = st.fixed_dictionaries({}, optional={"x": scalars, "arr": arrays, "v": scalars})
documents = st.fixed_dictionaries(
    {},
    optional={
        "a": scalars,
        "b": scalars,
        "s": scalars,
        "arr": arrays,
        "o": st.one_of(inner, scalars),
        "objs": st.lists(st.one_of(inner, scalars), max_size=3),
        "nul": st.none(),
        "e": st.just(""),
    },
)

# --- expressions -------------------------------------------------------------------------


def _quote(s: str) -> str:
    return "'" + s.replace("\\", "\\\\").replace("'", "''") + "'"


def _literal(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, str):
        return _quote(value)
    return f"({value})" if value < 0 else str(value)


literals = st.one_of(
    pool.map(_literal),
    pool.map(_literal),
    st.integers(min_value=-3, max_value=12).map(str),
    st.sampled_from(["0.5", "2.5", "-0.0", "1e300", "10.0", "9223372036854775807", "1e999"]),
    st.sampled_from(STRINGS).map(_quote),
    st.sampled_from(["TRUE", "FALSE", "NULL", "NAN_VALUE()"]),
)
fields = st.sampled_from(PATHS)
COMPARE_OPS = ["=", "==", "!=", "<>", "<", "<=", ">", ">="]


def _values(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    unary_fns = [
        "UPPER",
        "LENGTH",
        "ABS",
        "ROUND",
        "CEILING",
        "TRIM",
        "ARRAY_COUNT",
        "ARRAY_SUM",
        "ARRAY_MAX",
        "ARRAY_MIN",
        "CRC32",
        "REVERSE",
        "SQRT",
    ]
    binary_fns = ["COALESCE", "CONCAT", "SUBSTR", "INSTR", "MOD", "POWER", "STARTS_WITH"]
    return st.one_of(
        st.tuples(children, st.sampled_from(["+", "-", "*", "/", "%"]), children).map(
            lambda t: f"({t[0]} {t[1]} {t[2]})"
        ),
        children.map(lambda c: f"(-{c})"),
        st.tuples(st.sampled_from(unary_fns), children).map(lambda t: f"{t[0]}({t[1]})"),
        st.tuples(st.sampled_from(binary_fns), children, children).map(
            lambda t: f"{t[0]}({t[1]}, {t[2]})"
        ),
        st.tuples(children, children, children).map(lambda t: f"IF({t[0]}, {t[1]}, {t[2]})"),
        st.sampled_from(["TOPIC()", "CLIENT_NAME()", "NOW()", "BOOKMARK()"]),
    )


values = st.recursive(st.one_of(fields, literals), _values, max_leaves=4)
value_lists = st.lists(values, min_size=1, max_size=4).map(", ".join)
constant_lists = st.lists(literals, min_size=1, max_size=5).map(", ".join)
fields_or_literals = st.one_of(fields, literals)
NOT = st.sampled_from(["", "NOT "])

base_predicates = st.one_of(
    st.tuples(values, st.sampled_from(COMPARE_OPS), values).map(
        lambda t: f"({t[0]} {t[1]} {t[2]})"
    ),
    st.tuples(fields, st.sampled_from(COMPARE_OPS), literals).map(
        lambda t: f"({t[0]} {t[1]} {t[2]})"
    ),
    st.tuples(fields, st.sampled_from(COMPARE_OPS), literals).map(
        lambda t: f"({t[0]} {t[1]} {t[2]})"
    ),
    st.tuples(fields, NOT, constant_lists).map(lambda t: f"({t[0]} {t[1]}IN ({t[2]}))"),
    st.tuples(literals, st.sampled_from(COMPARE_OPS), fields).map(
        lambda t: f"({t[0]} {t[1]} {t[2]})"
    ),
    st.tuples(values, NOT, st.one_of(value_lists, constant_lists)).map(
        lambda t: f"({t[0]} {t[1]}IN ({t[2]}))"
    ),
    st.tuples(values, NOT, values, values).map(
        lambda t: f"({t[0]} {t[1]}BETWEEN {t[2]} AND {t[3]})"
    ),
    st.tuples(values, NOT, literals, literals).map(
        lambda t: f"({t[0]} {t[1]}BETWEEN {t[2]} AND {t[3]})"
    ),
    st.tuples(values, NOT, st.sampled_from(PATTERNS)).map(
        lambda t: f"({t[0]} {t[1]}LIKE {_quote(t[2])})"
    ),
    st.tuples(values, st.sampled_from(["", "NOT "])).map(lambda t: f"({t[0]} IS {t[1]}NULL)"),
    st.tuples(values, NOT, st.sampled_from(["BEGINS", "ENDS"]), value_lists).map(
        lambda t: f"({t[0]} {t[1]}{t[2]} WITH ({t[3]}))"
    ),
    values,
)


def _logic(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.one_of(
        children.map(lambda c: f"(NOT {c})"),
        st.lists(children, min_size=2, max_size=4).map(lambda cs: "(" + " AND ".join(cs) + ")"),
        st.lists(children, min_size=2, max_size=4).map(lambda cs: "(" + " OR ".join(cs) + ")"),
        st.tuples(children, values, values).map(
            lambda t: f"(CASE WHEN {t[0]} THEN {t[1]} ELSE {t[2]} END)"
        ),
    )


predicates = st.recursive(base_predicates, _logic, max_leaves=6)


def _view(doc: dict[str, Any]) -> MessageView:
    return MessageView("t.orders", orjson.dumps(doc), bookmark="1|2|", client_name="pub")


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=predicates, doc=documents)
def test_compiled_filter_agrees_with_reference(text: str, doc: dict[str, Any]) -> None:
    view = _view(doc)
    expected = evaluate_reference(text, view, clock=CLOCK)
    got = compile_value(text, clock=CLOCK).evaluate(view)
    assert same(got, expected), (text, doc, got, expected)
    flt = compile_filter(text, clock=CLOCK)
    assert flt.matches(view) is (truth(expected) is True), (text, doc, expected)
    assert flt.errors == 0


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=values, doc=documents)
def test_compiled_value_agrees_with_reference(text: str, doc: dict[str, Any]) -> None:
    view = _view(doc)
    expr = compile_value(text, clock=CLOCK)
    assert same(expr.evaluate(view), evaluate_reference(text, view, clock=CLOCK)), text
    assert expr.errors == 0


@settings(max_examples=200, deadline=None)
@given(text=predicates)
def test_rendering_round_trips(text: str) -> None:
    tree = parse(text)
    assert parse(render(tree)) == tree
    assert render(parse(render(tree))) == render(tree)


@settings(max_examples=100, deadline=None)
@given(text=predicates, doc=documents)
def test_one_parse_per_message_across_filters(text: str, doc: dict[str, Any]) -> None:
    view = _view(doc)
    before = MessageView.parse_count()
    for extra in ("", " AND /a IS NOT NULL", " OR /objs/v = 1"):
        compile_filter(text + extra, clock=CLOCK).matches(view)
    assert MessageView.parse_count() - before <= 1


# --- focused: the specialised fast paths, one shape at a time ------------------------------

# Few distinct values, so that a document value equals a constant often.
FOCUS: list[Any] = [None, True, 0, 10, 10.0, 2.5, "10", " 10 ", "a", ""]
focus = st.sampled_from(FOCUS)
focus_or_any = st.one_of(focus, focus, focus, scalars)
focus_literals = st.one_of(focus.map(_literal), focus.map(_literal), literals)
focus_lists = st.lists(focus_literals, min_size=1, max_size=5).map(", ".join)
flat_documents = st.fixed_dictionaries(
    {"a": focus_or_any, "o": st.fixed_dictionaries({"x": focus_or_any})},
    optional={"arr": st.lists(focus_or_any, max_size=3)},
)
hot_fields = st.sampled_from(["/a", "/a", "/o/x", "/arr", "/arr[0]"])


def _agree(text: str, doc: dict[str, Any]) -> None:
    view = _view(doc)
    expected = evaluate_reference(text, view, clock=CLOCK)
    assert same(compile_value(text, clock=CLOCK).evaluate(view), expected), (text, doc)
    assert compile_filter(text, clock=CLOCK).matches(view) is (truth(expected) is True), text
    negated = f"NOT ({text})"
    assert compile_filter(negated, clock=CLOCK).matches(view) is (truth(expected) is False)


@settings(max_examples=300, deadline=None)
@given(
    field=hot_fields,
    op=st.sampled_from(COMPARE_OPS),
    literal=focus_literals,
    flip=st.booleans(),
    doc=flat_documents,
)
def test_field_constant_comparisons(
    field: str, op: str, literal: str, flip: bool, doc: dict[str, Any]
) -> None:
    _agree(f"{literal} {op} {field}" if flip else f"{field} {op} {literal}", doc)


@settings(max_examples=300, deadline=None)
@given(field=hot_fields, neg=NOT, items=focus_lists, doc=flat_documents)
def test_constant_in_lists(field: str, neg: str, items: str, doc: dict[str, Any]) -> None:
    _agree(f"{field} {neg}IN ({items})", doc)


@settings(max_examples=200, deadline=None)
@given(field=hot_fields, neg=NOT, low=focus_literals, high=focus_literals, doc=flat_documents)
def test_constant_between(field: str, neg: str, low: str, high: str, doc: dict[str, Any]) -> None:
    _agree(f"{field} {neg}BETWEEN {low} AND {high}", doc)


@settings(max_examples=150, deadline=None)
@given(field=hot_fields, neg=NOT, pattern=st.sampled_from(PATTERNS), doc=flat_documents)
def test_like(field: str, neg: str, pattern: str, doc: dict[str, Any]) -> None:
    _agree(f"{field} {neg}LIKE {_quote(pattern)}", doc)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=predicates, docs=st.lists(documents, min_size=1, max_size=8), data=st.data())
def test_select_agrees_with_matches(text: str, docs: list[dict[str, Any]], data: Any) -> None:
    """The batch form used by replays picks exactly the records matches() accepts, with
    each record's own topic, bookmark and timestamp."""
    flt = compile_filter(text, clock=CLOCK)
    bodies = [orjson.dumps(d) for d in docs] + [b"not json", b"[1]"]
    topics = [f"t.{i % 3}" for i in range(len(bodies))]
    indices = data.draw(
        st.lists(st.integers(0, len(bodies) - 1), unique=True).map(sorted), label="indices"
    )

    def bookmark(i: int) -> str:
        return f"7|{i}|"

    def stamp(i: int) -> str:
        return f"20240101T0000{i:02d}"

    want = [
        i
        for i in indices
        if flt.matches(MessageView(topics[i], bodies[i], bookmark=bookmark(i), timestamp=stamp(i)))
    ]
    assert flt.select(topics, bodies, indices, bookmark, stamp) == want


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    texts=st.lists(predicates, min_size=2, max_size=4),
    docs=st.lists(documents, min_size=1, max_size=8),
)
def test_filters_sharing_parsed_documents_select_what_each_selects_alone(
    texts: list[str], docs: list[dict[str, Any]]
) -> None:
    """The on-publish actions of one run share each parsed body: the same choice as
    without sharing, and a body is parsed at most once whatever the number of filters."""
    bodies = [orjson.dumps(d) for d in docs] + [b"not json", b"[1]"]
    topics = ["t"] * len(bodies)
    indices = range(len(bodies))
    filters = [compile_filter(text, clock=CLOCK) for text in texts]
    alone = [flt.select(topics, bodies, indices) for flt in filters]
    shared: list[dict[str, Any] | None] = [None] * len(bodies)
    before = MessageView.parse_count()
    together = [flt.select(topics, bodies, indices, documents=shared) for flt in filters]
    assert together == alone
    assert MessageView.parse_count() - before <= len(bodies)
