"""Publish options (docs/protocol.md "Publish options"): the grammar accepted, every
refusal with its detail, and round trips of generated valid options (hypothesis)."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from spool.server.bookmarks import parse_moment_us
from spool.server.protocol.commands import CommandOptions, decode_command
from spool.server.protocol.errors import InvalidOptions
from spool.server.protocol.message import Message
from spool.server.protocol.options import (
    NO_PUBLISH_OPTIONS,
    PublishOptions,
    parse_publish_options,
)

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
NAMES = ("deliver_at", "deliver_after")
UNITS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def refusal(text: str) -> str:
    """The detail of the ``invalid options`` that ``text`` is refused with."""
    with pytest.raises(InvalidOptions) as info:
        parse_publish_options(text)
    assert info.value.reason == "invalid options"
    return info.value.detail


def moment_text(moment: datetime, digits: int, zulu: bool) -> str:
    """``moment`` in the bookmarks' form, with ``digits`` digits of the second's fraction
    (truncated) and the ``Z`` or not."""
    text = (
        f"{moment.year:04d}{moment.month:02d}{moment.day:02d}"
        f"T{moment.hour:02d}{moment.minute:02d}{moment.second:02d}"
    )
    if digits:
        text += "." + f"{moment.microsecond:06d}"[:digits]
    return text + ("Z" if zulu else "")


def micros(moment: datetime, digits: int) -> int:
    """Microseconds since the epoch of ``moment`` with its fraction cut to ``digits``."""
    whole = moment.replace(microsecond=0, tzinfo=UTC)
    fraction = int(f"{moment.microsecond:06d}"[:digits].ljust(6, "0")) if digits else 0
    return (whole - EPOCH) // timedelta(microseconds=1) + fraction


moments = st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31, 23, 59, 59))
numbers = st.one_of(
    st.integers(min_value=1, max_value=10**6).map(str),
    st.decimals(min_value="0.001", max_value="100000", places=3).map(lambda d: f"{d:f}"),
    st.integers(min_value=1, max_value=999).map(lambda n: f".{n}"),
)
#: spaces an item may carry around its name and value
pads = st.sampled_from(["", " ", "  "])
#: empty items and spaces a list may carry between its items
seps = st.sampled_from([",", " , ", ",,", ", ,"])


# -- the grammar accepted -------------------------------------------------------------


@pytest.mark.parametrize("text", [None, "", " ", ",", " , ,"])
def test_no_options_is_an_ordinary_publish(text: str | None) -> None:
    options = parse_publish_options(text)
    assert not options.delayed and options.to_text() == ""
    assert options == (NO_PUBLISH_OPTIONS if text is None else PublishOptions(raw=text))


def test_the_documented_examples() -> None:
    at = parse_publish_options("deliver_at=20261122T051752Z")
    assert at.deliver_at_us == parse_moment_us("20261122T051752")
    assert at.deliver_at_us == (datetime(2026, 11, 22, 5, 17, 52, tzinfo=UTC) - EPOCH) // (
        timedelta(microseconds=1)
    )
    assert at.delayed and at.deliver_after_s is None
    assert parse_publish_options("deliver_at=20261122T051752.5").deliver_at_us == (
        at.deliver_at_us + 500_000
    )
    after = parse_publish_options(" deliver_after = 1.5m ,")
    assert after == PublishOptions(deliver_after_s=90.0, raw=" deliver_after = 1.5m ,")
    assert after.delayed
    assert parse_publish_options("deliver_after=30").deliver_after_s == 30.0


@settings(max_examples=300)
@given(
    moment=moments,
    digits=st.integers(min_value=0, max_value=6),
    zulu=st.booleans(),
    before=pads,
    after=pads,
    sep=seps,
)
def test_any_moment_of_the_bookmark_form(
    moment: datetime, digits: int, zulu: bool, before: str, after: str, sep: str
) -> None:
    text = f"{sep}{before}deliver_at{after}={before}{moment_text(moment, digits, zulu)}{after}"
    options = parse_publish_options(text)
    assert options == PublishOptions(deliver_at_us=micros(moment, digits), raw=text)


@settings(max_examples=300)
@given(
    number=numbers,
    unit=st.sampled_from(["", *UNITS, "MS", "H"]),
    space=pads,
    sep=seps,
)
def test_any_positive_duration(number: str, unit: str, space: str, sep: str) -> None:
    text = f"deliver_after={number}{space if unit else ''}{unit}{sep}"
    expected = float(number) * UNITS[unit.lower() or "s"]
    assume(expected > 0)
    assert parse_publish_options(text) == PublishOptions(deliver_after_s=expected, raw=text)


# -- every refusal --------------------------------------------------------------------


@given(
    name=st.text(
        alphabet=st.sampled_from("abcdefghijklmnopqrstuvwxyz_ABCDEF0123456789"),
        min_size=1,
        max_size=20,
    ),
    value=st.one_of(st.none(), st.sampled_from(["", "1", "10s", "20261122T051752Z"])),
)
def test_an_unknown_name_is_refused(name: str, value: str | None) -> None:
    assume(name not in NAMES)
    item = name if value is None else f"{name}={value}"
    assert refusal(item) == f"unknown publish option {name!r}"
    # wherever it stands, even beside a valid option
    assert refusal(f"deliver_after=5s,{item}") == f"unknown publish option {name!r}"


@pytest.mark.parametrize(
    "name", ["live", "replace", "timestamp", "rate", "expiration", "Deliver_at", "deliverat"]
)
def test_subscribe_options_and_near_misses_are_unknown(name: str) -> None:
    assert refusal(f"{name}=1") == f"unknown publish option {name!r}"


@pytest.mark.parametrize(
    "text",
    [
        "deliver_at=20261122T051752Z,deliver_after=5s",
        "deliver_after=5s,deliver_at=20261122T051752Z",
        " deliver_after=1 ,, deliver_at=20261122T051752",
    ],
)
def test_both_delays_together_are_refused(text: str) -> None:
    assert refusal(text) == "'deliver_at' and 'deliver_after' contradict each other: give one"


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ("deliver_at=20261122T051752Z,deliver_at=20261122T051753Z", "deliver_at"),
        ("deliver_at=20261122T051752Z,deliver_at=20261122T051752Z", "deliver_at"),
        ("deliver_after=5s,deliver_after=5s", "deliver_after"),
        ("deliver_after=5s, deliver_after = 1m", "deliver_after"),
    ],
)
def test_an_option_given_twice_is_refused(text: str, name: str) -> None:
    assert refusal(text) == f"'{name}' is given twice"


@pytest.mark.parametrize(
    ("name", "form"), [("deliver_at", "MOMENT"), ("deliver_after", "DURATION")]
)
def test_a_flag_form_or_a_missing_value_is_refused(name: str, form: str) -> None:
    assert refusal(name) == f"'{name}' is not a flag: give it a value ({name}={form})"
    assert refusal(f" {name} ,") == f"'{name}' is not a flag: give it a value ({name}={form})"
    assert refusal(f"{name}=") == f"'{name}=': the value is missing ({name}={form})"
    assert refusal(f"{name} =  ") == f"'{name} =': the value is missing ({name}={form})"


@pytest.mark.parametrize(
    "value",
    [
        "2026",
        "20261122",
        "20261122T0517",
        "2026-11-22T05:17:52Z",
        "20261122T051752.1234567",
        "20261122T051752.",
        "20261122T051752z",
        "20261122T051752+01",
        "0",
        "0|1|",
        "now",
        "=20261122T051752",
    ],
)
def test_a_value_not_of_the_moment_form_is_refused(value: str) -> None:
    expected = f"'deliver_at={value}': expected a moment YYYYmmddTHHMMSS[.ffffff][Z] (UTC)"
    assert refusal(f"deliver_at={value}") == expected


@pytest.mark.parametrize(
    ("value", "field"),
    [
        ("20261301T000000", "month"),
        ("20260230T000000Z", "day"),
        ("20261122T240000", "hour"),
        ("20261122T056000", "minute"),
        ("20261122T051760", "second"),
        ("00001122T051752", "year"),
    ],
)
def test_a_moment_not_on_the_calendar_is_refused(value: str, field: str) -> None:
    detail = refusal(f"deliver_at={value}")
    # the calendar's own words follow, naming the field out of range
    assert detail.startswith(f"'deliver_at={value}': no such moment: ")
    assert field in detail.rpartition("no such moment: ")[2]


@pytest.mark.parametrize("value", ["abc", "5 seconds", "5y", "-5s", "1e3", "inf", "5s5", "x5"])
def test_a_value_not_a_duration_is_refused(value: str) -> None:
    expected = f"'deliver_after={value}': expected a duration such as 10s or 100ms"
    assert refusal(f"deliver_after={value}") == expected


@pytest.mark.parametrize("value", ["0", "0s", "0.0ms", ".0", "0d", "9" * 400])
def test_a_duration_not_above_zero_is_refused(value: str) -> None:
    # 400 nines overflow to infinity: not a duration above zero either
    expected = f"'deliver_after={value}': the value must be greater than zero"
    assert refusal(f"deliver_after={value}") == expected


def test_unbalanced_brackets_and_oversized_text_are_refused() -> None:
    assert refusal("deliver_after=[5s") == "unbalanced '[' in options 'deliver_after=[5s'"
    assert refusal("deliver_after=5s]") == "unbalanced ']' in options 'deliver_after=5s]'"
    assert refusal("x" * (64 * 1024 + 1)) == "options longer than 65536 characters"


def test_options_that_are_not_text_are_refused() -> None:
    with pytest.raises(InvalidOptions) as info:
        parse_publish_options(5)  # type: ignore[arg-type]
    assert info.value.detail == "options are a comma-separated string"


# -- round trips ----------------------------------------------------------------------


def valid_options() -> st.SearchStrategy[PublishOptions]:
    at = st.builds(
        lambda moment: PublishOptions(deliver_at_us=micros(moment, 6)),
        st.datetimes(
            min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31, 23, 59, 59, 999999)
        ),
    )
    after = st.builds(
        lambda seconds: PublishOptions(deliver_after_s=seconds),
        st.floats(min_value=1e-9, max_value=1e12, allow_nan=False, allow_infinity=False),
    )
    return st.one_of(st.just(PublishOptions()), at, after)


@settings(max_examples=300)
@given(options=valid_options())
def test_round_trip(options: PublishOptions) -> None:
    text = options.to_text()
    parsed = parse_publish_options(text)
    assert dataclasses.replace(parsed, raw="") == options
    assert parsed.raw == text and parsed.to_text() == text
    assert parsed.delayed == (text != "")


def decode(**header: Any) -> CommandOptions:
    return decode_command(Message({"c": "publish", "t": "orders", **header}, b"{}")).opts


@settings(max_examples=100)
@given(options=valid_options())
def test_a_command_reads_its_publish_options(options: PublishOptions) -> None:
    """``CommandOptions.publish`` answers as :func:`parse_publish_options` does."""
    text = options.to_text()
    assert dataclasses.replace(decode(o=text).publish(), raw="") == options
    assert decode().publish() is NO_PUBLISH_OPTIONS


def test_a_command_reads_the_refusal_too() -> None:
    with pytest.raises(InvalidOptions) as info:
        decode(o="live").publish()
    assert info.value.detail == "unknown publish option 'live'"
