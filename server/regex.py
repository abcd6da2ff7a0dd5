"""Regular expressions a client gives the broker, matched in linear time (RE2).

Content filters (``LIKE``, ``REGEXP_MATCH``), regex topics of subscriptions and queries,
and the users' entitlement patterns are matched with RE2 (the ``google-re2`` package):
its automaton answers in time linear in the text, whatever the pattern, so no pattern a
client sends can hold the event loop the way a backtracking engine does on
``^(a+)+$`` against ``aaaa…!``. What RE2 cannot do in linear time it refuses to compile,
and :func:`compile_regex` says which construct it was (:data:`REFUSED_CONSTRUCTS`):
backreferences, lookahead and lookbehind, atomic groups, possessive quantifiers,
conditionals, ``\\Z``, ``\\G``, inline comments and the verbose flag. A pattern is also
refused when it is longer than :data:`PATTERN_MAX` characters or its compiled program
has more than :data:`PROGRAM_MAX` instructions, so the work of one search is bounded by
``PROGRAM_MAX`` steps per character of the text.

Differences with Python's ``re`` that a pattern may notice: ``\\d``, ``\\w``, ``\\s`` and
``\\b`` are ASCII (``\\pN``, ``\\pL`` and ``[[:alpha:]]`` are the Unicode forms), ``$`` is
the end of the text (never before a final newline), and a repetition count is at most
1000. Matching has ``re.search`` semantics otherwise (anchor with ``^`` and ``$``).
docs/filters.md is the user's reference.

:class:`Regex` answers one question, ``Regex.test(text)``: is there a match anywhere?
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Final

import re2

__all__ = [
    "PATTERN_MAX",
    "PROGRAM_MAX",
    "REFUSED_CONSTRUCTS",
    "Regex",
    "RegexRefused",
    "compile_regex",
]

#: the longest pattern compiled, in characters
PATTERN_MAX: Final = 4096
#: the most instructions of a compiled pattern (``^(a+)+$`` has 4; ``a{1000}`` 1,003; an
#: alternation of 200 ticker symbols about 900): a search costs at most about this many
#: steps per character of the text (80 ms for a 1 MB text at the limit)
PROGRAM_MAX: Final = 4000
#: memory RE2 may use for one pattern's program and its automaton's cache: 256 KiB keeps
#: the compilation of any pattern under 5 ms (8 MiB, RE2's default, let the eight
#: characters ``\pL{300}`` take half a second)
_MAX_MEM: Final = 256 << 10
#: characters that make a pattern more than a plain substring
_SYNTAX: Final = frozenset("\\^$.|?*+()[]{}")

#: the constructs RE2 refuses, each with the text that introduces it and its name
REFUSED_CONSTRUCTS: Final[tuple[tuple[re.Pattern[str], str], ...]] = tuple(
    (re.compile(lead), name)
    for lead, name in (
        (r"\(\?=", "lookahead (?=...)"),
        (r"\(\?!", "negative lookahead (?!...)"),
        (r"\(\?<=", "lookbehind (?<=...)"),
        (r"\(\?<!", "negative lookbehind (?<!...)"),
        (r"\(\?>", "atomic group (?>...)"),
        (r"\(\?\(", "conditional (?(...)...)"),
        (r"\(\?P=", "named backreference (?P=name)"),
        (r"\(\?#", "inline comment (?#...)"),
        (r"\(\?[a-wyz]*x", "verbose flag (?x)"),
        (r"\\[1-9]", "backreference \\1-\\9"),
        (r"\\Z", "\\Z (use \\z: RE2's end of text)"),
        (r"\\G", "\\G"),
        (r"(?:[*+?}])\+", "possessive quantifier (*+, ++, ?+, {n}+)"),
    )
)


class RegexRefused(ValueError):
    """A pattern that is not compiled.

    Attributes:
        pattern: the pattern as given.
        reason: what is wrong with it, for a person (no pattern text in it).
        construct: the construct RE2 does not support, when that is the reason.
    """

    def __init__(self, pattern: str, reason: str, construct: str | None = None) -> None:
        super().__init__(reason)
        self.pattern = pattern
        self.reason = reason
        self.construct = construct


class Regex:
    """A compiled pattern (linear-time search).

    Attributes:
        pattern: the pattern as given.
        program_size: instructions of its compiled program (the work per text character).
    """

    __slots__ = ("pattern", "program_size", "test")

    def __init__(self, pattern: str, program_size: int, test: Callable[[str], bool]) -> None:
        self.pattern = pattern
        self.program_size = program_size
        #: ``test(text)``: whether the pattern matches anywhere in ``text`` (``re.search``
        #: semantics)
        self.test = test

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Regex) and other.pattern == self.pattern

    def __hash__(self) -> int:
        return hash(self.pattern)

    def __repr__(self) -> str:
        return f"Regex({self.pattern!r})"


def _options() -> re2.Options:
    options = re2.Options()
    options.max_mem = _MAX_MEM
    options.log_errors = False  # refusals are answered to the client, not written to stderr
    options.never_capture = True  # only "is there a match" is ever asked
    return options


_OPTIONS: Final = _options()


def _construct(pattern: str) -> str | None:
    """The first construct of :data:`REFUSED_CONSTRUCTS` in ``pattern`` (None: none).

    Escaped characters and character classes are not syntax (``\\(?=`` is a literal
    parenthesis followed by ``?=``, which RE2 refuses for another reason), so the
    positions where syntax can start are found first, in one pass.
    """
    syntax = _syntax_positions(pattern)
    for lead, name in REFUSED_CONSTRUCTS:
        for found in lead.finditer(pattern):
            if syntax[found.start()]:
                return name
    return None


def _syntax_positions(pattern: str) -> list[bool]:
    """For each position of ``pattern``: whether it is outside a character class and
    not the character after an escaping backslash."""
    out = [False] * (len(pattern) + 1)
    in_class = False
    i = 0
    n = len(pattern)
    while i < n:
        c = pattern[i]
        out[i] = not in_class
        if c == "\\":
            i += 2  # the escaped character is never syntax
            continue
        if in_class:
            if c == "]":
                in_class = False
        elif c == "[":
            in_class = True
            # a ``]`` first in a class (after an optional ``^``) is a member
            if pattern.startswith("]", i + 1) or pattern.startswith("^]", i + 1):
                i += 1 + (pattern[i + 1] == "^")
        i += 1
    return out


def compile_regex(pattern: str) -> Regex:
    """Compile ``pattern`` for linear-time search.

    Raises:
        RegexRefused: the pattern is too long, uses a construct RE2 does not support
            (the construct is named), does not compile, or compiles to a program larger
            than :data:`PROGRAM_MAX`.
    """
    if len(pattern) > PATTERN_MAX:
        raise RegexRefused(
            pattern, f"the pattern is {len(pattern)} characters long, more than {PATTERN_MAX}"
        )
    try:
        compiled = re2.compile(pattern, _OPTIONS)
    except re2.error as exc:
        construct = _construct(pattern)
        if construct is not None:
            raise RegexRefused(
                pattern,
                f"{construct} is not supported: patterns are matched in linear time (RE2)",
                construct,
            ) from None
        reason = _message(exc)
        if reason.startswith("pattern too large"):
            reason = "the pattern is too large to compile (a repetition of a large class?)"
        raise RegexRefused(pattern, reason) from None
    size = compiled.programsize
    if size > PROGRAM_MAX:
        raise RegexRefused(
            pattern,
            f"the pattern compiles to {size} instructions, more than {PROGRAM_MAX}",
        )
    return Regex(pattern, size, _tester(pattern, compiled))


def _tester(pattern: str, compiled: re2._Regexp[str]) -> Callable[[str], bool]:
    """The cheapest exact test of ``pattern``: a plain substring, prefix or suffix is
    Python's string search; anything else is RE2's, given UTF-8 (the module's ``search``
    of a ``str`` decodes match offsets back to characters, the most expensive part of a
    search whose answer is only yes or no)."""
    core = pattern.removeprefix("^")
    anchored = core != pattern
    if core.endswith("$") and not core.endswith("\\$"):
        core, ends = core[:-1], True
    else:
        ends = False
    if _SYNTAX.isdisjoint(core) and "\n" not in core:
        if anchored and ends:
            return core.__eq__
        if anchored:
            return lambda text: text.startswith(core)
        if ends:
            return lambda text: text.endswith(core)
        return lambda text: core in text
    search = compiled.search

    def test(text: str) -> bool:
        return search(text.encode("utf-8", "surrogatepass")) is not None

    return test


def _message(exc: re2.error) -> str:
    """RE2's reason, as text (it comes as bytes)."""
    detail = exc.args[0] if exc.args else ""
    if isinstance(detail, bytes):
        detail = detail.decode("utf-8", "replace")
    return str(detail) or "the pattern does not compile"
