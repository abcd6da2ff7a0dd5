"""Constant folding: which sub-expressions can be evaluated once, at compile time.

A sub-expression without fields, clock or message functions has the same value for every
message, so the compiler replaces it by that value. The value is computed by the
reference evaluator (:func:`~spool.server.expr.reference.evaluate_node`), so a folded constant
means exactly what the reference says it means -- the differential tests compare the two
evaluators, and folding cannot make them disagree.
"""

from __future__ import annotations

from spool.server.clock import Clock
from spool.server.expr.ast import Call, Field, Literal, Node
from spool.server.expr.functions import FUNCTIONS
from spool.server.expr.reference import evaluate_node
from spool.server.expr.values import Value
from spool.server.expr.view import MessageView


class ConstantFolder:
    """Answers "is this node a constant, and which?" for the nodes of one tree.

    The answers are memoised by node identity: the compiler asks about a node from several
    places (its parent, its own compilation, both modes of a predicate), and each question
    about a parent would otherwise re-walk its children.
    """

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._memo: dict[int, tuple[bool, Value]] = {}
        self._scratch = MessageView("", b"")

    def fold(self, node: Node) -> tuple[bool, Value]:
        """``(True, value)`` when ``node`` can be evaluated now, else ``(False, None)``."""
        memo = self._memo.get(id(node))
        if memo is not None:
            return memo
        if isinstance(node, Literal):
            result: tuple[bool, Value] = (True, node.value)
        elif isinstance(node, Field) or (
            isinstance(node, Call) and FUNCTIONS[node.name].kind != "pure"
        ):
            result = (False, None)
        elif all(self.fold(kid)[0] for kid in node.children()):
            result = (True, evaluate_node(node, self._scratch, self.clock))
        else:
            result = (False, None)
        self._memo[id(node)] = result
        return result
