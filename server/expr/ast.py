"""The syntax tree of an expression, shared by the reference evaluator and the compiler.

Nodes are immutable. Every node records ``pos``, the 1-based column where it starts (for
error messages), and ``depth``, the height of its subtree: the parser refuses trees deeper
than :data:`MAX_DEPTH` so that neither compiling nor evaluating can exhaust the Python
stack. ``AND`` and ``OR`` chains are n-ary (flattened), so long conjunctions stay shallow.

:func:`render` turns a tree back into expression text that parses to the same tree
(fully parenthesised); the property tests rely on it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Final

from spool.server.expr.values import Value, format_float
from spool.server.regex import Regex

MAX_DEPTH: Final = 64
"""Deepest tree (and deepest nesting of parentheses, calls and unary operators) accepted."""

Step = str | int
"""One step of a field path: an object key or an array index."""


@dataclass(frozen=True, slots=True)
class Node:
    """Base of every node."""

    pos: int = field(kw_only=True, compare=False)
    depth: int = field(init=False, compare=False, default=1)

    def children(self) -> tuple[Node, ...]:
        """Direct sub-expressions, left to right."""
        return ()

    def __post_init__(self) -> None:
        kids = self.children()
        if kids:
            object.__setattr__(self, "depth", 1 + max(k.depth for k in kids))


@dataclass(frozen=True, slots=True)
class Literal(Node):
    """A constant: string, number, TRUE/FALSE or NULL (``None``)."""

    value: Value


@dataclass(frozen=True, slots=True)
class Field(Node):
    """A path into the message body, e.g. ``/order/qty`` or ``/legs[0]/px``."""

    steps: tuple[Step, ...]

    @property
    def text(self) -> str:
        """The canonical spelling of the path."""
        return path_text(self.steps)


@dataclass(frozen=True, slots=True)
class Call(Node):
    """A function call; ``name`` is upper case."""

    name: str
    args: tuple[Node, ...]

    def children(self) -> tuple[Node, ...]:
        return self.args


@dataclass(frozen=True, slots=True)
class Unary(Node):
    """Unary ``-`` or ``+``."""

    op: str
    operand: Node

    def children(self) -> tuple[Node, ...]:
        return (self.operand,)


@dataclass(frozen=True, slots=True)
class Arith(Node):
    """Binary ``+ - * / %``."""

    op: str
    left: Node
    right: Node

    def children(self) -> tuple[Node, ...]:
        return (self.left, self.right)


@dataclass(frozen=True, slots=True)
class Comparison(Node):
    """``= == != <> < <= > >=``."""

    op: str
    left: Node
    right: Node

    def children(self) -> tuple[Node, ...]:
        return (self.left, self.right)


@dataclass(frozen=True, slots=True)
class And(Node):
    """``a AND b AND ...`` (two or more items)."""

    items: tuple[Node, ...]

    def children(self) -> tuple[Node, ...]:
        return self.items


@dataclass(frozen=True, slots=True)
class Or(Node):
    """``a OR b OR ...`` (two or more items)."""

    items: tuple[Node, ...]

    def children(self) -> tuple[Node, ...]:
        return self.items


@dataclass(frozen=True, slots=True)
class Not(Node):
    """``NOT a``."""

    operand: Node

    def children(self) -> tuple[Node, ...]:
        return (self.operand,)


@dataclass(frozen=True, slots=True)
class In(Node):
    """``a [NOT] IN (b, c, ...)``."""

    operand: Node
    items: tuple[Node, ...]
    negated: bool

    def children(self) -> tuple[Node, ...]:
        return (self.operand, *self.items)


@dataclass(frozen=True, slots=True)
class Between(Node):
    """``a [NOT] BETWEEN low AND high``."""

    operand: Node
    low: Node
    high: Node
    negated: bool

    def children(self) -> tuple[Node, ...]:
        return (self.operand, self.low, self.high)


@dataclass(frozen=True, slots=True)
class Like(Node):
    """``a [NOT] LIKE 'regex'``; the pattern is compiled by the parser."""

    operand: Node
    pattern: str
    negated: bool
    regex: Regex = field(compare=False, repr=False, kw_only=True)

    def children(self) -> tuple[Node, ...]:
        return (self.operand,)


@dataclass(frozen=True, slots=True)
class IsNull(Node):
    """``a IS [NOT] NULL``."""

    operand: Node
    negated: bool

    def children(self) -> tuple[Node, ...]:
        return (self.operand,)


@dataclass(frozen=True, slots=True)
class Affix(Node):
    """``a [NOT] BEGINS WITH (...)`` (``ends`` false) or ``ENDS WITH (...)``."""

    operand: Node
    items: tuple[Node, ...]
    ends: bool
    negated: bool

    def children(self) -> tuple[Node, ...]:
        return (self.operand, *self.items)


@dataclass(frozen=True, slots=True)
class Case(Node):
    """``CASE WHEN c THEN v ... [ELSE d] END``; ``IF(c, v[, d])`` parses to this too."""

    whens: tuple[tuple[Node, Node], ...]
    default: Node | None

    def children(self) -> tuple[Node, ...]:
        kids: list[Node] = []
        for cond, value in self.whens:
            kids.append(cond)
            kids.append(value)
        if self.default is not None:
            kids.append(self.default)
        return tuple(kids)


# --- rendering -------------------------------------------------------------------------

NAME_PUNCTUATION: Final = "_@.$:"
"""Characters other than letters and digits allowed in an unquoted path step."""


def is_name_char(ch: str) -> bool:
    """Whether ``ch`` may appear in an unquoted path step (``/order_id``, ``/@Px``)."""
    return ch.isalnum() or ch in NAME_PUNCTUATION


def path_text(steps: tuple[Step, ...]) -> str:
    """Canonical text of a field path: ``/a/b[0]``; keys that are not plain are quoted."""
    out: list[str] = []
    for step in steps:
        if isinstance(step, int):
            out.append(f"[{step}]")
        elif step and all(is_name_char(c) for c in step):
            out.append("/" + step)
        else:
            out.append("/" + quote(step, '"'))
    return "".join(out)


def quote(text: str, mark: str = "'") -> str:
    """A string literal that lexes back to ``text``."""
    body = text.replace("\\", "\\\\").replace(mark, "\\" + mark)
    body = body.replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")
    return f"{mark}{body}{mark}"


def render_literal(value: Value) -> str:
    """Expression text of a constant."""
    if value is None:
        return "NULL"
    if value is True:
        return "TRUE"
    if value is False:
        return "FALSE"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "NAN_VALUE()"
        if math.isinf(value):
            return "(1e999)" if value > 0 else "(-1e999)"
        return format_float(value)
    if isinstance(value, str):
        return quote(value)
    raise TypeError(f"not a literal value: {value!r}")


def render(node: Node) -> str:
    """Expression text for a tree; parsing it gives an equal tree."""
    if isinstance(node, Literal):
        text = render_literal(node.value)
        return f"({text})" if text.startswith("-") else text
    if isinstance(node, Field):
        return node.text
    if isinstance(node, Call):
        return f"{node.name}({', '.join(render(a) for a in node.args)})"
    if isinstance(node, Unary):
        operand = render(node.operand)
        if isinstance(node.operand, Literal) and not operand.startswith("("):
            operand = f"({operand})"  # '-5' would parse back as the literal -5
        return f"({node.op}{operand})"
    if isinstance(node, Arith):
        return f"({render(node.left)} {node.op} {render(node.right)})"
    if isinstance(node, Comparison):
        return f"({render(node.left)} {node.op} {render(node.right)})"
    if isinstance(node, And):
        return "(" + " AND ".join(render(i) for i in node.items) + ")"
    if isinstance(node, Or):
        return "(" + " OR ".join(render(i) for i in node.items) + ")"
    if isinstance(node, Not):
        return f"(NOT {render(node.operand)})"
    if isinstance(node, In):
        op = "NOT IN" if node.negated else "IN"
        return f"({render(node.operand)} {op} ({', '.join(render(i) for i in node.items)}))"
    if isinstance(node, Between):
        op = "NOT BETWEEN" if node.negated else "BETWEEN"
        return f"({render(node.operand)} {op} {render(node.low)} AND {render(node.high)})"
    if isinstance(node, Like):
        op = "NOT LIKE" if node.negated else "LIKE"
        return f"({render(node.operand)} {op} {quote(node.pattern)})"
    if isinstance(node, IsNull):
        return f"({render(node.operand)} IS {'NOT ' if node.negated else ''}NULL)"
    if isinstance(node, Affix):
        op = ("NOT " if node.negated else "") + ("ENDS WITH" if node.ends else "BEGINS WITH")
        return f"({render(node.operand)} {op} ({', '.join(render(i) for i in node.items)}))"
    if isinstance(node, Case):
        parts = ["CASE"]
        for cond, value in node.whens:
            parts.append(f"WHEN {render(cond)} THEN {render(value)}")
        if node.default is not None:
            parts.append(f"ELSE {render(node.default)}")
        parts.append("END")
        return "(" + " ".join(parts) + ")"
    raise TypeError(f"unknown node {type(node).__name__}")


def walk(node: Node) -> list[Node]:
    """Every node of a tree, parents before children (depth is bounded by MAX_DEPTH)."""
    out = [node]
    for kid in node.children():
        out.extend(walk(kid))
    return out
