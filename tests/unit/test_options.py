"""Subscribe options: every option, the errors, and round trips (hypothesis)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spool.server.protocol.errors import InvalidOptions
from spool.server.protocol.options import (
    DEFAULT_OPTIONS,
    Rate,
    SubscribeOptions,
    parse_duration,
    parse_rate,
    parse_subscribe_options,
)
from spool.server.protocol.selection import SelectList


def test_none_and_empty_are_defaults() -> None:
    assert parse_subscribe_options(None) == DEFAULT_OPTIONS
    assert parse_subscribe_options("") == SubscribeOptions(raw="")
    assert parse_subscribe_options(" , ,") == SubscribeOptions(raw=" , ,")
    assert DEFAULT_OPTIONS.durability == "persisted"
    assert DEFAULT_OPTIONS.bookmark_not_found == "now"


def test_every_option() -> None:
    text = (
        "fully_durable,rate=2X,rate_max_gap=10s,pause,replace,timestamp,conflation=250ms,"
        "conflation_key=[/a,/b/c],top_n=5,bookmark_not_found=fail,oof,no_sowkey,max_backlog=3"
    )
    o = parse_subscribe_options(text)
    assert o == SubscribeOptions(
        fully_durable=True,
        rate=Rate("multiplier", 2.0),
        rate_max_gap=10.0,
        pause=True,
        replace=True,
        timestamp=True,
        conflation=0.25,
        conflation_key=("/a", "/b/c"),
        top_n=5,
        bookmark_not_found="fail",
        oof=True,
        no_sowkey=True,
        max_backlog=3,
        raw=text,
    )
    assert o.durability == "fully_durable"
    assert parse_subscribe_options("live,timestamp").durability == "live"
    assert parse_subscribe_options("resume").resume


@pytest.mark.parametrize(
    ("text", "rate"),
    [
        ("100", Rate("msgs", 100.0)),
        ("2.5", Rate("msgs", 2.5)),
        ("10KB", Rate("bytes", 10 * 1024.0)),
        ("1mb", Rate("bytes", 1024.0 * 1024)),
        ("1GB", Rate("bytes", 1024.0**3)),
        ("2X", Rate("multiplier", 2.0)),
        (".5X", Rate("multiplier", 0.5)),
        ("0.5x", Rate("multiplier", 0.5)),
    ],
)
def test_rates(text: str, rate: Rate) -> None:
    assert parse_rate(text, "rate") == rate
    assert parse_subscribe_options(f"rate={text}").rate == rate


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("10s", 10.0),
        ("100ms", 0.1),
        ("1.5m", 90.0),
        ("2h", 7200.0),
        ("1d", 86400.0),
        ("250us", 250e-6),
        ("3", 3.0),
        ("5MS", 0.005),
        ("1000ns", 1e-6),
    ],
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text, "x") == pytest.approx(seconds)


def test_conflation_key_forms() -> None:
    assert parse_subscribe_options("conflation=1s,conflation_key=/id").conflation_key == ("/id",)
    assert parse_subscribe_options(
        "conflation_key=[ /a , /b/c ],conflation=1s,timestamp"
    ).conflation_key == ("/a", "/b/c")


@pytest.mark.parametrize(
    ("text", "detail"),
    [
        ("bogus", "unknown option"),
        ("live=1", "takes no value"),
        ("rate", "needs a value"),
        ("rate=", "needs a value"),
        ("rate=0", "greater than zero"),
        ("rate=-1", "expected N"),
        ("rate=5KBX", "expected N"),
        ("rate=fast", "expected N"),
        ("rate=1e5", "expected N"),
        ("rate=2X,rate=3X", "given twice"),
        ("rate=2X,rate_max_gap=0s", "greater than zero"),
        ("rate=2X,rate_max_gap=10parsecs", "duration"),
        ("conflation=0", "greater than zero"),
        ("conflation=1s,conflation_key=[a]", "JSON paths"),
        ("conflation=1s,conflation_key=[/a,/a]", "twice"),
        ("conflation=1s,conflation_key=[/a//b]", "JSON paths"),
        ("conflation=1s,conflation_key=[]", "JSON paths"),
        ("conflation=1s,conflation_key=[/a", "unbalanced"),
        ("conflation=1s,conflation_key=/a]", "unbalanced"),
        ("top_n=0", "positive integer"),
        ("top_n=-3", "positive integer"),
        ("top_n=1.5", "positive integer"),
        ("max_backlog=x", "positive integer"),
        ("bookmark_not_found=maybe", "now, epoch or fail"),
        ("live,rate=10", "'rate' cannot be combined with 'live'"),
        ("live,pause", "'pause' cannot be combined with 'live'"),
        ("resume,live", "'resume' cannot be combined with 'live'"),
        ("live,fully_durable", "contradict"),
        ("pause,resume", "contradict"),
        ("rate_max_gap=10s", "rate=NX"),
        ("rate=100,rate_max_gap=10s", "rate=NX"),
        ("conflation_key=[/a]", "needs 'conflation'"),
    ],
)
def test_invalid(text: str, detail: str) -> None:
    with pytest.raises(InvalidOptions) as info:
        parse_subscribe_options(text)
    assert detail in info.value.detail
    assert info.value.reason == "invalid options"


def test_not_a_string() -> None:
    with pytest.raises(InvalidOptions):
        parse_subscribe_options(5)  # type: ignore[arg-type]


# -- properties ------------------------------------------------------------------------

positive = st.floats(min_value=1e-6, max_value=1e12, allow_nan=False, allow_infinity=False)
rates = st.builds(Rate, st.sampled_from(["msgs", "bytes", "multiplier"]), positive)
paths = st.lists(
    st.from_regex(r"(/[a-z0-9_]{1,6}){1,3}", fullmatch=True), min_size=1, max_size=3, unique=True
).map(tuple)


selects = st.builds(
    SelectList,
    st.booleans(),
    st.dictionaries(
        st.lists(st.sampled_from(["a", "b", "px", "id"]), min_size=1, max_size=3).map(tuple),
        st.booleans(),
        min_size=1,
        max_size=4,
    ).map(lambda rules: tuple(sorted((keep, path) for path, keep in rules.items()))),
)


@st.composite
def option_values(draw: st.DrawFn) -> SubscribeOptions:
    durability = draw(st.sampled_from(["persisted", "live", "fully_durable"]))
    live = durability == "live"
    rate = None if live else draw(st.none() | rates)
    gap = draw(st.none() | positive) if rate is not None and rate.kind == "multiplier" else None
    pause_resume = "none" if live else draw(st.sampled_from(["none", "pause", "resume"]))
    conflation = draw(st.none() | positive)
    return SubscribeOptions(
        live=live,
        fully_durable=durability == "fully_durable",
        rate=rate,
        rate_max_gap=gap,
        pause=pause_resume == "pause",
        resume=pause_resume == "resume",
        replace=draw(st.booleans()),
        timestamp=draw(st.booleans()),
        conflation=conflation,
        conflation_key=draw(paths) if conflation is not None and draw(st.booleans()) else (),
        top_n=draw(st.none() | st.integers(min_value=1, max_value=10**12)),
        bookmark_not_found=draw(st.sampled_from(["now", "epoch", "fail"])),
        oof=draw(st.booleans()),
        no_sowkey=draw(st.booleans()),
        max_backlog=draw(st.none() | st.integers(min_value=1, max_value=10**6)),
        select=draw(st.none() | selects),
    )


@settings(max_examples=300)
@given(option_values())
def test_round_trip(options: SubscribeOptions) -> None:
    text = options.to_text()
    parsed = parse_subscribe_options(text)
    assert parsed == dataclasses.replace(options, raw=text)


_alphabet = st.sampled_from([*"=,[]/ .0123456789XKBMms", "live", "rate", "top_n", "pause"])


@settings(max_examples=400)
@given(st.one_of(st.text(max_size=60), st.lists(_alphabet, max_size=20).map("".join)))
def test_garbage_is_invalid_options_or_a_value(text: str) -> None:
    try:
        options = parse_subscribe_options(text)
    except InvalidOptions:
        return
    assert parse_subscribe_options(options.to_text()).to_text() == options.to_text()
