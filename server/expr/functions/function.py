"""One built-in function of the expression language, and the one way to call it.

Both evaluators (the reference tree-walker and the compiled closures) call built-ins only
through :func:`invoke`, so the AMPS rules -- an array argument stands for its first element
unless the function takes arrays, and a data problem gives NULL instead of an exception --
cannot differ between them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Literal

from spool.server.expr.ast import Call
from spool.server.expr.values import Value, scalar

if TYPE_CHECKING:
    from spool.server.clock import Clock
    from spool.server.expr.view import MessageView

Kind = Literal["pure", "message", "clock"]

RUNTIME_ERRORS: Final = (ArithmeticError, ValueError, TypeError, LookupError, re.error)
"""What a function may raise on odd data; :func:`invoke` turns it into NULL."""


@dataclass(frozen=True, slots=True)
class Function:
    """One built-in function.

    Attributes:
        name: upper-case name.
        min_args, max_args: accepted argument counts (``max_args`` None: any number).
        impl: ``impl(*args)`` for pure functions, ``impl(view)`` for message functions,
            ``impl(clock, *args)`` for clock functions.
        kind: ``pure``, ``message`` or ``clock``.
        arrays: whether arguments are passed whole (arrays included) instead of their first
            element.
        check: compile-time validation of literal arguments (e.g. a regular expression);
            returns the instructions of the regular expressions it compiled (0: none),
            which count against the expression's budget (server/expr/budget.py).
        summary: one line for error messages and the docs.
    """

    name: str
    min_args: int
    max_args: int | None
    impl: Callable[..., Any]
    kind: Kind = "pure"
    arrays: bool = False
    check: Callable[[Call, str], int] | None = None
    summary: str = ""

    def arity(self) -> str:
        """``takes 1 argument``, ``takes 2 or 3 arguments``, ``takes at least 1 argument``."""
        lo, hi = self.min_args, self.max_args
        if hi is None:
            return f"takes at least {lo} argument{'s' if lo != 1 else ''}"
        if lo == hi:
            return f"takes {lo} argument{'s' if lo != 1 else ''}" if lo else "takes no arguments"
        if hi == lo + 1:
            return f"takes {lo} or {hi} arguments"
        return f"takes {lo} to {hi} arguments"


def invoke(fn: Function, args: Sequence[Value], view: MessageView, clock: Clock) -> Value:
    """Call ``fn`` on evaluated arguments the way both evaluators must: total, NULL on error."""
    if not fn.arrays:
        args = [scalar(a) for a in args]
    try:
        if fn.kind == "pure":
            return fn.impl(*args)
        if fn.kind == "message":
            return fn.impl(view)
        return fn.impl(clock, *args)
    except RUNTIME_ERRORS:
        return None
