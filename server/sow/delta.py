"""Deltas of JSON records (sans-I/O): merging a ``delta_publish``, diffing for
``delta_subscribe``.

Merge (AMPS "delta publish" semantics): each field of the update replaces the stored one,
except that an object merges into a stored object field by field, at any depth; arrays and
scalars replace whole; a field the update does not name keeps its stored value (so a delta
cannot remove a field: publish the whole record for that).

Diff (what a ``delta_subscribe`` subscriber receives): the fields whose value changed, an
object reduced to its changed fields at any depth, plus the key fields, so that merging
the diff into the previous record gives the new one exactly. When the new record dropped
a field the old one had, no merge can express that: the diff is then the whole record
(``None`` is returned for "send it whole"), and it is an empty object when nothing changed.
"""

from __future__ import annotations

from typing import Final

import orjson

__all__ = ["WHOLE", "diff", "merge"]

Doc = dict[str, object]

#: :func:`diff`'s answer when only the whole record can bring a client up to date
WHOLE: Final = None


def merge(stored: Doc, update: Doc) -> Doc:
    """The record ``stored`` becomes after the delta ``update`` (neither is modified)."""
    merged = dict(stored)
    for name, value in update.items():
        old = merged.get(name)
        if type(value) is dict and type(old) is dict:
            merged[name] = merge(old, value)
        else:
            merged[name] = value
    return merged


def _dumps(value: object) -> bytes:
    return orjson.dumps(value)


def _changes(old: Doc, new: Doc) -> Doc | None:
    """Fields of ``new`` that differ from ``old``; None when ``new`` dropped a field."""
    for name in old:
        if name not in new:
            return None
    out: Doc = {}
    for name, value in new.items():
        if name not in old:
            out[name] = value
            continue
        before = old[name]
        if type(value) is dict and type(before) is dict:
            inner = _changes(before, value)
            if inner is None:
                return None
            if inner:
                out[name] = inner
        elif type(value) is not type(before) or (
            value != before if type(value) is not list else _dumps(value) != _dumps(before)
        ):
            # lists compare as JSON: in Python [1] == [True] == [1.0]
            out[name] = value
    return out


def diff(old: Doc, new: Doc, keys: tuple[tuple[str, ...], ...] = ()) -> Doc | None:
    """What turns ``old`` into ``new`` under :func:`merge`, with the key fields added.

    Args:
        keys: the key paths as steps (``("order", "id")`` for ``/order/id``); their values
            in ``new`` are always included so the subscriber knows which record changed.

    Returns:
        The delta (``{}`` when nothing changed), or :data:`WHOLE` (None) when ``new``
        lacks a field ``old`` had and must be sent whole.
    """
    changed = _changes(old, new)
    if changed is None or not changed:
        return changed
    for steps in keys:
        _copy_path(new, changed, steps)
    return changed


def _copy_path(src: Doc, dst: Doc, steps: tuple[str, ...]) -> None:
    """Copy the value at ``steps`` from ``src`` into ``dst`` (creating the objects on the
    way), leaving what ``dst`` already has."""
    for i, step in enumerate(steps):
        if step not in src:
            return
        value = src[step]
        if i == len(steps) - 1:
            dst.setdefault(step, value)
            return
        if type(value) is not dict:
            return
        inner = dst.get(step)
        if type(inner) is not dict:
            if step in dst:
                return  # dst already holds the whole changed value
            inner = {}
            dst[step] = inner
        src, dst = value, inner
