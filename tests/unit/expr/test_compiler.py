"""The public API the engine relies on: compile_filter, Filter, ValueExpr, caches, clock."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from spool.server.clock import VirtualClock
from spool.server.expr import (
    CACHE_SIZE,
    Filter,
    FilterSyntaxError,
    MessageView,
    ValueExpr,
    cache_sizes,
    clear_caches,
    compile_filter,
    compile_value,
)
from spool.server.protocol.errors import BadFilter


def view(doc: dict[str, Any], topic: str = "t") -> MessageView:
    return MessageView(topic, orjson.dumps(doc))


def test_filter_api() -> None:
    flt = compile_filter("/qty > 100 AND /sym = 'IBM' OR /legs[0]/px < 1")
    assert isinstance(flt, Filter)
    assert flt.text == "/qty > 100 AND /sym = 'IBM' OR /legs[0]/px < 1"
    assert flt.paths == frozenset({"/qty", "/sym", "/legs[0]/px"})
    assert flt.reads_body
    assert flt.matches(view({"qty": 101, "sym": "IBM"})) is True
    assert flt.matches(view({"qty": 100, "sym": "IBM"})) is False
    assert flt.matches(view({"legs": [{"px": 0.5}]})) is True
    assert flt.matches(view({})) is False
    assert not compile_filter("TOPIC() = 'x'").reads_body


def test_syntax_errors_are_bad_filter() -> None:
    with pytest.raises(BadFilter) as info:
        compile_filter("/qty >")
    assert isinstance(info.value, FilterSyntaxError)
    assert info.value.position == 7
    assert info.value.message == "expected a value after '>'"


def test_non_text_is_a_bad_filter() -> None:
    with pytest.raises(FilterSyntaxError):
        compile_filter(b"/a = 1")  # type: ignore[arg-type]


def test_cache_returns_the_same_object() -> None:
    a = compile_filter("/cache_probe = 1")
    b = compile_filter("/cache_probe = 1")
    assert a is b
    assert a == b
    assert hash(a) == hash(b)
    assert compile_value("/cache_probe") is compile_value("/cache_probe")


def test_cache_is_bounded() -> None:
    clear_caches()
    first = compile_filter("/bounded = 0")
    for i in range(1, CACHE_SIZE + 10):
        compile_filter(f"/bounded = {i}")
    filters, _ = cache_sizes()
    assert filters == CACHE_SIZE
    again = compile_filter("/bounded = 0")
    assert again is not first
    assert again == first


def test_recently_used_entries_survive() -> None:
    clear_caches()
    keep = compile_filter("/keep = 1")
    for i in range(CACHE_SIZE + 10):
        compile_filter(f"/churn = {i}")
        if i % 100 == 0:
            assert compile_filter("/keep = 1") is keep
    assert compile_filter("/keep = 1") is keep


def test_clock_is_injected_and_keyed() -> None:
    clock_a = VirtualClock(start=1000.0)
    clock_b = VirtualClock(start=2000.0)
    text = "NOW() >= 1500"
    a = compile_filter(text, clock=clock_a)
    b = compile_filter(text, clock=clock_b)
    assert a is not b
    assert a != b
    v = view({})
    assert not a.matches(v)
    assert b.matches(v)
    assert compile_value("UNIX_TIMESTAMP()", clock=clock_a).evaluate(v) == 1000.0


def test_now_follows_the_virtual_clock() -> None:
    clock = VirtualClock(start=1000.0)
    flt = compile_filter("NOW() - 1000 >= 5", clock=clock)
    v = view({})
    assert not flt.matches(v)
    asyncio.run(clock.advance(5))
    assert flt.matches(v)


def test_value_expressions() -> None:
    expr = compile_value("CONCAT(/sym, ':', /venue)")
    assert isinstance(expr, ValueExpr)
    assert expr.paths == frozenset({"/sym", "/venue"})
    assert expr.evaluate(view({"sym": "IBM", "venue": "X"})) == "IBM:X"
    assert expr.evaluate(view({"sym": "IBM"})) == "IBM:"
    assert compile_value("/legs").evaluate(view({"legs": [1, 2]})) == [1, 2]
    assert compile_value("/o").evaluate(view({"o": {"k": 1}})) == {"k": 1}


def test_runtime_problems_are_null_never_exceptions() -> None:
    v = view({"a": 0, "s": "x", "big": 10**18, "arr": [], "f": 1e308})
    for text in (
        "1 / /a = 1",
        "/s * 2 = 0",
        "POWER(/big, /big) > 0",
        "POWER(10, 100000) > 0",
        "/f * /f * /f > 0",
        "EXP(/big) > 0",
        "ROUND(/f, -100000000) = 0",
        "SUBSTR(/s, /big) = ''",
        "CHAR_VALUE(-1) IS NULL",
        "FROM_UNIXTIME(/big * /big) IS NULL",
        "LENGTH(CONCAT(POWER(2, 3000))) > 0",
        "CRC32('\\uD800') IS NULL",
        "REGEXP_MATCH(/s, CONCAT('(', /s))",
        "ARRAY_MAX(/arr) IS NULL",
        "ISO8601(1e20) IS NULL",
        "LOG(-1) IS NULL",
        "MOD(/f, 0) IS NULL",
    ):
        flt = compile_filter(text)
        flt.matches(v)
        assert flt.errors == 0, text
        expr = compile_value(text)
        expr.evaluate(v)
        assert expr.errors == 0, text


def test_an_internal_failure_is_contained() -> None:
    flt = compile_filter("/contained = 1")

    class Broken(MessageView):
        __slots__ = ()

        def load(self) -> dict[str, Any]:
            raise RuntimeError("boom")

    broken = Broken("t", b"{}")
    assert flt.matches(broken) is False
    assert flt.errors == 1
    expr = compile_value("/contained")
    assert expr.evaluate(broken) is None
    assert expr.errors == 1


def test_a_thousand_filters_share_one_parse() -> None:
    filters = [compile_filter(f"/qty > {i} AND /sym = 'S{i % 7}'") for i in range(1000)]
    bodies = [orjson.dumps({"qty": q, "sym": f"S{q % 7}", "pad": "x" * 900}) for q in range(50)]
    before = MessageView.parse_count()
    delivered: list[int] = []
    for body in bodies:
        v = MessageView("orders", body)
        delivered.append(sum(1 for f in filters if f.matches(v)))
    assert MessageView.parse_count() - before == len(bodies)
    # Oracle: message q matches filters i < q with i % 7 == q % 7.
    assert delivered == [sum(1 for i in range(q) if i % 7 == q % 7) for q in range(50)]
