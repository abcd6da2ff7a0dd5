"""The expression budget: no input compiles or evaluates beyond it.

Work is measured in units that do not depend on the machine's speed: Python function
calls (C functions included) seen by ``sys.setprofile``, and the peak of the memory
allocated (``tracemalloc``). A backtracking regular expression is one C call however long
it runs, so linear-time matching has its own tests (tests/unit/test_regex.py); everything
else an expression could make expensive -- its size, its nesting, its ``IN`` lists,
strings built by nested functions, constant folding at compile time -- shows up in these
units, and the bounds below are linear in the expression's tokens.
"""

from __future__ import annotations

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spool.server.expr import FilterSyntaxError, MessageView, compile_filter, compile_value
from spool.server.expr.budget import REGEX_PROGRAM_MAX, TEXT_MAX, TOKENS_MAX
from spool.server.expr.cache import clear_caches
from spool.server.expr.lexer import tokenize
from tests.unit.expr.helpers import expression_work as _work
from tests.unit.expr.helpers import work_memory_bound

#: Python calls allowed per token to compile an expression (measured: under 60)
CALLS_PER_TOKEN_COMPILE = 400
#: Python calls allowed per token and nesting level to evaluate one message
CALLS_PER_TOKEN_EVAL = 60
_BODY = {
    "a": 7,
    "s": "a" * 2000 + "!",
    "t": "ab,cd,ef",
    "arr": ["a" * 100] * 50,
    "n": None,
}
BODY = orjson.dumps(_BODY)


def _tokens(text: str) -> int:
    try:
        return len(tokenize(text))
    except FilterSyntaxError:
        return len(text)


# -- the expressions: ordinary and hostile pieces, nested at random ----------------------------

_PATTERNS = st.sampled_from(
    ["^(a+)+$", "(a|aa)+!", "^(\\w+\\s?)*$", "a{1000}", "IBM|MSFT", "^a", "a$", "(x+x+)+y"]
)
_LEAVES = st.one_of(
    st.sampled_from(["/a", "/s", "/t", "/n", "/arr", "/missing", "1", "2.5", "NULL", "'a'"]),
    st.integers(0, 3000).map(lambda n: "'" + "a" * n + "'"),
    st.integers(1, 200).map(lambda n: "/x IN (" + ",".join(str(i) for i in range(n)) + ")"),
)


