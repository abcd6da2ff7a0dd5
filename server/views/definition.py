"""A view definition, parsed and checked: what the view's records hold and how records
of the underlying topic are grouped into them (docs/views.md "Definition").

A definition has three parts, each given as text the way a configuration file holds it:

* the projection: one item per output field, ``/desk`` (a grouping field, copied),
  ``SUM(/qty) AS /position`` (an aggregate) or ``SUM(/qty * /px) / SUM(/qty) AS /vwap``
  (an expression over grouping fields and aggregates, in the filter language);
* the grouping: the field paths whose values make a group (``/desk``, ``/symbol``);
* an optional filter: records of the underlying topic for which it is not TRUE are left
  out of every group.

Aggregate calls are not functions of the filter language (they read many records, not
one), so an item is compiled in two steps: each aggregate call is cut out and parsed on
its own (its argument is an ordinary expression over one record), and the rest of the
item is parsed with each call replaced by a reference to a *slot*: a top-level field
whose name no document can clash with (:func:`slot_name`). Evaluating the item for a
group is then an ordinary expression evaluation over a small document holding the
group's values and its aggregates' results. The replacement text is exactly as long as
the call it replaces, so a column in an error message is a column of the text as written.
"""

from __future__ import annotations

import difflib
import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal

from spool.server.expr import FUNCTIONS, FilterSyntaxError, parse
from spool.server.expr.ast import Call, Field, Node, path_text, render, walk
from spool.server.expr.lexer import Kind, Token, tokenize
from spool.server.views.errors import ViewDefinitionError

__all__ = [
    "AGGREGATE_FUNCTIONS",
    "Aggregate",
    "OutputItem",
    "ViewDefinition",
    "parse_definition",
    "slot_name",
]

AGGREGATE_FUNCTIONS: Final = ("SUM", "COUNT", "AVG", "MIN", "MAX")
"""The aggregates a projection may use (docs/views.md "Aggregates")."""

_SLOT_BASE: Final = 0x100000
"""Slot names are made of characters of Unicode's supplementary private use area B,
which no grouping field may contain (so a slot never clashes with a group value)."""

Path = tuple[str, ...]


def slot_name(index: int, width: int) -> str:
    """The field name standing for aggregate ``index`` in an item's text, ``width``
    characters long (the replacement ``(/"NAME")`` is as long as the call it replaces)."""
    return chr(_SLOT_BASE + index) * width


def _slot_index(step: str) -> int | None:
    if step and ord(step[0]) >= _SLOT_BASE and step == step[0] * len(step):
        return ord(step[0]) - _SLOT_BASE
    return None


@dataclass(frozen=True, slots=True)
class Aggregate:
    """One aggregate of a view, shared by every item that uses the same call.

    Attributes:
        function: ``SUM``, ``COUNT``, ``AVG``, ``MIN`` or ``MAX``.
        argument: its argument, an expression over one record; None for ``COUNT(*)``.
        text: the canonical spelling, e.g. ``SUM(/qty)``.
    """

    function: str
    argument: Node | None
    text: str

    @property
    def argument_text(self) -> str | None:
        """The argument as expression text (None for ``COUNT(*)``)."""
        return None if self.argument is None else render(self.argument)


@dataclass(frozen=True, slots=True)
class OutputItem:
    """One field of the view's records.

    Attributes:
        text: the projection item as written.
        out: the output path's steps (``("position",)`` for ``/position``).
        kind: ``group`` (a grouping value, copied), ``aggregate`` (one aggregate's result)
            or ``computed`` (an expression over grouping values and aggregates).
        index: for ``group``, the position of the grouping field; for ``aggregate``, of
            the aggregate in :attr:`ViewDefinition.aggregates`; -1 for ``computed``.
        expression: for ``computed``, the item's expression with every aggregate call
            replaced by its slot (see the module docstring); ``""`` otherwise.
        tree: the parsed :attr:`expression` (None unless ``computed``).
    """

    text: str
    out: Path
    kind: Literal["group", "aggregate", "computed"]
    index: int
    expression: str = ""
    tree: Node | None = None

    @property
    def out_text(self) -> str:
        """The output path as written in documents' terms, e.g. ``/position``."""
        return path_text(self.out)


