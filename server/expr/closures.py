"""The building blocks every compiled expression is made of: closures over a message view.

A compiled expression is a tree of plain Python closures taking a
:class:`~spool.server.expr.view.MessageView`. ``value`` closures (:data:`Fn`) return the
three-valued result; ``true``/``false`` closures (:data:`Pred`) answer "is it TRUE?" /
"is it FALSE?" with a plain bool, which is all ``Filter.matches`` needs. The pieces here
are the ones every node kind shares: constants, field reads and ``and``/``or`` chains.

They run once per message per filter, so each is written for the interpreter: the common
cases get their own closure (a top-level key, a two-step path, a chain of two or three)
instead of a loop, and the body is read through ``view._doc`` without a method call once
it has been parsed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

from spool.server.expr.values import Value, resolve
from spool.server.expr.view import MessageView

Fn = Callable[[MessageView], Value]
"""A compiled expression in ``value`` mode."""
Pred = Callable[[MessageView], bool]
"""A compiled expression in ``true`` or ``false`` mode."""
Mode = Literal["value", "true", "false"]
"""What a compiled closure answers: the value, "is it TRUE?" or "is it FALSE?"."""


def field_getter(steps: tuple[str | int, ...]) -> Fn:
    """A closure reading one field path from a view (parsing the body on first use)."""
    if len(steps) == 1 and type(steps[0]) is str:
        key = steps[0]

        def get_key(view: MessageView) -> Value:
            d = view._doc
            if d is None:
                d = view.load()
            return d.get(key)

        return get_key
    if len(steps) == 2 and type(steps[0]) is str and type(steps[1]) is str:
        outer, inner = steps[0], steps[1]
        rest = steps[1:]

        def get_two(view: MessageView) -> Value:
            d = view._doc
            if d is None:
                d = view.load()
            x = d.get(outer)
            if type(x) is dict:
                return x.get(inner)
            return resolve(x, rest)

        return get_two

    def get_path(view: MessageView) -> Value:
        d = view._doc
        if d is None:
            d = view.load()
        return resolve(d, steps)

    return get_path


def constant(value: Value) -> Fn:
    """A closure returning ``value`` whatever the message."""
    return lambda view: value


def always(result: bool) -> Pred:
    """A predicate returning ``result`` whatever the message."""
    return (lambda view: True) if result else (lambda view: False)


def all_of(preds: Sequence[Pred]) -> Pred:
    """A predicate TRUE when every one of ``preds`` is, stopping at the first that is not."""
    if len(preds) == 2:
        a, b = preds

        def both(view: MessageView) -> bool:
            return a(view) and b(view)

        return both
    if len(preds) == 3:
        a, b, c = preds

        def three(view: MessageView) -> bool:
            return a(view) and b(view) and c(view)

        return three
    items = tuple(preds)

    def every(view: MessageView) -> bool:
        return all(p(view) for p in items)

    return every


def any_of(preds: Sequence[Pred]) -> Pred:
    """A predicate TRUE when one of ``preds`` is, stopping at the first that is."""
    if len(preds) == 2:
        a, b = preds

        def either(view: MessageView) -> bool:
            return a(view) or b(view)

        return either
    if len(preds) == 3:
        a, b, c = preds

        def one_of_three(view: MessageView) -> bool:
            return a(view) or b(view) or c(view)

        return one_of_three
    items = tuple(preds)

    def some(view: MessageView) -> bool:
        return any(p(view) for p in items)

    return some
