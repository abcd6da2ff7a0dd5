"""Compile expressions once into Python closures; evaluate them many times.

Design, and why:

* A filter is compiled in three *modes*: ``value`` (the three-valued result), ``true``
  ("is it TRUE?", a plain bool) and ``false`` ("is it FALSE?"). ``Filter.matches`` only
  needs "is TRUE", and three-valued logic maps onto the modes without ever materialising
  NULL: ``a AND b`` is TRUE iff both are TRUE, ``NOT a`` is TRUE iff ``a`` is FALSE, and so
  on. Each mode is a chain of plain ``and``/``or`` over bools.
* The hot shape -- a field compared with a constant (``/qty > 100``, ``/sym = 'IBM'``) --
  is generated from a small source template per (operator, constant kind, mode), with the
  operator written inline, the dict lookup inline for top-level fields, and a type test
  that sends the common case (a number against a number, a string against a string)
  straight to one Python comparison. Anything else (arrays, NULL, booleans, a numeric
  string against a number) falls back to :func:`server.expr.values.compare`, the same
  function the reference evaluator uses. Templates contain no user data: the key and the
  constant are closure variables.
* ``IN`` with constant lists becomes set lookups; ``LIKE`` keeps its compiled pattern.
* Sub-expressions without fields, clock or message functions are folded at compile time
  by the reference evaluator, so a constant means exactly what the reference says.
* The body is read through :class:`~server.expr.view.MessageView`, parsed on first field
  access, once per message however many filters read it.

Compiled filters are cached (bounded LRU keyed by text and clock): 1,000 subscriptions
with the same filter share one :class:`Filter`.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final

from server.clock import SYSTEM_CLOCK, Clock
from server.expr.ast import (
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
    walk,
)
from server.expr.errors import FilterSyntaxError
from server.expr.functions import FUNCTIONS, invoke
from server.expr.parser import parse
from server.expr.reference import evaluate_node
from server.expr.values import (
    ARITHMETIC,
    COMPARISONS,
    FLIPPED,
    Value,
    affix_match,
    arithmetic,
    between,
    comparable,
    compare,
    in_list,
    is_null,
    like,
    negate,
    not3,
    parse_number,
    positive,
    resolve,
    truth,
)
from server.expr.view import MessageView

Fn = Callable[[MessageView], Any]
"""A compiled expression in ``value`` mode."""
Pred = Callable[[MessageView], bool]
"""A compiled expression in ``true`` or ``false`` mode."""

CACHE_SIZE: Final = 4096
"""Compiled filters (and value expressions) kept by the LRU caches."""

_PREDICATES: Final = (Comparison, In, Between, Like, Affix, IsNull, And, Or, Not)
"""Nodes whose value is already True/False/None (no truth() conversion needed)."""

# --- generated comparison closures -----------------------------------------------------

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
_factories: dict[tuple[str, bool, bool, str, str], Callable[..., Any]] = {}


def _comparison_factory(
    fetch: str, number: bool, string: bool, mode: str, op: str
) -> Callable[..., Any]:
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
    factory = namespace["make"]
    _factories[cache_key] = factory
    return factory  # type: ignore[no-any-return]


def _field_getter(steps: tuple[str | int, ...]) -> Fn:
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


def _constant(value: Value) -> Fn:
    return lambda view: value


def _always(result: bool) -> Pred:
    return (lambda view: True) if result else (lambda view: False)


class _Compiler:
    """Compiles one tree; holds the constant-folding memo."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._const: dict[int, tuple[bool, Value]] = {}
        self._scratch = MessageView("", b"")

    # --- constants ------------------------------------------------------------------

    def constant(self, node: Node) -> tuple[bool, Value]:
        """``(True, value)`` when ``node`` can be evaluated now, else ``(False, None)``."""
        memo = self._const.get(id(node))
        if memo is not None:
            return memo
        if isinstance(node, Literal):
            result: tuple[bool, Value] = (True, node.value)
        elif isinstance(node, Field) or (
            isinstance(node, Call) and FUNCTIONS[node.name].kind != "pure"
        ):
            result = (False, None)
        elif all(self.constant(kid)[0] for kid in node.children()):
            result = (True, evaluate_node(node, self._scratch, self.clock))
        else:
            result = (False, None)
        self._const[id(node)] = result
        return result

    # --- value mode -----------------------------------------------------------------

    def value(self, node: Node) -> Fn:
        is_const, const = self.constant(node)
        if is_const:
            return _constant(const)
        if isinstance(node, Field):
            return _field_getter(node.steps)
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

    def comparison(self, node: Comparison, mode: str) -> Fn:
        op_name = node.op
        left, right = node.left, node.right
        left_const, _ = self.constant(left)
        if left_const:
            left, right = right, left
            op_name = FLIPPED[op_name]
        right_const, c = self.constant(right)
        op = COMPARISONS[op_name]
        if right_const:
            cv = comparable(c)
            if cv is None:
                # Anything compared with NULL is NULL.
                return _constant(None if mode == "value" else False)
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
            if isinstance(left, Field) and len(left.steps) == 1 and type(left.steps[0]) is str:
                factory = _comparison_factory("key", number, string, mode, op_name)
                return factory(left.steps[0], None, cn, cs, c, op, compare)  # type: ignore[no-any-return]
            getter = self.value(left)
            factory = _comparison_factory("getter", number, string, mode, op_name)
            return factory(None, getter, cn, cs, c, op, compare)  # type: ignore[no-any-return]
        lf = self.value(left)
        rf = self.value(right)
        if mode == "value":
            return lambda view: compare(lf(view), rf(view), op)
        if mode == "true":
            return lambda view: compare(lf(view), rf(view), op) is True
        return lambda view: compare(lf(view), rf(view), op) is False

    def in_value(self, node: In) -> Fn:
        operand = self.value(node.operand)
        negated = node.negated
        consts = [self.constant(i) for i in node.items]
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
        low_const, low = self.constant(node.low)
        high_const, high = self.constant(node.high)
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
        search = node.regex.search
        regex = node.regex
        negated = node.negated

        def run(view: MessageView) -> bool | None:
            x = operand(view)
            if type(x) is str and x:
                r: bool | None = search(x) is not None
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
        default = self.value(node.default) if node.default is not None else _constant(None)

        def run(view: MessageView) -> Value:
            for cond, value in whens:
                if cond(view):
                    return value(view)
            return default(view)

        return run

    # --- predicate modes --------------------------------------------------------------

    def true(self, node: Node) -> Pred:
        """A closure telling whether ``node`` is TRUE."""
        is_const, const = self.constant(node)
        if is_const:
            return _always(truth(const) is True)
        if isinstance(node, And):
            return _all([self.true(i) for i in node.items])
        if isinstance(node, Or):
            return _any([self.true(i) for i in node.items])
        if isinstance(node, Not):
            return self.false(node.operand)
        if isinstance(node, Comparison):
            return self.comparison(node, "true")
        fn = self.value(node)
        if isinstance(node, _PREDICATES):
            return lambda view: fn(view) is True
        return lambda view: truth(fn(view)) is True

    def false(self, node: Node) -> Pred:
        """A closure telling whether ``node`` is FALSE."""
        is_const, const = self.constant(node)
        if is_const:
            return _always(truth(const) is False)
        if isinstance(node, And):
            return _any([self.false(i) for i in node.items])
        if isinstance(node, Or):
            return _all([self.false(i) for i in node.items])
        if isinstance(node, Not):
            return self.true(node.operand)
        if isinstance(node, Comparison):
            return self.comparison(node, "false")
        fn = self.value(node)
        if isinstance(node, _PREDICATES):
            return lambda view: fn(view) is False
        return lambda view: truth(fn(view)) is False