@dataclass(frozen=True, slots=True)
class ViewDefinition:
    """A checked view definition (build it with :func:`parse_definition`).

    Attributes:
        projection: the output fields, in order (the order of the record's fields).
        grouping: the grouping fields' steps, in order (the order of the group key).
        aggregates: every distinct aggregate the projection uses.
        filter: the input filter's text, or None (every record is an input).
    """

    projection: tuple[OutputItem, ...]
    grouping: tuple[Path, ...]
    aggregates: tuple[Aggregate, ...]
    filter: str | None

    @property
    def grouping_text(self) -> tuple[str, ...]:
        """The grouping fields as paths (``/desk``)."""
        return tuple(path_text(g) for g in self.grouping)

    def slots(self, item: OutputItem) -> dict[str, int]:
        """Slot name -> aggregate index, for the slots ``item``'s expression reads (one
        aggregate may have several names: a slot's name is as long as its call)."""
        out: dict[str, int] = {}
        if item.tree is not None:
            for node in walk(item.tree):
                if isinstance(node, Field) and len(node.steps) == 1:
                    step = node.steps[0]
                    if isinstance(step, str):
                        index = _slot_index(step)
                        if index is not None:
                            out[step] = index
        return out


# --- parsing -------------------------------------------------------------------------


def _syntax(part: str, text: str, exc: FilterSyntaxError, offset: int = 0) -> ViewDefinitionError:
    return ViewDefinitionError(part, text, f"{exc.message} at column {exc.position + offset}")


def _tokens(part: str, text: str) -> list[Token]:
    try:
        return tokenize(text)
    except FilterSyntaxError as exc:
        raise _syntax(part, text, exc) from None


def _plain_path(part: str, text: str, tok: Token, what: str) -> Path:
    steps = tok.value
    if any(isinstance(s, int) for s in steps):
        raise ViewDefinitionError(part, text, f"{what} {tok.text} cannot hold an array index")
    for step in steps:
        if any(ord(c) < 0x20 or c == "\x7f" or ord(c) >= _SLOT_BASE for c in step):
            raise ViewDefinitionError(
                part, text, f"{what} {tok.text} has a control or reserved character"
            )
    return tuple(steps)


def _grouping(fields: Sequence[str]) -> tuple[Path, ...]:
    if not fields:
        raise ViewDefinitionError(
            "grouping", "", "a view needs at least one grouping field (e.g. /symbol)"
        )
    out: list[Path] = []
    for raw in fields:
        text = raw.strip()
        toks = _tokens("grouping", text)
        if len(toks) != 2 or toks[0].kind is not Kind.PATH:
            raise ViewDefinitionError(
                "grouping", raw, "a grouping field is one field path, e.g. /symbol"
            )
        steps = _plain_path("grouping", raw, toks[0], "the grouping field")
        if steps in out:
            raise ViewDefinitionError("grouping", raw, f"{path_text(steps)} is listed twice")
        out.append(steps)
    return tuple(out)


