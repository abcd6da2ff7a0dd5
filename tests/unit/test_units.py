"""Sizes and durations: the table of docs/configuration.md "General rules", round-trips, and garbage refused."""

from __future__ import annotations

import math
import re
import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spool.server.protocol.errors import SpoolError
from spool.server.units import (
    DURATION_UNITS,
    SIZE_UNITS,
    UnitError,
    format_duration,
    format_size,
    parse_duration,
    parse_size,
)

KB = 1024
MB = 1024 * KB
GB = 1024 * MB


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("10MB", 10 * MB),
        ("512KB", 512 * KB),
        ("1GB", GB),
        ("2TB", 2 * 1024 * GB),
        ("100B", 100),
        ("100", 100),
        ("0", 0),
        ("64mb", 64 * MB),
        ("64 MB", 64 * MB),
        ("  16MB\n", 16 * MB),
        ("1KiB", KB),
        ("3MiB", 3 * MB),
        ("1.5KB", 1536),
        ("0.5GB", 512 * MB),
        ("007KB", 7 * KB),
    ],
)
def test_parse_size(text: str, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("100ms", 0.1),
        ("30us", 30e-6),
        ("30µs", 30e-6),
        ("15s", 15.0),
        ("5m", 300.0),
        ("2h", 7200.0),
        ("1d", 86400.0),
        ("1.5s", 1.5),
        ("15", 15.0),
        ("0.25", 0.25),
        ("3ms", 0.003),
        ("250ns", 250e-9),
        (" 10 s ", 10.0),
        ("0s", 0.0),
    ],
)
def test_parse_duration(text: str, expected: float) -> None:
    assert parse_duration(text) == expected


def test_durations_are_the_nearest_float_not_a_product() -> None:
    # 3 * 0.001 happens to be exact, 0.1 * 3 is not: the parser must not multiply floats.
    assert parse_duration("300ms") == 0.3
    assert parse_duration("0.7ms") == 0.0007


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "it is empty"),
        ("   ", "it is empty"),
        ("MB", "must start with a number"),
        ("-1MB", "a sign is not allowed"),
        ("+1MB", "a sign is not allowed"),
        ("10XB", "unknown unit 'XB'"),
        ("10 M B", "expected a number followed by one unit"),
        ("1.1KB", "not a whole number of bytes"),
        ("1e3", "expected a number followed by one unit"),
        ("1..5KB", "expected a number followed by one unit"),
        ("10MB5", "expected a number followed by one unit"),
        ("1,024", "expected a number followed by one unit"),
        ("0.5B", "not a whole number of bytes"),
        (".5KB", "must start with a number"),
    ],
)
def test_bad_sizes(text: str, reason: str) -> None:
    with pytest.raises(UnitError) as info:
        parse_size(text)
    err = info.value
    assert err.kind == "size"
    assert err.text == text
    assert reason in err.reason
    assert str(err) == f"{text!r} is not a valid size: {err.reason}"


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "it is empty"),
        ("s", "must start with a number"),
        ("-1s", "a sign is not allowed"),
        ("15S", "did you mean 's'"),
        ("10MS", "did you mean 'ms'"),
        ("1w", "unknown unit 'w'"),
        ("1 parsec", "unknown unit 'parsec'"),
        ("1h30m", "expected a number followed by one unit"),
        ("1e3ms", "expected a number followed by one unit"),
        ("inf", "must start with a number"),
        ("nan", "must start with a number"),
        ("1" + "0" * 400 + "d", "it is too large"),
    ],
)
def test_bad_durations(text: str, reason: str) -> None:
    with pytest.raises(UnitError) as info:
        parse_duration(text)
    assert info.value.kind == "duration"
    assert reason in info.value.reason


def test_unit_error_is_a_spool_error_and_a_value_error() -> None:
    with pytest.raises(SpoolError):
        parse_size("x")
    with pytest.raises(ValueError):
        parse_duration("x")


@pytest.mark.parametrize(
    ("n", "text"),
    [(0, "0B"), (1, "1B"), (1023, "1023B"), (1024, "1KB"), (1536, "1536B"), (64 * MB, "64MB")],
)
def test_format_size(n: int, text: str) -> None:
    assert format_size(n) == text


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0.0, "0s"),
        (0.001, "1ms"),
        (30e-6, "30us"),
        (1.5, "1500ms"),
        (10.0, "10s"),
        (300.0, "5m"),
        (7200.0, "2h"),
        (7 * 86400.0, "7d"),
        (0.30000000000000004, "0.30000000000000004s"),
    ],
)
def test_format_duration(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


@pytest.mark.parametrize("bad", [-1.0, math.inf, math.nan])
def test_format_duration_refuses_impossible_values(bad: float) -> None:
    with pytest.raises(UnitError):
        format_duration(bad)


def test_format_size_refuses_negative() -> None:
    with pytest.raises(UnitError):
        format_size(-1)


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=0, max_value=2**60))
def test_size_round_trip(n: int) -> None:
    assert parse_size(format_size(n)) == n


@settings(max_examples=200, deadline=None)
@given(st.floats(min_value=0.0, allow_nan=False, allow_infinity=False))
def test_duration_round_trip(seconds: float) -> None:
    assert parse_duration(format_duration(seconds)) == seconds


@settings(max_examples=200, deadline=None)
@given(
    st.integers(min_value=0, max_value=10**6),
    st.sampled_from(sorted(SIZE_UNITS)),
)
def test_size_with_any_unit_spelling(count: int, unit: str) -> None:
    assert parse_size(f"{count}{unit}") == count * SIZE_UNITS[unit]
    assert parse_size(f"{count}{unit.lower()}") == count * SIZE_UNITS[unit]


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=0, max_value=10**6), st.sampled_from(sorted(DURATION_UNITS)))
def test_duration_with_any_unit(count: int, unit: str) -> None:
    assert parse_duration(f"{count}{unit}") == float(count * DURATION_UNITS[unit])


_GARBAGE = st.text(alphabet=string.printable + "µ€-", max_size=12)


@settings(max_examples=300, deadline=None)
@given(_GARBAGE)
def test_garbage_is_refused_or_well_formed(text: str) -> None:
    """Anything accepted has the documented shape; everything else raises UnitError."""
    shape = re.compile(r"\s*[0-9]+(\.[0-9]+)?\s*[^\s0-9.]*\s*")
    for parse in (parse_size, parse_duration):
        try:
            value = parse(text)
        except UnitError as exc:
            assert exc.text == text
        else:
            assert shape.fullmatch(text), text
            assert value >= 0


@settings(max_examples=200, deadline=None)
@given(
    st.integers(min_value=1, max_value=10**6),
    st.text(alphabet=string.ascii_letters, min_size=1, max_size=4),
)
def test_unknown_units_are_refused(count: int, unit: str) -> None:
    if unit.upper() not in SIZE_UNITS:
        with pytest.raises(UnitError, match="unknown unit"):
            parse_size(f"{count}{unit}")
    if unit not in DURATION_UNITS:
        with pytest.raises(UnitError, match="unknown unit"):
            parse_duration(f"{count}{unit}")