def _grow(kids: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.one_of(
        st.tuples(kids, kids).map(lambda p: f"CONCAT({p[0]}, {p[1]})"),
        st.tuples(kids, kids).map(lambda p: f"REPLACE({p[0]}, 'a', {p[1]})"),
        st.tuples(kids, kids).map(lambda p: f"ARRAY_TO_STRING(/arr, {p[0]} || {p[1]})"),
        kids.map(lambda k: f"UPPER({k})"),
        kids.map(lambda k: f"LENGTH({k})"),
        st.tuples(kids, _PATTERNS).map(lambda p: f"({p[0]} LIKE '{p[1]}')"),
        st.tuples(kids, _PATTERNS).map(lambda p: f"REGEXP_MATCH({p[0]}, '{p[1]}')"),
        st.tuples(kids, kids).map(lambda p: f"REGEXP_MATCH({p[0]}, {p[1]})"),
        st.tuples(kids, kids).map(lambda p: f"({p[0]} AND {p[1]})"),
        st.tuples(kids, kids).map(lambda p: f"({p[0]} OR NOT {p[1]})"),
        st.tuples(kids, kids).map(lambda p: f"({p[0]} * {p[1]} + 1)"),
        st.tuples(kids, kids).map(lambda p: f"({p[0]} = {p[1]})"),
        st.tuples(kids, kids).map(lambda p: f"({p[0]} IN ({p[1]}, {p[0]}))"),
        kids.map(lambda k: f"POWER({k}, 100000)"),
    )


def _chain(args: tuple[int, str, int, bool]) -> str:
    """Nested growing functions: each level multiplies the string's length."""
    depth, start, grow, arrays = args
    text = start
    for level in range(depth):
        if arrays and level % 2:
            text = f"ARRAY_TO_STRING(/arr, {text})"
        else:
            text = f"REPLACE({text}, 'a', '{'a' * grow}')"
    return text


_CHAINS = st.tuples(
    st.integers(1, 30), st.sampled_from(["/s", "'aaaa'", "/t"]), st.integers(2, 64), st.booleans()
).map(_chain)
EXPRESSIONS = st.one_of(
    st.recursive(_LEAVES, _grow, max_leaves=40),
    st.recursive(_CHAINS, _grow, max_leaves=4),
)


@settings(
    max_examples=250,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(EXPRESSIONS)
def test_no_expression_compiles_or_evaluates_beyond_the_budget(text: str) -> None:
    clear_caches()
    tokens = _tokens(text)
    calls, peak, flt = _work(lambda: compile_filter(text))
    assert calls <= CALLS_PER_TOKEN_COMPILE * tokens + 20_000, (calls, tokens)
    assert peak <= work_memory_bound(text, BODY), (peak, text[:200])
    if isinstance(flt, FilterSyntaxError):
        return
    calls, peak, _ = _work(lambda: flt.matches(MessageView("t", BODY)))
    assert calls <= CALLS_PER_TOKEN_EVAL * tokens * 64 + 10_000, (calls, tokens)
    assert peak <= work_memory_bound(text, BODY), (peak, text[:200])
    value = compile_value(text)
    _, peak, _ = _work(lambda: value.evaluate(MessageView("t", BODY)))
    assert peak <= work_memory_bound(text, BODY), (peak, text[:200])


def _replace_chain(depth: int, start: str) -> str:
    text = start
    for _ in range(depth):
        text = f"REPLACE({text}, 'a', 'aaaa')"
    return text


@pytest.mark.parametrize("start", ["'aaaaaaaa'", "/s"])
def test_a_chain_of_growing_replaces_stops_at_the_build_limit(start: str) -> None:
    """Each REPLACE quadruples the string: 30 of them would build 2**60 characters."""
    text = f"LENGTH({_replace_chain(30, start)})"
    _, peak, value = _work(lambda: compile_value(text))
    assert not isinstance(value, FilterSyntaxError)
    assert peak <= work_memory_bound(text, BODY)
    _, peak, result = _work(lambda: value.evaluate(MessageView("t", BODY)))
    assert result is None  # NULL: the string it asked for is longer than the limit
    assert peak <= work_memory_bound(text, BODY)
    # a growth that stays under the limit is computed: 2,000 a's and a '!' make 32,001
    # characters after two REPLACEs
    short = compile_value(f"LENGTH({_replace_chain(2, start)})")
    expected = 8 * 16 if start.startswith("'") else 2000 * 16 + 1
    assert short.evaluate(MessageView("t", BODY)) == expected


def test_array_to_string_with_a_huge_delimiter_stops_at_the_build_limit() -> None:
    big = "'" + "x" * 60_000 + "'"
    value = compile_value(f"LENGTH(ARRAY_TO_STRING(/arr, {big}))")
    assert value.evaluate(MessageView("t", BODY)) is None
    assert compile_value("ARRAY_TO_STRING(/arr, ',')").evaluate(MessageView("t", BODY)) == (
        ",".join(["a" * 100] * 50)
    )


def test_a_growth_within_the_longest_input_is_always_computed() -> None:
    body = orjson.dumps({"csv": ",".join(["x"] * 100_000)})  # 200 KB, above BUILD_MAX
    value = compile_value("LENGTH(REPLACE(/csv, ',', ';'))")
    assert value.evaluate(MessageView("t", body)) == 199_999


def test_too_long_a_text_is_refused_before_it_is_read() -> None:
    text = "/a = '" + "x" * TEXT_MAX + "'"
    calls, _, result = _work(lambda: compile_filter(text))
    assert isinstance(result, FilterSyntaxError)
    assert f"more than {TEXT_MAX}" in result.message
    assert calls < 100


def test_too_many_tokens_are_refused_before_parsing() -> None:
    text = "/a IN (" + ",".join("1" for _ in range(TOKENS_MAX // 2 + 10)) + ")"
    assert len(text) <= TEXT_MAX
    with pytest.raises(FilterSyntaxError, match=f"more than {TOKENS_MAX}"):
        compile_filter(text)
    # an IN list of 20,000 values fits
    compile_filter("/a IN (" + ",".join(str(i) for i in range(20_000)) + ")")


def test_regular_expressions_have_one_budget_for_the_whole_filter() -> None:
    big = "[a-q][^u-z]{13}" * 12  # about 2,000 instructions each
    text = " OR ".join(f"/s LIKE '{big}'" for _ in range(20))
    with pytest.raises(FilterSyntaxError, match=f"more than {REGEX_PROGRAM_MAX}") as info:
        compile_filter(text)
    # refused at the first pattern past the total, not after compiling all twenty
    assert info.value.position < len(text) * 3 // 4
    mixed = " OR ".join(f"REGEXP_MATCH(/s, '{big}')" for _ in range(20))
    with pytest.raises(FilterSyntaxError, match=f"more than {REGEX_PROGRAM_MAX}"):
        compile_filter(mixed)


def test_the_issue_filter_compiles_and_evaluates_at_once() -> None:
    """The constant is folded at compile time: linear time makes it a few steps."""
    flt = compile_filter("REGEXP_MATCH('aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!', '^(a+)+$')")
    assert not flt.matches(MessageView("t", b"{}"))
    flt = compile_filter("/v LIKE '^(a+)+$'")
    assert not flt.matches(MessageView("t", orjson.dumps({"v": "a" * 100_000 + "!"})))


@pytest.mark.parametrize(
    ("text", "construct"),
    [
        (r"/s LIKE '(a)\1'", "backreference"),
        ("/s LIKE 'a(?=b)'", "lookahead"),
        ("REGEXP_MATCH(/s, '(?<=a)b')", "lookbehind"),
        ("/s NOT LIKE '(?>a+)b'", "atomic group"),
    ],
)
def test_a_construct_re2_refuses_is_a_bad_filter_naming_it(text: str, construct: str) -> None:
    with pytest.raises(FilterSyntaxError, match=f"{construct}.* is not supported") as info:
        compile_filter(text)
    assert info.value.reason == "bad filter"
