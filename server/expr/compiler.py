"""Compile a parsed expression once into Python closures; evaluate them many times.

Design, and why:

* A filter is compiled in three *modes*: ``value`` (the three-valued result), ``true``
  ("is it TRUE?", a plain bool) and ``false`` ("is it FALSE?"). ``Filter.matches`` only
  needs "is TRUE", and three-valued logic maps onto the modes without ever materialising
  NULL: ``a AND b`` is TRUE iff both are TRUE, ``NOT a`` is TRUE iff ``a`` is FALSE, and so
  on. Each mode is a chain of plain ``and``/``or`` over bools
  (:mod:`spool.server.expr.closures`).
* ``field OP constant``, the shape of most filters, is generated from source templates
  with the operator inline (:mod:`spool.server.expr.comparisons`).
* ``IN`` with constant lists becomes set lookups; ``LIKE`` keeps its compiled pattern;
  ``BETWEEN`` two numbers is one chained Python comparison for numeric fields.
* Sub-expressions without fields, clock or message functions are folded at compile time
  by the reference evaluator (:mod:`spool.server.expr.folding`), so a constant means exactly
  what the reference says.
* The body is read through :class:`~spool.server.expr.view.MessageView`, parsed on first field
  access, once per message however many filters read it.

:class:`~spool.server.expr.compiled.Filter` and :class:`~spool.server.expr.compiled.ValueExpr` wrap
the closures this module builds; :func:`~spool.server.expr.cache.compile_filter` is the entry
point callers use.
"""

from __future__ import annotations

from typing import Final

from spool.server.clock import Clock
from spool.server.expr.ast import (
    Affix,
    And,
    Arith,
    Between,
    Call,
    Case,
    Comparison,
    Field,
    In,
    IsNull,
    Like,
    Node,
    Not,
    Or,
    Unary,
)
from spool.server.expr.closures import (
    Fn,
    Mode,
    Pred,
    all_of,
    always,
    any_of,
    constant,
    field_getter,
)
from spool.server.expr.comparisons import constant_comparison, general_comparison
from spool.server.expr.folding import ConstantFolder
from spool.server.expr.functions import FUNCTIONS, invoke
from spool.server.expr.values import (
    ARITHMETIC,
    FLIPPED,
    Value,
    affix_match,
    arithmetic,
    between,
    comparable,
    in_list,
    is_null,
    like,
    negate,
    not3,
    parse_number,
    positive,
    truth,
)
from spool.server.expr.view import MessageView

_PREDICATES: Final = (Comparison, In, Between, Like, Affix, IsNull, And, Or, Not)
"""Nodes whose value is already True/False/None (no truth() conversion needed)."""


