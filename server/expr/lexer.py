"""Turns expression text into tokens.

The one subtlety is ``/``: it starts a field path where an operand is expected (``/qty``,
``/order/qty``, ``/legs[0]/px``) and divides where an operator is expected (``/a / 2``).
Path steps continue while a ``/`` is immediately followed by a name character or a quote,
so ``/a/2`` is the field ``2`` inside ``a``; write ``/a / 2`` to divide.

String literals take single or double quotes. Inside them ``\\\\ \\' \\" \\n \\r \\t``,
``\\xHH``, ``\\uHHHH`` and ``\\UHHHHHHHH`` are escapes and a doubled quote is one quote;
any other backslash is kept as written, so regular expressions such as ``'\\d+'`` or the
back-reference ``'(.)\\1'`` mean what they say.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from typing import Any, Final

from spool.server.expr.ast import Step, is_name_char
from spool.server.expr.errors import FilterSyntaxError


class Kind(enum.Enum):
    """Token kinds."""

    NUMBER = "number"
    STRING = "string"
    PATH = "field"
    WORD = "word"
    OP = "operator"
    LPAREN = "'('"
    RPAREN = "')'"
    COMMA = "','"
    EOF = "end of filter"


@dataclass(frozen=True, slots=True)
class Token:
    """One token.

    Attributes:
        kind: what it is.
        text: the source text it was read from.
        value: number (int/float), string, path steps (tuple), upper-cased word, operator.
        pos: 1-based column of its first character.
    """

    kind: Kind
    text: str
    value: Any
    pos: int


_NUMBER: Final = re.compile(r"(?:\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?", re.ASCII)
_WORD: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_INDEX: Final = re.compile(r"\[(-?\d+)\]", re.ASCII)
_DIGITS: Final = frozenset("0123456789")
_HEX: Final = frozenset("0123456789abcdefABCDEF")
_TWO_CHAR_OPS: Final = frozenset({"<=", ">=", "<>", "!=", "=="})
_ONE_CHAR_OPS: Final = frozenset("=<>+-*/%")
_SIMPLE_ESCAPES: Final = {"\\": "\\", "'": "'", '"': '"', "n": "\n", "r": "\r", "t": "\t"}
_HEX_ESCAPES: Final = {"x": 2, "u": 4, "U": 8}
_OPERAND_END_WORDS: Final = frozenset({"NULL", "TRUE", "FALSE", "END"})
_WHITESPACE: Final = frozenset(" \t\r\n\f\v")
_QUOTES: Final = frozenset("'\"")


def _describe(ch: str) -> str:
    return repr(ch) if ch.isprintable() else f"U+{ord(ch):04X}"


class _Lexer:
    def __init__(self, text: str) -> None:
        self.text = text
        self.i = 0
        self.tokens: list[Token] = []

    def error(self, message: str, index: int) -> FilterSyntaxError:
        return FilterSyntaxError(message, index + 1, self.text)

    def run(self) -> list[Token]:
        text = self.text
        n = len(text)
        expect_operand = True
        while True:
            while self.i < n and text[self.i] in _WHITESPACE:
                self.i += 1
            if self.i >= n:
                self.tokens.append(Token(Kind.EOF, "", None, n + 1))
                return self.tokens
            start = self.i
            ch = text[start]
            if ch == "/" and expect_operand:
                tok = self.path()
            elif ch in _DIGITS or (ch == "." and start + 1 < n and text[start + 1] in _DIGITS):
                tok = self.number()
            elif ch in _QUOTES:
                value = self.string()
                tok = Token(Kind.STRING, text[start : self.i], value, start + 1)
            elif ch.isascii() and (ch.isalpha() or ch == "_"):
                m = _WORD.match(text, start)
                assert m is not None
                self.i = m.end()
                tok = Token(Kind.WORD, m.group(), m.group().upper(), start + 1)
            elif ch == "(":
                self.i += 1
                tok = Token(Kind.LPAREN, ch, ch, start + 1)
            elif ch == ")":
                self.i += 1
                tok = Token(Kind.RPAREN, ch, ch, start + 1)
            elif ch == ",":
                self.i += 1
                tok = Token(Kind.COMMA, ch, ch, start + 1)
            elif text[start : start + 2] in _TWO_CHAR_OPS:
                self.i += 2
                tok = Token(Kind.OP, text[start : start + 2], text[start : start + 2], start + 1)
            elif ch in _ONE_CHAR_OPS:
                self.i += 1
                tok = Token(Kind.OP, ch, ch, start + 1)
            elif ch == "!":
                raise self.error("unexpected '!' (did you mean '!=' or NOT?)", start)
            elif ch == "[":
                raise self.error("an array index like [0] must follow a field name directly", start)
            else:
                raise self.error(f"unexpected character {_describe(ch)}", start)
            self.tokens.append(tok)
            if tok.kind in (Kind.NUMBER, Kind.STRING, Kind.PATH, Kind.RPAREN):
                expect_operand = False
            elif tok.kind is Kind.WORD:
                expect_operand = tok.value not in _OPERAND_END_WORDS
            else:
                expect_operand = True

    def number(self) -> Token:
        start = self.i
        m = _NUMBER.match(self.text, start)
        assert m is not None
        end = m.end()
        if end < len(self.text) and is_name_char(self.text[end]):
            raise self.error(f"malformed number {self.text[start : end + 1]!r}", start)
        self.i = end
        raw = m.group()
        value: int | float = float(raw) if "." in raw or m.group(2) else int(raw)
        return Token(Kind.NUMBER, raw, value, start + 1)

    def string(self) -> str:
        text = self.text
        n = len(text)
        start = self.i
        quote = text[start]
        i = start + 1
        out: list[str] = []
        while True:
            if i >= n:
                raise self.error(f"unterminated string: no closing {quote} for this quote", start)
            ch = text[i]
            if ch == quote:
                if i + 1 < n and text[i + 1] == quote:
                    out.append(quote)
                    i += 2
                    continue
                self.i = i + 1
                return "".join(out)
            if ch != "\\":
                out.append(ch)
                i += 1
                continue
            if i + 1 >= n:
                raise self.error(f"unterminated string: no closing {quote} for this quote", start)
            esc = text[i + 1]
            simple = _SIMPLE_ESCAPES.get(esc)
            if simple is not None:
                out.append(simple)
                i += 2
                continue
            width = _HEX_ESCAPES.get(esc)
            if width is not None:
                digits = text[i + 2 : i + 2 + width]
                if len(digits) != width or not set(digits) <= _HEX:
                    raise self.error(
                        f"bad escape: \\{esc} needs exactly {width} hexadecimal digits", i
                    )
                code = int(digits, 16)
                if code > 0x10FFFF:
                    raise self.error(f"bad escape: \\{esc}{digits} is beyond Unicode", i)
                out.append(chr(code))
                i += 2 + width
                continue
            # Not an escape of ours: keep the backslash for regular expressions ('\d', '\1').
            out.append("\\")
            out.append(esc)
            i += 2

    def path(self) -> Token:
        text = self.text
        n = len(text)
        start = self.i
        steps: list[Step] = []
        while True:
            slash = self.i
            self.i += 1
            if self.i < n and text[self.i] in _QUOTES:
                steps.append(self.string())
            elif self.i < n and is_name_char(text[self.i]):
                j = self.i
                while j < n and is_name_char(text[j]):
                    j += 1
                steps.append(text[self.i : j])
                self.i = j
            else:
                raise self.error("expected a field name after '/' (e.g. /qty)", slash)
            while self.i < n and text[self.i] == "[":
                m = _INDEX.match(text, self.i)
                if m is None:
                    raise self.error("expected an array index like [0] or [-1]", self.i)
                steps.append(int(m.group(1)))
                self.i = m.end()
            if (
                self.i + 1 < n
                and text[self.i] == "/"
                and (is_name_char(text[self.i + 1]) or text[self.i + 1] in _QUOTES)
            ):
                continue
            if self.i < n and (is_name_char(text[self.i]) or text[self.i] in _QUOTES):
                raise self.error(f"unexpected {_describe(text[self.i])} in a field path", self.i)
            return Token(Kind.PATH, text[start : self.i], tuple(steps), start + 1)


def tokenize(text: str) -> list[Token]:
    """All tokens of ``text``, ending with an EOF token.

    Raises:
        FilterSyntaxError: a character or literal that is not part of the language.
    """
    return _Lexer(text).run()
