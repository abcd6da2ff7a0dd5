"""Clients' regular expressions: linear-time matching, refusals that name the construct."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spool.server.regex import PATTERN_MAX, PROGRAM_MAX, RegexRefused, compile_regex


@pytest.mark.parametrize(
    ("pattern", "construct"),
    [
        (r"(a)\1", "backreference"),
        (r"(?P<x>a)(?P=x)", "named backreference"),
        (r"a(?=b)", "lookahead"),
        (r"a(?!b)", "negative lookahead"),
        (r"(?<=a)b", "lookbehind"),
        (r"(?<!a)b", "negative lookbehind"),
        (r"(?>a+)b", "atomic group"),
        (r"(a)?(?(1)b|c)", "conditional"),
        (r"a*+", "possessive quantifier"),
        (r"a{2}+", "possessive quantifier"),
        (r"abc\Z", r"\Z"),
        (r"\Gabc", r"\G"),
        (r"a(?#note)b", "inline comment"),
        (r"(?x) a b", "verbose flag"),
    ],
)
def test_a_construct_re2_cannot_match_in_linear_time_is_refused_by_name(
    pattern: str, construct: str
) -> None:
    with pytest.raises(RegexRefused) as info:
        compile_regex(pattern)
    assert info.value.construct is not None and info.value.construct.startswith(construct)
    assert "is not supported" in info.value.reason and "linear time" in info.value.reason


@pytest.mark.parametrize(
    "pattern",
    [r"\(?=x", r"[(?=]x", r"\\1", r"[\1]", r"a\*+"],
)
def test_an_escaped_or_bracketed_lookalike_is_not_taken_for_the_construct(pattern: str) -> None:
    try:
        compile_regex(pattern)
    except RegexRefused as exc:  # refused for another reason, never as the construct
        assert exc.construct is None, exc.reason


def test_the_construct_is_found_in_one_pass_over_the_pattern() -> None:
    """A pattern made of nothing but refused constructs, up to the length limit: the
    construct is named after one scan (not one per occurrence)."""
    pattern = ("[(?=]\\(?=" * 4096)[: PATTERN_MAX - 5] + "(?=a)"
    with pytest.raises(RegexRefused) as info:
        compile_regex(pattern)
    assert info.value.construct == "lookahead (?=...)"


def test_other_syntax_errors_keep_re2s_reason() -> None:
    with pytest.raises(RegexRefused, match="missing \\)") as info:
        compile_regex("a(")
    assert info.value.construct is None
    with pytest.raises(RegexRefused, match="invalid repetition size"):
        compile_regex("a{1001}")


def test_size_limits() -> None:
    with pytest.raises(RegexRefused, match=f"more than {PATTERN_MAX}"):
        compile_regex("a" * (PATTERN_MAX + 1))
    with pytest.raises(RegexRefused, match=f"more than {PROGRAM_MAX}"):
        compile_regex("[a-q][^u-z]{13}" * 40)
    with pytest.raises(RegexRefused, match="too large to compile"):
        compile_regex(r"\pL{300}")
    assert compile_regex("(ab|cd)" * 500).program_size <= PROGRAM_MAX


def test_catastrophic_backtracking_patterns_answer_over_long_texts() -> None:
    # each would take Python's backtracking engine longer than the age of the universe
    text = "a" * 100_000 + "!"
    for pattern in ("^(a+)+$", "^(a|aa)+$", "^(a|a?)+$", "(x+x+)+y", "^(\\w+\\s?)*$"):
        assert not compile_regex(pattern).test(text)
    assert compile_regex("^(a+)+!$").test(text)


_ATOMS = st.sampled_from(["a", "b", "ab", ".", "[ab]", "[^a]", "\\.", "x", "(a|b)", "(ab)"])
_QUANTIFIED = st.tuples(_ATOMS, st.sampled_from(["", "*", "+", "?", "{2}", "{1,3}"])).map("".join)
_PATTERNS = st.tuples(
    st.sampled_from(["", "^"]),
    st.lists(_QUANTIFIED, min_size=1, max_size=5).map("".join),
    st.sampled_from(["", "$"]),
).map("".join)


@settings(max_examples=300, deadline=None)
@given(_PATTERNS, st.text(alphabet="abx.é", max_size=12))
def test_search_semantics_are_pythons_for_the_common_syntax(pattern: str, text: str) -> None:
    """The oracle is ``re.search`` (``\\z`` for ``$``: RE2's ``$`` is the end of the text,
    never before a final newline): filters and topics kept their meaning."""
    expected = re.search(pattern.replace("$", r"\Z"), text) is not None
    assert compile_regex(pattern).test(text) == expected


def test_dollar_is_the_end_of_the_text() -> None:
    for pattern in ("a$", "a+$", "^a$"):
        assert not compile_regex(pattern).test("a\n")
        assert compile_regex(pattern).test("a")


def test_case_insensitive_flag_and_unicode() -> None:
    assert compile_regex("(?i)ibm").test("IBM")
    assert compile_regex("é$").test("café")
    assert compile_regex(r"^\pL+$").test("Zürich")