class Compiler:
    """Compiles the nodes of one tree into closures (one compiler per tree).

    Attributes:
        clock: the time source of the clock functions the closures call.
        fold: ``fold(node)`` is ``(True, value)`` for a sub-expression folded at
            compile time, else ``(False, None)`` (memoised for the tree).
    """

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.fold = ConstantFolder(clock).fold

    # --- value mode -----------------------------------------------------------------

    def value(self, node: Node) -> Fn:
        is_const, const = self.fold(node)
        if is_const:
            return constant(const)
        if isinstance(node, Field):
            return field_getter(node.steps)
        if isinstance(node, Comparison):
            return self.comparison(node, "value")
        if isinstance(node, And):
            return self.and_value(node)
        if isinstance(node, Or):
            return self.or_value(node)
        if isinstance(node, Not):
            inner = self.value(node.operand)
            return lambda view: not3(truth(inner(view)))
        if isinstance(node, Arith):
            return self.arith(node)
        if isinstance(node, Unary):
            operand = self.value(node.operand)
            if node.op == "-":
                return lambda view: negate(operand(view))
            return lambda view: positive(operand(view))
        if isinstance(node, In):
            return self.in_value(node)
        if isinstance(node, Between):
            return self.between_value(node)
        if isinstance(node, Like):
            return self.like_value(node)
        if isinstance(node, IsNull):
            operand = self.value(node.operand)
            negated = node.negated
            return lambda view: is_null(operand(view)) is not negated
        if isinstance(node, Affix):
            return self.affix_value(node)
        if isinstance(node, Call):
            return self.call(node)
        if isinstance(node, Case):
            return self.case(node)
        raise TypeError(f"unknown node {type(node).__name__}")

    def and_value(self, node: And) -> Fn:
        items = [self.value(i) for i in node.items]

        def run(view: MessageView) -> bool | None:
            unknown = False
            for item in items:
                t = truth(item(view))
                if t is False:
                    return False
                if t is None:
                    unknown = True
            return None if unknown else True

        return run

    def or_value(self, node: Or) -> Fn:
        items = [self.value(i) for i in node.items]

        def run(view: MessageView) -> bool | None:
            unknown = False
            for item in items:
                t = truth(item(view))
                if t is True:
                    return True
                if t is None:
                    unknown = True
            return None if unknown else False

        return run

    def arith(self, node: Arith) -> Fn:
        op = ARITHMETIC[node.op]
        left = self.value(node.left)
        right = self.value(node.right)
        return lambda view: arithmetic(op, left(view), right(view))

    def comparison(self, node: Comparison, mode: Mode) -> Fn:
        op_name = node.op
        left, right = node.left, node.right
        left_const, _ = self.fold(left)
        if left_const:
            left, right = right, left
            op_name = FLIPPED[op_name]
        right_const, c = self.fold(right)
        if not right_const:
            return general_comparison(op_name, mode, self.value(left), self.value(right))
        if isinstance(left, Field) and len(left.steps) == 1 and type(left.steps[0]) is str:
            return constant_comparison(op_name, mode, c, key=left.steps[0])
        return constant_comparison(op_name, mode, c, getter=self.value(left))

    def in_value(self, node: In) -> Fn:
        operand = self.value(node.operand)
        negated = node.negated
        consts = [self.fold(i) for i in node.items]
        if not all(is_const for is_const, _ in consts):
            items = [self.value(i) for i in node.items]
            if negated:
                return lambda view: not3(in_list(operand(view), [f(view) for f in items]))
            return lambda view: in_list(operand(view), [f(view) for f in items])
        values = [v for _, v in consts]
        strings: set[str] = set()
        numbers: set[int | float] = set()
        all_numbers: set[int | float] = set()
        has_null = False
        for v in values:
            cv = comparable(v)
            if cv is None:
                has_null = True
            elif isinstance(cv, str):
                strings.add(cv)
                n = parse_number(cv)
                if n is not None and n == n:
                    all_numbers.add(n)
            elif cv == cv:  # NaN equals nothing
                numbers.add(cv)
                all_numbers.add(cv)
        miss: bool | None = None if has_null else False

        def member(view: MessageView) -> bool | None:
            x = operand(view)
            t = type(x)
            if t is str:
                if not x:
                    return None
                if x in strings:
                    return True
                if numbers:
                    n = parse_number(x)
                    if n is not None and n in numbers:
                        return True
                return miss
            if t is int or t is float:
                return True if x in all_numbers else miss
            return in_list(x, values)

        if negated:
            return lambda view: not3(member(view))
        return member

    def between_value(self, node: Between) -> Fn:
        operand = self.value(node.operand)
        negated = node.negated
        low_const, low = self.fold(node.low)
        high_const, high = self.fold(node.high)
        fast = (
            low_const
            and high_const
            and type(comparable(low)) in (int, float)
            and type(comparable(high)) in (int, float)
        )
        if fast:
            lo = comparable(low)
            hi = comparable(high)

            def run(view: MessageView) -> bool | None:
                x = operand(view)
                t = type(x)
                if t is int or t is float:
                    r: bool | None = lo <= x <= hi
                else:
                    r = between(x, low, high)
                return not3(r) if negated else r

            return run
        lf = self.value(node.low)
        hf = self.value(node.high)
        if negated:
            return lambda view: not3(between(operand(view), lf(view), hf(view)))
        return lambda view: between(operand(view), lf(view), hf(view))

    def like_value(self, node: Like) -> Fn:
        operand = self.value(node.operand)
        test = node.regex.test
        regex = node.regex
        negated = node.negated

        def run(view: MessageView) -> bool | None:
            x = operand(view)
            if type(x) is str and x:
                r: bool | None = test(x)
            else:
                r = like(x, regex)
            return not3(r) if negated else r

        return run

    def affix_value(self, node: Affix) -> Fn:
        operand = self.value(node.operand)
        items = [self.value(i) for i in node.items]
        ends = node.ends
        if node.negated:
            return lambda view: not3(
                affix_match(operand(view), [f(view) for f in items], ends=ends)
            )
        return lambda view: affix_match(operand(view), [f(view) for f in items], ends=ends)

    def call(self, node: Call) -> Fn:
        fn = FUNCTIONS[node.name]
        args = [self.value(a) for a in node.args]
        clock = self.clock
        if fn.kind == "message":
            impl = fn.impl
            return lambda view: impl(view)
        return lambda view: invoke(fn, [a(view) for a in args], view, clock)

    def case(self, node: Case) -> Fn:
        whens = [(self.true(c), self.value(v)) for c, v in node.whens]
        default = self.value(node.default) if node.default is not None else constant(None)

        def run(view: MessageView) -> Value:
            for cond, value in whens:
                if cond(view):
                    return value(view)
            return default(view)

        return run

    # --- predicate modes --------------------------------------------------------------

    def true(self, node: Node) -> Pred:
        """A closure telling whether ``node`` is TRUE."""
        return self.predicate(node, True)

    def false(self, node: Node) -> Pred:
        """A closure telling whether ``node`` is FALSE."""
        return self.predicate(node, False)

    def predicate(self, node: Node, want: bool) -> Pred:
        """A closure telling whether ``node`` is ``want`` (TRUE or FALSE; UNKNOWN is
        neither). The two modes are duals: NOT swaps them, and AND is "every item TRUE"
        but "some item FALSE" (OR the reverse)."""
        is_const, const = self.fold(node)
        if is_const:
            return always(truth(const) is want)
        if isinstance(node, And):
            items = [self.predicate(i, want) for i in node.items]
            return all_of(items) if want else any_of(items)
        if isinstance(node, Or):
            items = [self.predicate(i, want) for i in node.items]
            return any_of(items) if want else all_of(items)
        if isinstance(node, Not):
            return self.predicate(node.operand, not want)
        if isinstance(node, Comparison):
            return self.comparison(node, "true" if want else "false")
        fn = self.value(node)
        if isinstance(node, _PREDICATES):
            if want:
                return lambda view: fn(view) is True
            return lambda view: fn(view) is False
        if want:
            return lambda view: truth(fn(view)) is True
        return lambda view: truth(fn(view)) is False