def _all(preds: Sequence[Pred]) -> Pred:
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


def _any(preds: Sequence[Pred]) -> Pred:
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


# --- public objects ----------------------------------------------------------------------


def _paths(tree: Node) -> frozenset[str]:
    return frozenset(n.text for n in walk(tree) if isinstance(n, Field))


def _reads_body(tree: Node) -> bool:
    return any(isinstance(n, Field) for n in walk(tree))


class Filter:
    """A compiled content filter.

    Attributes:
        text: the expression as given.
        paths: the field paths it reads (canonical spelling, e.g. ``/legs[0]/px``).
        reads_body: whether it reads the body at all (if not, no message is parsed for it).
        functions: the (upper-case) names of the functions it calls, so callers can skip
            preparing message metadata nobody reads (``BOOKMARK()``, ``TIMESTAMP()``).
        errors: evaluations that hit an unexpected internal error and were treated as "no
            match" (should stay 0; counted so a defect is visible instead of fatal).
    """

    __slots__ = ("_clock", "_pred", "errors", "functions", "paths", "reads_body", "text")

    def __init__(self, text: str, tree: Node, clock: Clock) -> None:
        self.text = text
        self.paths = _paths(tree)
        self.reads_body = _reads_body(tree)
        self.functions = frozenset(n.name for n in walk(tree) if isinstance(n, Call))
        self.errors = 0
        self._clock = clock
        self._pred: Pred = _Compiler(clock).true(tree)

    def matches(self, view: MessageView) -> bool:
        """Whether the filter is TRUE for this message (NULL and FALSE do not match).

        Never raises: the message is not delivered if evaluation fails unexpectedly.
        """
        try:
            return self._pred(view)
        except Exception:  # a filter must never take the fan-out (or the session) down
            self.errors += 1
            return False

    def select(
        self,
        topics: Sequence[str],
        bodies: Sequence[bytes],
        indices: Iterable[int],
        bookmark_of: Callable[[int], str] | None = None,
        timestamp_of: Callable[[int], str] | None = None,
    ) -> list[int]:
        """The indices ``i`` of messages ``(topics[i], bodies[i])`` the filter matches.

        The batch form of :meth:`matches` for replays, which filter thousands of
        records per read: one view is reused and the per-call overhead goes away.
        ``bookmark_of`` / ``timestamp_of`` give a record's ``BOOKMARK()`` and
        ``TIMESTAMP()``; they are called only when the filter uses those functions.
        ``CLIENT_NAME()`` is empty (a replayed record does not keep its publisher's name).
        """
        view = MessageView("", b"")
        pred = self._pred
        functions = self.functions
        bm_of = bookmark_of if "BOOKMARK" in functions else None
        ts_of = timestamp_of if "TIMESTAMP" in functions else None
        out: list[int] = []
        keep = out.append
        for i in indices:
            view.topic = topics[i]
            view.body = bodies[i]
            view._doc = None
            if bm_of is not None:
                view.bookmark = bm_of(i)
            if ts_of is not None:
                view.timestamp = ts_of(i)
            try:
                if pred(view):
                    keep(i)
            except Exception:  # as in matches(): an error is "no match", never a crash
                self.errors += 1
        return out

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Filter):
            return NotImplemented
        return self.text == other.text and self._clock is other._clock

    def __hash__(self) -> int:
        return hash(self.text)

    def __repr__(self) -> str:
        return f"Filter({self.text!r})"


