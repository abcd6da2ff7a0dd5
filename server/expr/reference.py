"""The reference evaluator: a plain tree walk that reads as the specification.

It is deliberately simple -- one method per node kind, no specialisation, no caching --
so that the compiled closures (server/expr/compiler.py), which are fast and therefore
clever, can be checked against it on generated expressions and documents (the
differential property test). The compiler also uses it to fold constant sub-expressions
(server/expr/folding.py), so a constant means exactly what the reference says it means.
"""

from __future__ import annotations

from spool.server.clock import SYSTEM_CLOCK, Clock
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
    Literal,
    Node,
    Not,
    Or,
    Unary,
)
from spool.server.expr.functions import FUNCTIONS, invoke
from spool.server.expr.parser import parse
from spool.server.expr.values import (
    ARITHMETIC,
    COMPARISONS,
    Value,
    affix_match,
    arithmetic,
    between,
    compare,
    in_list,
    is_null,
    like,
    negate,
    not3,
    positive,
    resolve,
    truth,
)
from spool.server.expr.view import MessageView


class Reference:
    """Evaluates trees against one view with one clock."""

    def __init__(self, view: MessageView, clock: Clock = SYSTEM_CLOCK) -> None:
        self.view = view
        self.clock = clock

    def eval(self, node: Node) -> Value:
        """The value of ``node`` (``None`` is NULL; predicates give True/False/None)."""
        if isinstance(node, Literal):
            return node.value
        if isinstance(node, Field):
            return resolve(self.view.document, node.steps)
        if isinstance(node, Comparison):
            return compare(self.eval(node.left), self.eval(node.right), COMPARISONS[node.op])
        if isinstance(node, And):
            return self._and(node)
        if isinstance(node, Or):
            return self._or(node)
        if isinstance(node, Not):
            return not3(truth(self.eval(node.operand)))
        if isinstance(node, Arith):
            return arithmetic(ARITHMETIC[node.op], self.eval(node.left), self.eval(node.right))
        if isinstance(node, Unary):
            value = self.eval(node.operand)
            return negate(value) if node.op == "-" else positive(value)
        if isinstance(node, In):
            result = in_list(self.eval(node.operand), [self.eval(i) for i in node.items])
            return not3(result) if node.negated else result
        if isinstance(node, Between):
            result = between(self.eval(node.operand), self.eval(node.low), self.eval(node.high))
            return not3(result) if node.negated else result
        if isinstance(node, Like):
            result = like(self.eval(node.operand), node.regex)
            return not3(result) if node.negated else result
        if isinstance(node, IsNull):
            return is_null(self.eval(node.operand)) is not node.negated
        if isinstance(node, Affix):
            result = affix_match(
                self.eval(node.operand), [self.eval(i) for i in node.items], ends=node.ends
            )
            return not3(result) if node.negated else result
        if isinstance(node, Call):
            args = [self.eval(a) for a in node.args]
            return invoke(FUNCTIONS[node.name], args, self.view, self.clock)
        if isinstance(node, Case):
            for cond, value in node.whens:
                if truth(self.eval(cond)) is True:
                    return self.eval(value)
            return None if node.default is None else self.eval(node.default)
        raise TypeError(f"unknown node {type(node).__name__}")

    def _and(self, node: And) -> bool | None:
        unknown = False
        for item in node.items:
            t = truth(self.eval(item))
            if t is False:
                return False
            if t is None:
                unknown = True
        return None if unknown else True

    def _or(self, node: Or) -> bool | None:
        unknown = False
        for item in node.items:
            t = truth(self.eval(item))
            if t is True:
                return True
            if t is None:
                unknown = True
        return None if unknown else False


def evaluate_node(node: Node, view: MessageView, clock: Clock = SYSTEM_CLOCK) -> Value:
    """Evaluate a parsed tree with the reference semantics."""
    return Reference(view, clock).eval(node)


def evaluate_reference(text: str, view: MessageView, *, clock: Clock = SYSTEM_CLOCK) -> Value:
    """Parse ``text`` and evaluate it by walking the tree (the differential-test oracle).

    Raises:
        FilterSyntaxError: ``text`` is not a valid expression.
    """
    return evaluate_node(parse(text), view, clock)
