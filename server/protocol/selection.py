"""Select lists: the ``select=[...]`` subscribe option, parsed, and the projection of a
message body onto it (docs/protocol.md "Select lists").

A select list names the fields of a JSON message a subscriber receives. Its items are
``+/path`` (deliver this field) and ``-/path`` (leave it out), a path being ``/a/b``
(field ``b`` of the object in field ``a``). The list starts from the whole message, or
from nothing when its first item is ``-/``. The field at a place in the message is
delivered when the longest listed path leading to it says ``+`` (or, none being listed,
the start says everything); so the order of the items does not matter, and
``select=[-/,+/order,-/order/notes]`` is the order without its notes.

What is delivered is made of the message's leaves (numbers, strings, booleans, null,
arrays and empty objects: a path never reaches into an array): each leaf is kept or left
out as above, and an object appears when something inside it is kept. The body of a
JSON object is delivered as the JSON object of what is kept (``{}`` when nothing is). A
body that is not a JSON object has no fields to select from: it is delivered as it is
when the list starts from the whole message, as ``{}`` when it starts from nothing.

:meth:`SelectList.project` is the one used (one walk over the parsed body, guided by
the list made into a tree); :func:`project_readable` is its definition, written out
(every leaf with its path, each decided alone, then put together again) and its oracle
in the tests.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Final

import orjson

from spool.server.protocol.errors import InvalidOptions

#: one path segment: a field name without ``/``, ``,``, brackets or white space
_SEGMENT_RE: Final = re.compile(r"[^/,\[\]\s]+")
#: a run of digits that may be an integer wider than 64 bits (19 digits always fit)
_LONG_NUMBER: Final = re.compile(rb"[0-9]{20}")
#: an object delivered when a select list starts from nothing and keeps nothing
EMPTY_OBJECT: Final = b"{}"


_projections = 0


def projection_count() -> int:
    """How many bodies :meth:`SelectList.project` projected so far (the tests check that
    a message is projected once per distinct select list, whatever the subscribers)."""
    return _projections


@dataclass(slots=True)
class _Node:
    """A place in the select tree: what the item naming it says (None: no item names it,
    the nearest one above decides) and the places below it that items name."""

    keep: bool | None = None
    below: dict[str, _Node] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SelectList:
    """A parsed ``select=[...]`` option.

    Two lists that mean the same thing are equal and hash alike (the items are kept
    sorted), so the broker projects a message once per distinct list.

    Attributes:
        from_nothing: the list begins with ``-/`` (otherwise it starts from the whole
            message).
        items: ``(keep, path segments)`` of each ``+/path`` (keep) or ``-/path`` item,
            sorted.
    """

    from_nothing: bool
    items: tuple[tuple[bool, tuple[str, ...]], ...]
    _root: _Node = field(init=False, compare=False, hash=False, repr=False)

    def __post_init__(self) -> None:
        root = _Node(keep=not self.from_nothing)
        for keep, path in self.items:
            node = root
            for name in path:
                node = node.below.setdefault(name, _Node())
            node.keep = keep
        object.__setattr__(self, "_root", root)

    def to_text(self) -> str:
        """The option's value, ``[...]``; :func:`parse_select` of it gives an equal list."""
        parts = ["-/"] if self.from_nothing else []
        parts.extend(("+/" if keep else "-/") + "/".join(path) for keep, path in self.items)
        return "[" + ",".join(parts) + "]"

    def project(self, body: bytes) -> bytes:
        """The part of ``body`` this list delivers (module docstring)."""
        global _projections
        _projections += 1
        if _LONG_NUMBER.search(body) is not None:
            return self._rare(body)  # orjson would read a wide integer as a float
        try:
            value = orjson.loads(body)
        except orjson.JSONDecodeError:
            return self._rare(body)
        if type(value) is not dict:
            return self._not_an_object(body)
        if not value:
            return EMPTY_OBJECT
        return orjson.dumps(_walk(value, self._root, not self.from_nothing))

    def _rare(self, body: bytes) -> bytes:
        """A body orjson does not read as it is: not JSON, or JSON beyond it (an
        integer wider than 64 bits, which it reads as a float; NaN); the standard
        library's reader and writer keep such numbers exactly."""
        try:
            value = json.loads(body)
        except (ValueError, UnicodeDecodeError, RecursionError):
            return self._not_an_object(body)
        if not isinstance(value, dict):
            return self._not_an_object(body)
        if not value:
            return EMPTY_OBJECT
        kept = _walk(value, self._root, not self.from_nothing)
        return json.dumps(kept, separators=(",", ":"), ensure_ascii=False).encode()

    def _not_an_object(self, body: bytes) -> bytes:
        return EMPTY_OBJECT if self.from_nothing else body


