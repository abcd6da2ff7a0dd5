"""Helpers for the tests that hold a compiled twin to its pure-Python oracle.

The compiled modules (server/speedups.py) are imported directly, whatever
``SPOOL_NO_EXTENSIONS`` says, so the comparison runs in both modes of ``make test``. A
missing module fails the test with the reason: the project's machines have a C compiler,
and a build that silently fell back to Python must not pass for a compiled one.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

import pytest


def compiled(name: str) -> ModuleType:
    """The compiled module ``name`` (fails the test when it was not built)."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        pytest.fail(f"compiled module {name} is not built ({exc}); run `make install`")


def typed(value: Any) -> Any:
    """``value`` with the type of every scalar made explicit (``1 == True`` in Python,
    so plain equality would let a twin return ``True`` for ``1``)."""
    if isinstance(value, dict):
        return [(typed(k), typed(v)) for k, v in value.items()]
    if isinstance(value, list | tuple):
        return (type(value).__name__, [typed(v) for v in value])
    return (type(value).__name__, value)


def outcome(fn: Any, *args: Any, **kwargs: Any) -> tuple[str, Any]:
    """``("ok", result)`` or ``("raised", (type, args, vars))``: the twins must agree on
    errors as well as results."""
    try:
        return "ok", fn(*args, **kwargs)
    except Exception as exc:
        return "raised", (type(exc), exc.args, vars(exc) if hasattr(exc, "__dict__") else None)
