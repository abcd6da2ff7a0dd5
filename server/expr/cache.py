"""Compiling expressions, with bounded caches of the results.

:func:`compile_filter` and :func:`compile_value` are the entry points of the package. Both
keep what they compiled in a bounded LRU keyed by text and clock, so 1,000 subscriptions
with the same filter share one :class:`~spool.server.expr.compiled.Filter`, and a client that
subscribes and unsubscribes in a loop does not recompile (nor grow memory without bound).
A text that does not compile is remembered too (:data:`REFUSED_SIZE` of them): a client
sending the same large bad filter again is answered without parsing it again, and a
text compiled ahead on a worker thread (:func:`is_known`) is answered from here when its
command runs, whichever way it went.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Final, Generic, TypeVar

from spool.server.clock import SYSTEM_CLOCK, Clock
from spool.server.expr.ast import Node
from spool.server.expr.compiled import Filter, ValueExpr
from spool.server.expr.errors import FilterSyntaxError
from spool.server.expr.parser import parse

CACHE_SIZE: Final = 4096
"""Compiled filters (and value expressions) kept by the LRU caches."""

_T = TypeVar("_T")


class _LRU(Generic[_T]):
    """A small thread-safe LRU of compiled objects."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._items: OrderedDict[tuple[str, int], _T] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[str, int]) -> _T | None:
        with self._lock:
            item = self._items.get(key)
            if item is not None:
                self._items.move_to_end(key)
            return item

    def put(self, key: tuple[str, int], item: _T) -> _T:
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


REFUSED_SIZE: Final = 256
"""Texts that did not compile, kept with their error."""

_filters: Final[_LRU[Filter]] = _LRU(CACHE_SIZE)
_values: Final[_LRU[ValueExpr]] = _LRU(CACHE_SIZE)
_refused: Final[_LRU[FilterSyntaxError]] = _LRU(REFUSED_SIZE)


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
    if cached is not None and cached.clock is clock:
        return cached
    refused = _refused.get(key)
    if refused is not None:
        raise FilterSyntaxError(refused.message, refused.position, refused.text)
    try:
        flt = Filter(text, _parse_checked(text), clock)
    except RecursionError:
        exc = FilterSyntaxError("expression nested too deeply", 1, text)
        _refused.put(key, exc)
        raise exc from None
    except FilterSyntaxError as exc:
        _refused.put(key, exc)
        raise
    return _filters.put(key, flt)


def is_known(text: str, *, clock: Clock = SYSTEM_CLOCK) -> bool:
    """Whether :func:`compile_filter` of ``text`` is answered from the caches (compiled
    or refused) without compiling."""
    key = (text, id(clock))
    cached = _filters.get(key)
    return (cached is not None and cached.clock is clock) or _refused.get(key) is not None


def compile_value(text: str, *, clock: Clock = SYSTEM_CLOCK) -> ValueExpr:
    """Compile an expression evaluated for its value (cached like :func:`compile_filter`).

    Raises:
        FilterSyntaxError: the text is not a valid expression.
    """
    key = (text, id(clock))
    cached = _values.get(key)
    if cached is not None and cached.clock is clock:
        return cached
    try:
        expr = ValueExpr(text, _parse_checked(text), clock)
    except RecursionError as exc:
        raise FilterSyntaxError("expression nested too deeply", 1, text) from exc
    return _values.put(key, expr)


def clear_caches() -> None:
    """Forget every cached compiled expression (tests; config reloads)."""
    _filters.clear()
    _values.clear()
    _refused.clear()


def cache_sizes() -> tuple[int, int]:
    """How many filters and value expressions the caches hold."""
    return len(_filters), len(_values)