def _walk(obj: dict[str, Any], node: _Node, keep: bool) -> dict[str, Any]:
    """What is kept of the non-empty object ``obj`` at ``node``; ``keep``: what the
    nearest listed place at or above it says."""
    out: dict[str, Any] = {}
    below = node.below
    for name, value in obj.items():
        child = below.get(name)
        if child is None:
            if keep:
                out[name] = value  # nothing listed below: all of it, or none of it
            continue
        here = keep if child.keep is None else child.keep
        if child.below and type(value) is dict and value:
            part = _walk(value, child, here)
            if part:
                out[name] = part
        elif here:
            out[name] = value
    return out


def project_readable(select: SelectList, body: bytes) -> bytes:
    """:meth:`SelectList.project` by its definition: every leaf of the message with its
    path, kept when the longest listed path that leads to it says so, then the kept
    leaves put back into objects. Slow; the oracle of the tests."""
    try:
        value = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        value = None
        is_object = False
    else:
        is_object = isinstance(value, dict)
    if not is_object:
        return EMPTY_OBJECT if select.from_nothing else body
    rules = {path: keep for keep, path in select.items}

    def decide(path: tuple[str, ...]) -> bool:
        for end in range(len(path), 0, -1):
            if path[:end] in rules:
                return rules[path[:end]]
        return not select.from_nothing

    leaves: list[tuple[tuple[str, ...], Any]] = []

    def flatten(path: tuple[str, ...], item: Any) -> None:
        if isinstance(item, dict) and item:
            for name, inner in item.items():
                flatten((*path, name), inner)
        else:
            leaves.append((path, item))

    flatten((), value)
    out: dict[str, Any] = {}
    for path, leaf in leaves:
        if not path or not decide(path):
            continue  # the root is an empty object: delivered as {} below
        place = out
        for name in path[:-1]:
            place = place.setdefault(name, {})
        place[path[-1]] = leaf
    return json.dumps(out, separators=(",", ":"), ensure_ascii=False).encode()


def parse_select(text: str, item: str) -> SelectList:
    """The select list of ``select=TEXT`` (``item``: the whole option, for errors).

    Raises:
        InvalidOptions: not ``[...]``; an empty list or item; an item that is not
            ``+/path`` or ``-/path`` (``-/`` only first); a path that is not ``/a/b``
            (an empty segment, a trailing ``/``, white space or brackets in a name);
            a path listed twice (with either sign); a list that keeps nothing
            (``[-/]``).
    """
    text = text.strip()
    if not (text.startswith("[") and text.endswith("]")):
        raise InvalidOptions(f"{item!r}: a select list is bracketed, such as [-/,+/id,+/px]")
    parts = [part.strip() for part in text[1:-1].split(",")]
    if parts == [""]:
        raise InvalidOptions(f"{item!r}: the select list is empty")
    from_nothing = parts[0] == "-/"
    if from_nothing:
        parts = parts[1:]
        if not parts:
            raise InvalidOptions(f"{item!r}: [-/] alone selects no field")
    items: dict[tuple[str, ...], bool] = {}
    for part in parts:
        if not part:
            raise InvalidOptions(f"{item!r}: an empty item in the select list")
        sign, path_text = part[0], part[1:]
        if sign not in "+-":
            raise InvalidOptions(
                f"{item!r}: unknown select item {part[:80]!r} (expected +/path or -/path)"
            )
        if path_text == "/":
            raise InvalidOptions(
                f"{item!r}: {part!r} names the whole message: only -/ as the first item"
            )
        if not path_text:
            raise InvalidOptions(f"{item!r}: {part!r} has an empty path")
        if not path_text.startswith("/"):
            raise InvalidOptions(f"{item!r}: {part[:80]!r}: a path is written /a/b")
        path = tuple(path_text[1:].split("/"))
        if any(_SEGMENT_RE.fullmatch(name) is None for name in path):
            raise InvalidOptions(
                f"{item!r}: {part[:80]!r}: a path is written /a/b, each name non-empty, "
                "without white space or brackets"
            )
        if path in items:
            raise InvalidOptions(f"{item!r}: /{'/'.join(path)} is listed twice")
        items[path] = sign == "+"
    ordered = tuple(sorted((keep, path) for path, keep in items.items()))
    return SelectList(from_nothing, ordered)
