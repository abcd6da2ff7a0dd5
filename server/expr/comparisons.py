"""Closures for comparisons, the node most filters are made of.

The hot shape -- a field compared with a constant (``/qty > 100``, ``/sym = 'IBM'``) -- is
generated from a small source template per (operator, constant kind, mode), with the
operator written inline, the dict lookup inline for top-level fields, and a type test
that sends the common case (a number against a number, a string against a string)
straight to one Python comparison. Anything else (arrays, NULL, booleans, a numeric
string against a number) falls back to :func:`spool.server.expr.values.compare`, the same
function the reference evaluator uses. Templates contain no user data: the key and the
constant are closure variables. A comparison of two computed values always goes through
``compare``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from spool.server.expr.closures import Fn, Mode, constant
from spool.server.expr.values import COMPARISONS, Value, comparable, compare, parse_number

_OP_SOURCE: Final = {
    "=": "==",
    "==": "==",
    "!=": "!=",
    "<>": "!=",
    "<": "<",
    "<=": "<=",
    ">": ">",
    ">=": ">=",
}
_TEMPLATE: Final = """
def make(key, getter, cn, cs, c, op, slow):
    def run(view):
{fetch}
        t = type(x)
{fast}
        return {slow}
    return run
"""
_FETCH_KEY: Final = """\
        d = view._doc
        if d is None:
            d = view.load()
        x = d.get(key)"""
_FETCH_GETTER: Final = "        x = getter(view)"
_FAST_NUMBER: Final = """\
        if t is int or t is float:
            return {result}"""
_FAST_STRING: Final = """\
        if t is str and x:
            return {result}"""
_factories: dict[tuple[str, bool, bool, str, str], Callable[..., Fn]] = {}


def _comparison_factory(
    fetch: str, number: bool, string: bool, mode: Mode, op: str
) -> Callable[..., Fn]:
    """The (cached) factory for one shape of ``field OP constant``.

    ``fetch`` is ``key`` (top-level field read inline) or ``getter``; ``number``/``string``
    say which fast paths the constant allows; ``mode`` is value/true/false.
    """
    cache_key = (fetch, number, string, mode, op)
    factory = _factories.get(cache_key)
    if factory is not None:
        return factory
    sym = _OP_SOURCE[op]
    fast: list[str] = []
    if number:
        result = f"x {sym} cn" if mode != "false" else f"not (x {sym} cn)"
        fast.append(_FAST_NUMBER.format(result=result))
    if string:
        result = f"x {sym} cs" if mode != "false" else f"not (x {sym} cs)"
        fast.append(_FAST_STRING.format(result=result))
    slow = {"value": "slow(x, c, op)", "true": "slow(x, c, op) is True"}.get(
        mode, "slow(x, c, op) is False"
    )
    source = _TEMPLATE.format(
        fetch=_FETCH_KEY if fetch == "key" else _FETCH_GETTER,
        fast="\n".join(fast),
        slow=slow,
    )
    namespace: dict[str, Any] = {"type": type, "int": int, "float": float, "str": str}
    exec(compile(source, f"<filter {op} {mode}>", "exec"), namespace)
    made: Callable[..., Fn] = namespace["make"]
    _factories[cache_key] = made
    return made


def constant_comparison(
    op_name: str, mode: Mode, c: Value, *, key: str | None = None, getter: Fn | None = None
) -> Fn:
    """``field OP c`` for a constant ``c``, reading the field by top-level ``key`` or ``getter``.

    Args:
        op_name: the operator as written (``=``, ``<>``, ``>=``...), constant on the right.
        mode: what the closure answers (``true``/``false`` closures return a plain bool).
        c: the constant, as the reference evaluator folded it.
        key: the field's name when it is a top-level field (read inline, no call).
        getter: otherwise, the closure computing the left-hand value.
    """
    cv = comparable(c)
    if cv is None:
        # Anything compared with NULL is NULL.
        return constant(None if mode == "value" else False)
    number = string = False
    cn: int | float | None = None
    cs: str | None = None
    if isinstance(cv, str):
        string = True
        cs = cv
        n = parse_number(cv)
        if n is not None:
            number, cn = True, n
    else:
        number, cn = True, cv
    op = COMPARISONS[op_name]
    if key is not None:
        factory = _comparison_factory("key", number, string, mode, op_name)
        return factory(key, None, cn, cs, c, op, compare)
    factory = _comparison_factory("getter", number, string, mode, op_name)
    return factory(None, getter, cn, cs, c, op, compare)


def general_comparison(op_name: str, mode: Mode, lf: Fn, rf: Fn) -> Fn:
    """``left OP right`` for two computed values, by the reference rules."""
    op = COMPARISONS[op_name]
    if mode == "value":
        return lambda view: compare(lf(view), rf(view), op)
    if mode == "true":
        return lambda view: compare(lf(view), rf(view), op) is True
    return lambda view: compare(lf(view), rf(view), op) is False
