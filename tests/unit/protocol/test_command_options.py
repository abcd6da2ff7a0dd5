"""A command's options read once (``CommandOptions``): the items and names of the
documented grammar, and the same subscribe options (or the same refusal) as
``parse_subscribe_options``."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spool.server.protocol.commands import NO_OPTIONS, Command, decode_command, read_options
from spool.server.protocol.errors import InvalidOptions
from spool.server.protocol.message import Message
from spool.server.protocol.options import SubscribeOptions, parse_subscribe_options
from tests.unit.test_options import option_values


def decode(**header: Any) -> Command:
    return decode_command(Message({"c": "subscribe", "t": "t", "sub_id": "s", **header}, b""))


def same_answer(text: str) -> None:
    """``read_options(text)`` answers as ``parse_subscribe_options(text)`` does."""
    opts = read_options(text)
    try:
        expected = parse_subscribe_options(text)
    except InvalidOptions as exc:
        assert opts.parsed is None and not opts.replace
        with pytest.raises(InvalidOptions) as info:
            opts.subscribe()
        assert info.value.detail == exc.detail
        return
    assert opts.subscribe() == expected and opts.problem == ""
    assert opts.replace == expected.replace


def test_no_options() -> None:
    cmd = decode()
    assert cmd.opts is NO_OPTIONS
    assert cmd.opts.subscribe() == parse_subscribe_options(None)
    assert (cmd.opts.items, cmd.opts.names) == ((), frozenset())


def test_items_keep_bracketed_commas_and_drop_empty_ones() -> None:
    opts = decode(o=" replace,,conflation=1s, conflation_key=[/a,/b] ,").opts
    assert opts.items == ("replace", "conflation=1s", "conflation_key=[/a,/b]")
    assert opts.names == {"replace", "conflation", "conflation_key"}
    assert opts.replace


@pytest.mark.parametrize(
    "text", ["noreplace", "conflation=1s,conflation_key=[/replace]", "replace=1", "replace,bad"]
)
def test_replace_is_an_option_name_in_valid_options(text: str) -> None:
    assert not read_options(text).replace


def test_other_grammars_read_as_items() -> None:
    opts = decode_command(Message({"c": "sow_delete", "t": "q", "o": "cancel"}, b"")).opts
    assert opts.items == ("cancel",) and opts.parsed is None
    with pytest.raises(InvalidOptions, match="unknown option 'cancel'"):
        opts.subscribe()


@settings(max_examples=300)
@given(option_values(), st.booleans())
def test_round_trip(options: SubscribeOptions, spaced: bool) -> None:
    text = options.to_text()
    if spaced:
        text = " , ".join(text.split(",")) + ","
    cmd = decode(o=text)
    assert cmd.options == text
    assert cmd.opts.subscribe() == dataclasses.replace(options, raw=text)
    # a comma not followed by a "]" before any "[" is outside brackets
    given = re.split(r",(?![^\[]*\])", options.to_text())
    assert cmd.opts.names == {i.partition("=")[0] for i in given if i}
    joined = ",".join(cmd.opts.items)
    assert read_options(joined).subscribe() == dataclasses.replace(options, raw=joined)


_names = st.sampled_from(
    ["live", "replace", "rate", "top_n", "conflation_key", "pause", "cancel", "max_backlog", " "]
)
_values = st.one_of(
    st.from_regex(r"[a-zA-Z0-9./ ]{0,6}", fullmatch=True),
    st.lists(st.from_regex(r"/[a-z]{1,4}", fullmatch=True), min_size=1, max_size=3).map(
        lambda ps: "[" + ",".join(ps) + "]"
    ),
)
_items = st.tuples(_names, st.none() | _values).map(
    lambda nv: nv[0] if nv[1] is None else f"{nv[0]}={nv[1]}"
)


@settings(max_examples=400)
@given(st.lists(_items, max_size=6))
def test_items_and_names_follow_the_grammar(items: list[str]) -> None:
    """Items joined by commas read back as those items (stripped, the empty ones
    dropped), with their names; the subscribe options are the parser's."""
    text = ",".join(items)
    opts = read_options(text)
    wanted = [i.strip() for i in items if i.strip()]
    assert list(opts.items) == wanted
    assert opts.names == {i.partition("=")[0].strip() for i in wanted}
    same_answer(text)


_alphabet = st.sampled_from([*"=,[]/ .0123456789XKBMms", "live", "replace", "top_n", "cancel"])


@settings(max_examples=400)
@given(st.one_of(st.text(max_size=60), st.lists(_alphabet, max_size=20).map("".join)))
def test_any_text_reads_without_failing(text: str) -> None:
    opts = read_options(text)
    assert opts.text == text
    assert all(item and item == item.strip() for item in opts.items)
    assert read_options(",".join(opts.items)).items == opts.items
    same_answer(text)
