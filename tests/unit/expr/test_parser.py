"""The parser: tree shapes (precedence), errors a person can act on, limits."""

from __future__ import annotations

import pytest

from spool.server.expr import FilterSyntaxError, compile_filter, parse
from spool.server.expr.ast import MAX_DEPTH, And, Case, Comparison, Literal, Or, render
from spool.server.protocol.errors import BadFilter


@pytest.mark.parametrize(
    ("text", "shape"),
    [
        ("/a = 1 OR /b = 2 AND /c = 3", "((/a = 1) OR ((/b = 2) AND (/c = 3)))"),
        ("NOT /a = 1 AND /b", "((NOT (/a = 1)) AND /b)"),
        ("NOT NOT /a", "(NOT (NOT /a))"),
        ("1 + 2 * 3 - 4 / 5 % 6", "((1 + (2 * 3)) - ((4 / 5) % 6))"),
        ("-/a * 2", "((-/a) * 2)"),
        ("- 5 * 2", "((-5) * 2)"),
        ("-(5)", "(-(5))"),
        ("/a + 1 > /b * 2", "((/a + 1) > (/b * 2))"),
        ("/a BETWEEN 1 + 1 AND 5 AND /b", "((/a BETWEEN (1 + 1) AND 5) AND /b)"),
        ("/a NOT IN (1, 2) OR /b NOT LIKE 'x'", "((/a NOT IN (1, 2)) OR (/b NOT LIKE 'x'))"),
        ("/a IS NOT NULL AND /b IS NULL", "((/a IS NOT NULL) AND (/b IS NULL))"),
        (
            "/a BEGINS WITH ('x') OR /a ENDS WITH ('y', 'z')",
            "((/a BEGINS WITH ('x')) OR (/a ENDS WITH ('y', 'z')))",
        ),
        ("if(/a, 1)", "(CASE WHEN /a THEN 1 END)"),
        (
            "case when /a then 1 when /b then 2 else 3 end",
            "(CASE WHEN /a THEN 1 WHEN /b THEN 2 ELSE 3 END)",
        ),
        ("(((/a)))", "/a"),
        ("upper(/a) = 'X'", "(UPPER(/a) = 'X')"),
        ("/a == 1 AND /b <> 2 AND /c != 3", "((/a == 1) AND (/b <> 2) AND (/c != 3))"),
    ],
)
def test_precedence(text: str, shape: str) -> None:
    assert render(parse(text)) == shape


def test_and_or_chains_are_flat() -> None:
    tree = parse(" AND ".join(f"/f{i} = {i}" for i in range(500)))
    assert isinstance(tree, And)
    assert len(tree.items) == 500
    assert tree.depth == 3
    tree = parse(" OR ".join(f"/f{i} = {i}" for i in range(3)))
    assert isinstance(tree, Or)
    assert all(isinstance(i, Comparison) for i in tree.items)


def test_negative_number_literals_fold() -> None:
    assert parse("-5") == Literal(-5, pos=1)
    assert parse("-2.5") == Literal(-2.5, pos=1)


def test_if_is_sugar_for_case() -> None:
    assert isinstance(parse("IF(/a, 1, 2)"), Case)


@pytest.mark.parametrize(
    ("text", "message", "position"),
    [
        ("/qty > 100 AND /sym =", "expected a value after '='", 22),
        ("/qty >", "expected a value after '>'", 7),
        ("/qty > 100 AND", "expected a value after 'AND'", 15),
        ("/qty > )", "expected a value after '>', found ')'", 8),
        ("AND /a", "expected a value, found the keyword AND", 1),
        ("/a = = 1", "expected a value after '='", 6),
        ("", "the filter is empty", 1),
        ("   ", "the filter is empty", 4),
        ("ibm = 'x'", "unknown word 'ibm': field paths start with '/'", 1),
        ("FOO(/a)", "unknown function 'FOO'", 1),
        ("/a = UPPR(/b)", "unknown function 'UPPR' (did you mean UPPER?)", 6),
        ("UPPER(/a, /b)", "UPPER takes 1 argument, got 2", 1),
        ("SUBSTR(/a)", "SUBSTR takes 2 or 3 arguments, got 1", 1),
        ("NOW(1)", "NOW takes no arguments, got 1", 1),
        ("CONCAT()", "CONCAT takes at least 1 argument, got 0", 1),
        ("IF(/a)", "IF takes 2 or 3 arguments", 1),
        ("/a LIKE '('", "bad regular expression in LIKE", 9),
        ("/a NOT LIKE '[a-'", "bad regular expression in NOT LIKE", 13),
        ("/a LIKE /b", "LIKE needs a quoted regular expression", 9),
        ("REGEXP_MATCH(/a, '*')", "bad regular expression in REGEXP_MATCH", 18),
        ("DATEDIFF('fortnights', 0, 1)", "unknown DATEDIFF unit 'fortnights'", 10),
        ("(/a = 1", "the '(' at column 1 is not closed", 8),
        ("/a = 1)", "unbalanced ')'", 7),
        ("/a = 1 = 2", "comparisons do not chain", 8),
        ("/a = 1 /b = 2", "'/b' follows a complete value, so its '/' divides", 8),
        ("/a = 1 / = 2", "expected a value after '/', found '='", 10),
        ("/a = 1 2", "unexpected '2' after a complete expression", 8),
        ("/a IN 1, 2", "expected '(' after IN", 7),
        ("/a IN ()", "the list after IN is empty", 8),
        ("/a IN (1 2)", "expected ',' or ')' in the list after IN", 10),
        ("/a BETWEEN 1 OR 2", "expected AND between the bounds of BETWEEN", 14),
        ("/a IS 1", "expected NULL after IS", 7),
        ("/a IS NOT 1", "expected NULL after IS NOT", 11),
        ("/a BEGINS 'x'", "expected WITH after BEGINS", 11),
        ("CASE /a THEN 1 END", "expected WHEN after CASE", 6),
        ("CASE WHEN /a THEN 1", "expected END to close CASE", 20),
        ("CASE WHEN /a 1 END", "expected THEN after the WHEN condition", 14),
        ("UPPER(/a", "expected ',' or ')' in the arguments of UPPER", 9),
    ],
)
def test_errors_say_what_and_where(text: str, message: str, position: int) -> None:
    with pytest.raises(FilterSyntaxError) as info:
        parse(text)
    err = info.value
    assert message in err.message
    assert err.position == position
    assert isinstance(err, BadFilter)
    assert err.reason == "bad filter"
    assert str(err) == f"bad filter: {err.message} at column {position}"


def test_error_pointer_marks_the_column() -> None:
    with pytest.raises(FilterSyntaxError) as info:
        parse("/qty > 100 AND /sym =")
    assert info.value.pointer().splitlines() == ["/qty > 100 AND /sym =", " " * 21 + "^"]


def test_nesting_is_limited_not_a_crash() -> None:
    ok = "(" * (MAX_DEPTH - 2) + "/a" + ")" * (MAX_DEPTH - 2)
    parse(ok)
    for deep in (
        "(" * 5000 + "/a" + ")" * 5000,
        "NOT " * 5000 + "/a",
        "-" * 5000 + "/a",
        "UPPER(" * 5000 + "/a" + ")" * 5000,
        " + ".join(["1"] * 5000),
    ):
        with pytest.raises(FilterSyntaxError) as info:
            compile_filter(deep)
        assert "nested too deeply" in info.value.message


def test_long_flat_lists_are_fine() -> None:
    items = ", ".join(str(i) for i in range(10_000))
    flt = compile_filter(f"/a IN ({items})")
    assert flt.paths == frozenset({"/a"})
