"""The view definition language: what parses to what, and what is refused and why."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spool.server.views import ViewDefinitionError, parse_definition


def test_items_parse_to_copies_aggregates_and_computed_fields() -> None:
    d = parse_definition(
        [
            "/desk",
            "/symbol AS /sym",
            "SUM(/qty) AS /position",
            "count(*) as /fills",
            "AVG(/px) AS /avg",
            "MIN(/px) AS /low",
            "MAX(/px) AS /high",
            "SUM(/qty * /px) / SUM(/qty) AS /vwap",
            "CONCAT(/desk, '-', /symbol) AS /name",
            "SUM(/qty) * 2 AS /stats/double",
        ],
        ["/desk", "/symbol"],
        "/status = 'filled'",
    )
    kinds = [(i.out_text, i.kind, i.index) for i in d.projection]
    assert kinds == [
        ("/desk", "group", 0),
        ("/sym", "group", 1),
        ("/position", "aggregate", 0),
        ("/fills", "aggregate", 1),
        ("/avg", "aggregate", 2),
        ("/low", "aggregate", 3),
        ("/high", "aggregate", 4),
        ("/vwap", "computed", -1),
        ("/name", "computed", -1),
        ("/stats/double", "computed", -1),
    ]
    # the same call in two items is one aggregate
    assert [a.text for a in d.aggregates] == [
        "SUM(/qty)",
        "COUNT(*)",
        "AVG(/px)",
        "MIN(/px)",
        "MAX(/px)",
        "SUM((/qty * /px))",
    ]
    assert d.grouping_text == ("/desk", "/symbol")
    assert d.filter == "/status = 'filled'"
    vwap = d.projection[7]
    assert sorted(d.slots(vwap).values()) == [0, 5]
    assert len(vwap.expression) == len(vwap.text) - len(" AS /vwap")


def test_a_blank_filter_is_no_filter() -> None:
    assert parse_definition(["/a"], ["/a"], "  ").filter is None


@pytest.mark.parametrize(
    ("projection", "grouping", "flt", "part", "says"),
    [
        (
            ["/desk", "/qty"],
            ["/desk"],
            None,
            "projection",
            "/qty at column 1 is not a grouping field",
        ),
        (["/desk", "/qty + 1 AS /q"], ["/desk"], None, "projection", "not a grouping field"),
        (["SUM(/qty) + /px AS /x"], ["/d"], None, "projection", "/px at column 13 is not"),
        (["SUM(/qty)"], ["/d"], None, "projection", "write SUM(/qty) AS /name"),
        (["UPPER(/d)"], ["/d"], None, "projection", "a computed field needs an output"),
        (["MEDIAN(/px) AS /m"], ["/d"], None, "projection", "unknown function 'MEDIAN'"),
        (["SUMM(/px) AS /m"], ["/d"], None, "projection", "did you mean SUM?"),
        (["SUM(MAX(/px)) AS /m"], ["/d"], None, "projection", "inside another aggregate"),
        (["SUM(/a, /b) AS /m"], ["/d"], None, "projection", "takes one argument"),
        (["SUM() AS /m"], ["/d"], None, "projection", "needs an argument"),
        (["SUM(*) AS /m"], ["/d"], None, "projection", "only COUNT(*) counts records"),
        (["SUM(/a AS /m"], ["/d"], None, "projection", "is not closed"),
        (["SUM(/a) AS"], ["/d"], None, "projection", "must be followed by the output field"),
        (["SUM(/a) AS /m /n"], ["/d"], None, "projection", "must be followed by the output"),
        (["AS /m"], ["/d"], None, "projection", "expected an expression before AS"),
        (["SUM(/a) AS /m[0]"], ["/d"], None, "projection", "cannot hold an array index"),
        (["SUM(/a) AS /m", "MAX(/a) AS /m"], ["/d"], None, "projection", "also written by"),
        (["SUM(/a) AS /m", "MAX(/a) AS /m/x"], ["/d"], None, "projection", "overlap"),
        (["/d", "COUNT(*) AS /d"], ["/d"], None, "projection", "also written by"),
        (["SUM(/a > ) AS /m"], ["/d"], None, "projection", "at column 10"),
        (["NOW() AS /t"], ["/d"], None, "projection", "reads the message or the clock"),
        (["SUM(UNIX_TIMESTAMP()) AS /t"], ["/d"], None, "projection", "or the clock"),
        ([""], ["/d"], None, "projection", "empty"),
        ([], ["/d"], None, "projection", "at least one projection item"),
        (["/d"], [], None, "grouping", "at least one grouping field"),
        (["/d"], ["/d", "/d"], None, "grouping", "listed twice"),
        (["/d"], ["/d + 1"], None, "grouping", "one field path"),
        (["/d"], ["d"], None, "grouping", "one field path"),
        (["/d[0]"], ["/d[0]"], None, "grouping", "array index"),
        (["/d"], ["/d"], "SUM(/a) > 3", "filter", "aggregates are not allowed in a filter"),
        (["/d"], ["/d"], "/a >", "filter", "expected a value"),
        (["/d"], ["/d"], "TOPIC() = 'x'", "filter", "reads the message"),
        (["/d"], ["/d"], "FOO(/a)", "filter", "unknown function 'FOO'"),
    ],
)
def test_bad_definitions_are_refused_with_a_reason(
    projection: list[str], grouping: list[str], flt: str | None, part: str, says: str
) -> None:
    with pytest.raises(ViewDefinitionError) as info:
        parse_definition(projection, grouping, flt)
    assert info.value.part == part
    assert says in str(info.value)


def test_one_string_is_not_a_projection() -> None:
    with pytest.raises(TypeError):
        parse_definition("/a", ["/a"])  # type: ignore[arg-type]


_PIECES = st.sampled_from(
    [
        "SUM",
        "COUNT",
        "AVG",
        "MIN",
        "MAX",
        "(",
        ")",
        "/a",
        "/b",
        "/g",
        "*",
        "+",
        " AS ",
        "AS",
        "/out",
        ",",
        "1",
        "'x'",
        "UPPER",
        "NOW()",
        " ",
        "[0]",
        "IF",
    ]
)


@given(st.lists(st.lists(_PIECES, max_size=10).map("".join), min_size=1, max_size=3))
def test_any_text_parses_or_is_refused_cleanly(items: list[str]) -> None:
    try:
        d = parse_definition(items, ["/g"])
    except ViewDefinitionError:
        return
    assert len(d.projection) == len(items)
    outs = [i.out for i in d.projection]
    assert len(set(outs)) == len(outs)
