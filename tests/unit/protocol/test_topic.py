"""server/protocol/topic.py: the one rule for regex topics (router, publish, config)."""

from __future__ import annotations

import pytest

from spool.server.protocol.errors import BadRegexTopic
from spool.server.protocol.topic import REGEX_METACHARACTERS, compile_topic, is_regex_topic


@pytest.mark.parametrize(
    ("name", "regex"),
    [
        ("orders", False),
        ("/a/b-c_d", False),
        ("a.b", False),
        ("md.ibm", False),
        ("", False),
        ("^x", True),
        ("x$", True),
        ("a*", True),
        ("a+", True),
        ("a?", True),
        ("a{2}", True),
        ("[ab]", True),
        ("a|b", True),
        ("(a)", True),
        ("a\\d", True),
    ],
)
def test_is_regex_topic(name: str, regex: bool) -> None:
    assert is_regex_topic(name) is regex


def test_every_metacharacter_alone_makes_a_regex() -> None:
    assert "." not in REGEX_METACHARACTERS
    for ch in REGEX_METACHARACTERS:
        assert is_regex_topic(f"orders{ch}"), ch


def test_compile_topic() -> None:
    assert compile_topic("^orders").test("orders.eu")
    assert not compile_topic("^orders").test("eu.orders")
    with pytest.raises(BadRegexTopic, match=r"'a\(': missing \)"):
        compile_topic("a(")


def test_a_topic_pattern_that_cannot_match_in_linear_time_is_refused_by_name() -> None:
    with pytest.raises(BadRegexTopic, match=r"backreference .* is not supported"):
        compile_topic(r"^(orders)\.\1$")
    with pytest.raises(BadRegexTopic, match=r"lookahead \(\?=\.\.\.\) is not supported"):
        compile_topic(r"^orders(?=\.eu)")