def _check_functions(part: str, text: str, toks: Sequence[Token], *, aggregates: bool) -> None:
    """Refuse unknown names before the parser does, suggesting aggregates too, and
    aggregates where they cannot be (a filter, an aggregate's argument)."""
    known = [*FUNCTIONS, "IF", *AGGREGATE_FUNCTIONS]
    for tok, nxt in itertools.pairwise(toks):
        if tok.kind is not Kind.WORD or nxt.kind is not Kind.LPAREN:
            continue
        name = tok.value
        if name in AGGREGATE_FUNCTIONS and not aggregates:
            where = "in a filter" if part == "filter" else "inside another aggregate"
            raise ViewDefinitionError(
                part,
                text,
                f"{name} at column {tok.pos} is an aggregate: aggregates are not allowed "
                f"{where} (it is evaluated on one record of the underlying topic)",
            )
        if name not in known:
            close = difflib.get_close_matches(name, known, n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise ViewDefinitionError(
                part, text, f"unknown function {tok.text!r} at column {tok.pos}{hint}"
            )


def _check_pure(part: str, text: str, tree: Node) -> None:
    for node in walk(tree):
        if isinstance(node, Call) and FUNCTIONS[node.name].kind != "pure":
            raise ViewDefinitionError(
                part,
                text,
                f"{node.name}() at column {node.pos} reads the message or the clock: a view "
                "is maintained as records change, so its expressions may read only fields",
            )


def _parse(part: str, text: str, shown: str) -> Node:
    try:
        return parse(text)
    except FilterSyntaxError as exc:
        raise _syntax(part, shown, exc) from None


def _closing(toks: Sequence[Token], open_index: int) -> int | None:
    depth = 0
    for j in range(open_index, len(toks)):
        kind = toks[j].kind
        if kind is Kind.LPAREN:
            depth += 1
        elif kind is Kind.RPAREN:
            depth -= 1
            if depth == 0:
                return j
    return None


class _ItemParser:
    """Parses the projection items of one view, sharing aggregates between them."""

    def __init__(self, grouping: tuple[Path, ...]) -> None:
        self.grouping = grouping
        self.aggregates: list[Aggregate] = []
        self.by_text: dict[str, int] = {}

    def aggregate(self, item: str, toks: Sequence[Token], i: int, close: int) -> int:
        """Aggregate index of the call whose name is ``toks[i]`` and ``)`` ``toks[close]``."""
        name_tok = toks[i]
        name = name_tok.value
        inner_toks = toks[i + 2 : close]
        start = toks[i + 1].pos  # 0-based index of the argument's first character
        inner = item[start : toks[close].pos - 1]
        if not inner.strip():
            raise ViewDefinitionError(
                "projection", item, f"{name} at column {name_tok.pos} needs an argument"
            )
        depth = 0
        for tok in inner_toks:
            depth += tok.kind is Kind.LPAREN
            depth -= tok.kind is Kind.RPAREN
            if depth == 0 and tok.kind is Kind.COMMA:
                raise ViewDefinitionError(
                    "projection",
                    item,
                    f"{name} at column {name_tok.pos} takes one argument (an expression)",
                )
        argument: Node | None
        if len(inner_toks) == 1 and inner_toks[0].kind is Kind.OP and inner_toks[0].value == "*":
            if name != "COUNT":
                raise ViewDefinitionError(
                    "projection",
                    item,
                    f"{name}(*) at column {name_tok.pos}: only COUNT(*) counts records",
                )
            argument = None
            text = "COUNT(*)"
        else:
            _check_functions("projection", item, inner_toks, aggregates=False)
            try:
                argument = parse(inner)
            except FilterSyntaxError as exc:
                raise _syntax("projection", item, exc, start) from None
            _check_pure("projection", item, argument)
            text = f"{name}({render(argument)})"
        index = self.by_text.get(text)
        if index is None:
            index = self.by_text[text] = len(self.aggregates)
            self.aggregates.append(Aggregate(name, argument, text))
        return index

    def item(self, raw: str) -> OutputItem:
        text = raw.strip()
        if not text:
            raise ViewDefinitionError("projection", raw, "a projection item is empty")
        toks = _tokens("projection", text)
        out: Path | None = None
        end = len(toks) - 1  # the EOF token
        depth = 0
        for j, tok in enumerate(toks):
            depth += tok.kind is Kind.LPAREN
            depth -= tok.kind is Kind.RPAREN
            if depth == 0 and tok.kind is Kind.WORD and tok.value == "AS":
                target = toks[j + 1]
                if target.kind is not Kind.PATH or toks[j + 2].kind is not Kind.EOF:
                    raise ViewDefinitionError(
                        "projection",
                        text,
                        f"AS at column {tok.pos} must be followed by the output field "
                        "path and nothing else (e.g. AS /total)",
                    )
                out = _plain_path("projection", text, target, "the output field")
                end = j
                break
        expr_end = toks[end].pos - 1
        expr_text = text[:expr_end].rstrip()
        if not expr_text:
            raise ViewDefinitionError(
                "projection", text, "expected an expression before AS (e.g. SUM(/qty) AS /total)"
            )
        expr_toks = toks[:end]
        _check_functions("projection", text, expr_toks, aggregates=True)
        pieces: list[str] = []
        last = 0
        j = 0
        while j < len(expr_toks):
            tok = expr_toks[j]
            if (
                tok.kind is Kind.WORD
                and tok.value in AGGREGATE_FUNCTIONS
                and j + 1 < len(toks)
                and toks[j + 1].kind is Kind.LPAREN
            ):
                close = _closing(toks, j + 1)
                if close is None or close >= end:
                    raise ViewDefinitionError(
                        "projection",
                        text,
                        f"the '(' of {tok.value} at column {tok.pos} is not closed",
                    )
                index = self.aggregate(text, toks, j, close)
                first = tok.pos - 1
                width = toks[close].pos - tok.pos + 1  # the call's length in characters
                assert width > 5, "an aggregate call has a name, '(', an argument and ')'"
                pieces.append(text[last:first])
                pieces.append('(/"' + slot_name(index, width - 5) + '")')
                last = toks[close].pos
                j = close + 1
                continue
            j += 1
        pieces.append(expr_text[last:])
        expression = "".join(pieces)
        tree = _parse("projection", expression, text)
        _check_pure("projection", text, tree)
        for node in walk(tree):
            if not isinstance(node, Field):
                continue
            step = node.steps[0]
            if len(node.steps) == 1 and isinstance(step, str) and _slot_index(step) is not None:
                continue
            if node.steps not in self.grouping:
                raise ViewDefinitionError(
                    "projection",
                    text,
                    f"{node.text} at column {node.pos} is not a grouping field: a view's "
                    f"record stands for many records, so use it inside an aggregate "
                    f"(e.g. SUM({node.text})) or add it to the grouping",
                )
        if isinstance(tree, Field):
            step = tree.steps[0]
            slot = _slot_index(step) if len(tree.steps) == 1 and isinstance(step, str) else None
            if slot is not None:
                if out is None:
                    name = self.aggregates[slot].text
                    raise ViewDefinitionError(
                        "projection",
                        text,
                        f"{name} needs an output field: write {name} AS /name",
                    )
                return OutputItem(text, out, "aggregate", slot)
            steps: Path = tuple(str(s) for s in tree.steps)
            return OutputItem(text, out or steps, "group", self.grouping.index(steps))
        if out is None:
            raise ViewDefinitionError(
                "projection", text, "a computed field needs an output field: add AS /name"
            )
        return OutputItem(text, out, "computed", -1, expression, tree)


def _check_outputs(items: Sequence[OutputItem]) -> None:
    seen: dict[Path, OutputItem] = {}
    for item in items:
        for other_path, other in seen.items():
            if other_path == item.out:
                raise ViewDefinitionError(
                    "projection",
                    item.text,
                    f"the output field {item.out_text} is also written by {other.text!r}",
                )
            shorter, longer = sorted((other_path, item.out), key=len)
            if longer[: len(shorter)] == shorter:
                raise ViewDefinitionError(
                    "projection",
                    item.text,
                    f"the output fields {path_text(shorter)} and {path_text(longer)} "
                    f"overlap (with {other.text!r}): one would hold the other",
                )
        seen[item.out] = item


def _filter(text: str | None) -> str | None:
    if text is None or not text.strip():
        return None
    toks = _tokens("filter", text)
    _check_functions("filter", text, toks, aggregates=False)
    tree = _parse("filter", text, text)
    _check_pure("filter", text, tree)
    return text


def parse_definition(
    projection: Sequence[str], grouping: Sequence[str], filter: str | None = None
) -> ViewDefinition:
    """Check and compile a view definition.

    Args:
        projection: the items, e.g. ``["/desk", "SUM(/qty) AS /position"]``.
        grouping: the grouping fields, e.g. ``["/desk"]``.
        filter: the input filter (None or blank: every record of the underlying topic).

    Raises:
        ViewDefinitionError: the definition is not valid; the message says where and why.
    """
    if isinstance(projection, str) or isinstance(grouping, str):
        raise TypeError("projection and grouping are sequences of items, not one string")
    groups = _grouping(grouping)
    if not projection:
        raise ViewDefinitionError("projection", "", "a view needs at least one projection item")
    parser = _ItemParser(groups)
    items = tuple(parser.item(raw) for raw in projection)
    _check_outputs(items)
    return ViewDefinition(items, groups, tuple(parser.aggregates), _filter(filter))