class ValueExpr:
    """A compiled expression evaluated for its value (conflation keys, SOW keys, Spark).

    Attributes:
        text: the expression as given.
        paths: the field paths it reads.
        errors: evaluations that failed unexpectedly and returned NULL (should stay 0).
    """

    __slots__ = ("_clock", "_fn", "errors", "paths", "text")

    def __init__(self, text: str, tree: Node, clock: Clock) -> None:
        self.text = text
        self.paths = _paths(tree)
        self.errors = 0
        self._clock = clock
        self._fn: Fn = _Compiler(clock).value(tree)

    def evaluate(self, view: MessageView) -> Value:
        """The value for this message: ``None`` is NULL; arrays and objects come back whole."""
        try:
            return self._fn(view)
        except Exception:  # same contract as Filter.matches: data never raises
            self.errors += 1
            return None

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ValueExpr):
            return NotImplemented
        return self.text == other.text and self._clock is other._clock

    def __hash__(self) -> int:
        return hash(self.text)

    def __repr__(self) -> str:
        return f"ValueExpr({self.text!r})"


class _LRU:
    """A small thread-safe LRU of compiled objects."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._items: OrderedDict[tuple[str, int], Any] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[str, int]) -> Any:
        with self._lock:
            item = self._items.get(key)
            if item is not None:
                self._items.move_to_end(key)
            return item

    def put(self, key: tuple[str, int], item: Any) -> Any:
        with self._lock:
            existing = self._items.get(key)
            if existing is not None:
                self._items.move_to_end(key)
                return existing
            self._items[key] = item
            if len(self._items) > self.size:
                self._items.popitem(last=False)
            return item

    def clear(self) -> None:
        with self._lock:
            self._items.clear()

    def __len__(self) -> int:
        return len(self._items)


_filters: Final = _LRU(CACHE_SIZE)
_values: Final = _LRU(CACHE_SIZE)


def _parse_checked(text: str) -> Node:
    if not isinstance(text, str):
        raise FilterSyntaxError(f"a filter must be text, not {type(text).__name__}", 1)
    return parse(text)


def compile_filter(text: str, *, clock: Clock = SYSTEM_CLOCK) -> Filter:
    """Compile a content filter (cached: the same text gives the same object).

    Args:
        text: the expression, e.g. ``/qty > 100 AND /sym = 'IBM'``.
        clock: the time source of ``NOW()`` / ``UNIX_TIMESTAMP()`` / ``ISO8601()``.

    Raises:
        FilterSyntaxError: (a ``BadFilter``) the text is not a valid expression.
    """
    key = (text, id(clock))
    cached = _filters.get(key)
    if cached is not None and cached._clock is clock:
        return cached  # type: ignore[no-any-return]
    try:
        flt = Filter(text, _parse_checked(text), clock)
    except RecursionError as exc:
        raise FilterSyntaxError("expression nested too deeply", 1, text) from exc
    return _filters.put(key, flt)  # type: ignore[no-any-return]


def compile_value(text: str, *, clock: Clock = SYSTEM_CLOCK) -> ValueExpr:
    """Compile an expression evaluated for its value (cached like :func:`compile_filter`).

    Raises:
        FilterSyntaxError: the text is not a valid expression.
    """
    key = (text, id(clock))
    cached = _values.get(key)
    if cached is not None and cached._clock is clock:
        return cached  # type: ignore[no-any-return]
    try:
        expr = ValueExpr(text, _parse_checked(text), clock)
    except RecursionError as exc:
        raise FilterSyntaxError("expression nested too deeply", 1, text) from exc
    return _values.put(key, expr)  # type: ignore[no-any-return]


def clear_caches() -> None:
    """Forget every cached compiled expression (tests; config reloads)."""
    _filters.clear()
    _values.clear()


def cache_sizes() -> tuple[int, int]:
    """How many filters and value expressions the caches hold."""
    return len(_filters), len(_values)
