"""Shared helpers for the expression-language tests."""

from __future__ import annotations

import math
import sys
import tracemalloc
from collections.abc import Callable
from typing import Any

from spool.server.expr import FilterSyntaxError
from spool.server.expr.budget import BUILD_MAX


def same(a: Any, b: Any) -> bool:
    """Strict value equality: same types (True is not 1, 2 is not 2.0), NaN equals NaN."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return bool(a == b)


def expression_work(fn: Callable[[], Any]) -> tuple[int, int, Any]:
    """(calls, peak bytes allocated, result or exception) of ``fn()``."""
    calls = 0

    def profile(frame: object, event: str, arg: object) -> None:
        nonlocal calls
        if event == "call" or event == "c_call":
            calls += 1

    tracemalloc.start()
    tracemalloc.reset_peak()
    sys.setprofile(profile)
    try:
        result: Any = fn()
    except FilterSyntaxError as exc:
        result = exc
    finally:
        sys.setprofile(None)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return calls, peak, result


def work_memory_bound(text: str, body: bytes) -> int:
    """Bytes an evaluation may hold: a string of the longest of the body, the text and
    BUILD_MAX characters (4 bytes each at worst), at most once per nesting level and
    operand, and the parsed body and tree."""
    value = max(len(body), len(text), BUILD_MAX) * 4
    return 64 * 3 * value + 4 * len(text) * 8 + (1 << 20)
