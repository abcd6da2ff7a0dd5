"""The lexer: tokens, positions, string escapes, the two meanings of '/'."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spool.server.expr.ast import quote
from spool.server.expr.errors import FilterSyntaxError
from spool.server.expr.lexer import Kind, tokenize


def kinds(text: str) -> list[Kind]:
    return [t.kind for t in tokenize(text)]


def test_tokens_and_columns() -> None:
    toks = tokenize("/qty > 100 AND /sym = 'IBM'")
    assert [(t.kind, t.value, t.pos) for t in toks] == [
        (Kind.PATH, ("qty",), 1),
        (Kind.OP, ">", 6),
        (Kind.NUMBER, 100, 8),
        (Kind.WORD, "AND", 12),
        (Kind.PATH, ("sym",), 16),
        (Kind.OP, "=", 21),
        (Kind.STRING, "IBM", 23),
        (Kind.EOF, None, 28),
    ]


@pytest.mark.parametrize(
    ("text", "steps"),
    [
        ("/a", ("a",)),
        ("/order/qty", ("order", "qty")),
        ("/legs[0]/px", ("legs", 0, "px")),
        ("/m[1][-1]", ("m", 1, -1)),
        ("/FIXML/Order/@Px", ("FIXML", "Order", "@Px")),
        ("/21964", ("21964",)),
        ("/a.b$c:d_e", ("a.b$c:d_e",)),
        ('/"odd key"/x', ("odd key", "x")),
        ("/'it''s'", ("it's",)),
        ("/café", ("café",)),
    ],
)
def test_paths(text: str, steps: tuple[str | int, ...]) -> None:
    tok = tokenize(text)[0]
    assert tok.kind is Kind.PATH
    assert tok.value == steps


def test_slash_divides_after_an_operand_and_starts_a_path_before_one() -> None:
    assert kinds("/a / /b") == [Kind.PATH, Kind.OP, Kind.PATH, Kind.EOF]
    assert kinds("10/2") == [Kind.NUMBER, Kind.OP, Kind.NUMBER, Kind.EOF]
    assert kinds("(/a)/2") == [Kind.LPAREN, Kind.PATH, Kind.RPAREN, Kind.OP, Kind.NUMBER, Kind.EOF]
    # Without blanks, '/a/2' is the field '2' inside 'a'.
    assert tokenize("/a/2")[0].value == ("a", "2")
    assert kinds("/a /2") == [Kind.PATH, Kind.OP, Kind.NUMBER, Kind.EOF]


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("0", 0),
        ("42", 42),
        ("4.25", 4.25),
        (".5", 0.5),
        ("1.", 1.0),
        ("1e3", 1000.0),
        ("2.5E-1", 0.25),
        ("123456789012345678901234567890", 123456789012345678901234567890),
    ],
)
def test_numbers(text: str, value: int | float) -> None:
    tok = tokenize(text)[0]
    assert tok.kind is Kind.NUMBER
    assert tok.value == value
    assert type(tok.value) is type(value)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("'abc'", "abc"),
        ('"abc"', "abc"),
        ("''", ""),
        ("'it''s'", "it's"),
        ('"say ""hi"""', 'say "hi"'),
        (r"'a\'b'", "a'b"),
        (r"'a\"b'", 'a"b'),
        (r"'a\\b'", "a\\b"),
        (r"'\n\r\t'", "\n\r\t"),
        (r"'\x41\u00e9\U0001F600'", "Aé😀"),
        (r"'\d+\1\b'", "\\d+\\1\\b"),
        ("'multi\nline'", "multi\nline"),
    ],
)
def test_strings(text: str, value: str) -> None:
    tok = tokenize(text)[0]
    assert tok.kind is Kind.STRING
    assert tok.value == value


def test_words_are_upper_cased_and_keep_their_text() -> None:
    tok = tokenize("upper")[0]
    assert (tok.kind, tok.value, tok.text) == (Kind.WORD, "UPPER", "upper")


@pytest.mark.parametrize(
    ("text", "message", "position"),
    [
        ("'abc", "unterminated string", 1),
        ("/a = 'x\\", "unterminated string", 6),
        (r"'\x4'", "needs exactly 2 hexadecimal digits", 2),
        (r"'\U00110000'", "beyond Unicode", 2),
        ("/a = #", "unexpected character '#'", 6),
        ("/a ! 1", "did you mean '!='", 4),
        ("/", "expected a field name after '/'", 1),
        ("/a[x]", "expected an array index", 3),
        ("/a[1", "expected an array index", 3),
        ("[0]", "must follow a field name", 1),
        ("12abc", "malformed number", 1),
        ('/"a"b', "unexpected 'b' in a field path", 5),
        ("/a = 1 \x00", "unexpected character U+0000", 8),
    ],
)
def test_lexical_errors(text: str, message: str, position: int) -> None:
    with pytest.raises(FilterSyntaxError) as info:
        tokenize(text)
    assert message in info.value.message
    assert info.value.position == position


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=20))
def test_quote_round_trips_any_string(s: str) -> None:
    for mark in ("'", '"'):
        tok = tokenize(quote(s, mark))[0]
        assert tok.kind is Kind.STRING
        assert tok.value == s


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=30))
def test_arbitrary_text_either_lexes_or_raises_bad_filter(text: str) -> None:
    try:
        toks = tokenize(text)
    except FilterSyntaxError as exc:
        assert 1 <= exc.position <= len(text) + 1
    else:
        assert toks[-1].kind is Kind.EOF
