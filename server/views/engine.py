"""The incremental maintenance of one view: changes of the underlying topic in, changes of
the view's records out (docs/views.md "How a view is kept up to date").

The engine remembers, per record of the underlying topic, what it gave the view (its
*contribution*: its group's key and one prepared input per aggregate) and, per group, the
state of each aggregate and the record it last produced. A change is then:

1. the new contribution of the changed key, from its new body (an insert or an update) or
   none (a delete or an expiry, or a record the filter or the grouping leaves out);
2. the old contribution taken out of its group, the new one put into its group: the same
   group, or two when a record moves;
3. those groups rendered again; a group whose record is unchanged is not reported, and a
   group whose last member left is reported gone.

The old body is never parsed again: the engine takes back exactly what it put in, so it
cannot drift from what it counted. A change that leaves the contribution as it was (a
field nothing reads was updated) costs one parse and one comparison. Per change the work
is bounded by the aggregates' costs (server/views/aggregates.py), never by a group's size.

Owned by one thread (the event loop); no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final, NamedTuple, Protocol

import orjson

from spool.server.expr import Filter, MessageView, ValueExpr, compile_filter, compile_value
from spool.server.expr.values import Value, resolve
from spool.server.views.aggregates import State, input_of, new_state
from spool.server.views.definition import ViewDefinition
from spool.server.views.numbers import json_number

__all__ = ["MAX_GROUP_KEY_CHARS", "Change", "Record", "ViewChange", "ViewEngine", "group_key"]

MAX_GROUP_KEY_CHARS: Final = 4096
"""Longest group key (a SOW key's limit): a record whose grouping values give a longer
one is left out of the view."""

_SCALARS: Final = (str, int, float, bool)

Contribution = tuple[str, tuple[Any, ...]]
"""What one underlying record gives the view: its group's key and its aggregate inputs."""


class Record(Protocol):
    """A record of the underlying topic as the engine reads it (a ``SowRecord``)."""

    @property
    def key(self) -> str: ...

    @property
    def body(self) -> bytes: ...


class Change(Protocol):
    """A change of the underlying topic as the engine reads it (a SOW store's
    ``Change``: ``new`` None for a delete or an expiry)."""

    @property
    def key(self) -> str: ...

    @property
    def new(self) -> Record | None: ...


class ViewChange(NamedTuple):
    """One record of the view changed.

    Attributes:
        key: the group's key (the view record's SOW key: :func:`group_key`).
        body: the record's new JSON body; None when the group is gone (no member left).
    """

    key: str
    body: bytes | None


def group_key(values: Iterable[Value]) -> str:
    """The key of the group of these grouping values: their JSON texts, comma-separated
    (the JSON array of the values without its brackets: ``"EQ","IBM"``)."""
    return orjson.dumps(list(values))[1:-1].decode()


class _Group:
    __slots__ = ("body", "doc", "members", "states", "values")

    def __init__(self, values: tuple[Value, ...], doc: dict[str, Value], states: list[State]):
        self.values = values
        self.doc = doc  # the grouping values at their paths (computed fields read it)
        self.states = states
        self.members = 0
        self.body = b""


def _put(doc: dict[str, Value], steps: tuple[str, ...], value: Value) -> None:
    for step in steps[:-1]:
        inner = doc.get(step)
        if type(inner) is not dict:
            inner = doc[step] = {}
        doc = inner
    doc[steps[-1]] = value


def _json_value(value: Value) -> Value:
    """A computed field's value as JSON can hold it (NULL when it cannot)."""
    t = type(value)
    if t is int:
        return json_number(value)
    if t is list or t is dict:
        try:
            orjson.dumps(value)
        except TypeError:
            return None
    return value


class ViewEngine:
    """One view over one underlying topic, kept up to date change by change.

    Args:
        definition: the view (server/views/definition.py).
        topic: the underlying topic (what ``TOPIC()`` would be; views refuse it today).
    """

    def __init__(self, definition: ViewDefinition, topic: str = "") -> None:
        self.definition = definition
        self.topic = topic
        self._filter: Filter | None = (
            None if definition.filter is None else compile_filter(definition.filter)
        )
        self._grouping = definition.grouping
        args: list[str] = []
        inputs: list[tuple[str, int]] = []  # per aggregate: function, argument index
        for agg in definition.aggregates:
            text = agg.argument_text
            if text is None:
                inputs.append((agg.function, -1))
                continue
            if text not in args:
                args.append(text)
            inputs.append((agg.function, args.index(text)))
        self._args: list[ValueExpr] = [compile_value(a) for a in args]
        self._inputs = inputs
        self._functions = [agg.function for agg in definition.aggregates]
        # what each output field is: (steps, kind, index, expression, slots)
        self._outputs: list[tuple[tuple[str, ...], str, int, ValueExpr | None, dict[str, int]]] = []
        for item in definition.projection:
            expr = compile_value(item.expression) if item.kind == "computed" else None
            self._outputs.append((item.out, item.kind, item.index, expr, definition.slots(item)))
        self._flat = all(len(item.out) == 1 for item in definition.projection)
        self._members: dict[str, Contribution] = {}
        self._groups: dict[str, _Group] = {}

    # --- reading -------------------------------------------------------------------------

    def __len__(self) -> int:
        """How many groups (records of the view) there are."""
        return len(self._groups)

    @property
    def members(self) -> int:
        """How many records of the underlying topic are in some group."""
        return len(self._members)

    def records(self) -> dict[str, bytes]:
        """The view's records: group key -> JSON body (a new dict)."""
        return {key: g.body for key, g in self._groups.items()}

    def get(self, key: str) -> bytes | None:
        """The body of the view record ``key`` (None: no such group)."""
        g = self._groups.get(key)
        return None if g is None else g.body

    def group_of(self, key: str) -> str | None:
        """The group the underlying record ``key`` is in (None: left out, or absent)."""
        c = self._members.get(key)
        return None if c is None else c[0]

    # --- changing ------------------------------------------------------------------------

    def apply(self, change: Change, document: dict[str, Value] | None = None) -> list[ViewChange]:
        """Take one change of the underlying topic (an insert, an update, a delete or an
        expiry: ``change.new`` None) and return the view's changes.

        ``document``, when given, is ``change.new``'s body already parsed (the publish
        path parses it once for everybody); otherwise the body is parsed here.
        """
        new = change.new
        if new is None:
            return self._move(change.key, None)
        return self._move(change.key, self._contribution(new.body, document))

    def load(self, records: Iterable[Record]) -> None:
        """Build the view from the underlying topic's records (at start-up: the view is
        derived state and is not stored). The view must be empty."""
        if self._members:
            raise ValueError("load() builds a view from nothing: this one has records")
        for rec in records:
            contribution = self._contribution(rec.body, None)
            if contribution is not None:
                self._join(rec.key, contribution, None)
        for g in self._groups.values():
            g.body = self._render(g)

    def clear(self) -> list[ViewChange]:
        """Forget every record (the underlying topic was emptied); returns the deletions."""
        gone = [ViewChange(key, None) for key in self._groups]
        self._members.clear()
        self._groups.clear()
        return gone

    # --- inside --------------------------------------------------------------------------

    def _contribution(self, body: bytes, document: dict[str, Value] | None) -> Contribution | None:
        if document is None:
            view = MessageView(self.topic, body)
        else:
            view = MessageView.of_document(self.topic, document, body=body)
        flt = self._filter
        if flt is not None and not flt.matches(view):
            return None
        doc = view.document
        values: list[Value] = []
        for steps in self._grouping:
            v = resolve(doc, steps)
            if type(v) not in _SCALARS:
                return None  # missing, NULL, an object or an array: no group
            values.append(v)
        try:
            key = group_key(values)
        except TypeError:  # an int beyond 64 bits from a document not parsed by orjson
            return None
        if len(key) > MAX_GROUP_KEY_CHARS:
            return None
        raw = [a.evaluate(view) for a in self._args]
        inputs = tuple(input_of(function, 1 if i < 0 else raw[i]) for function, i in self._inputs)
        return (key, inputs)

    def _move(self, key: str, new: Contribution | None) -> list[ViewChange]:
        members = self._members
        old = members.get(key)
        if new is None:
            if old is None:
                return []
            del members[key]
            return self._leave(old)
        if old is not None and old[0] == new[0] and _same(old[1], new[1]):
            return []
        members[key] = new
        if old is None:
            return self._join(key, new, [])
        if old[0] == new[0]:
            g = self._groups[old[0]]
            for state, before, after in zip(g.states, old[1], new[1], strict=True):
                state.remove(before)
                state.add(after)
            return self._rendered(new[0], g, [])
        return self._join(key, new, self._leave(old))

    def _leave(self, old: Contribution) -> list[ViewChange]:
        gkey, inputs = old
        g = self._groups[gkey]
        g.members -= 1
        if not g.members:
            del self._groups[gkey]
            return [ViewChange(gkey, None)]
        for state, x in zip(g.states, inputs, strict=True):
            state.remove(x)
        return self._rendered(gkey, g, [])

    def _join(self, key: str, new: Contribution, out: list[ViewChange] | None) -> list[ViewChange]:
        """Put ``new`` into its group; render it unless ``out`` is None (a bulk load)."""
        gkey, inputs = new
        g = self._groups.get(gkey)
        if g is None:
            g = self._new_group(gkey)
        g.members += 1
        for state, x in zip(g.states, inputs, strict=True):
            state.add(x)
        if out is None:
            self._members[key] = new
            return []
        return self._rendered(gkey, g, out)

    def _new_group(self, gkey: str) -> _Group:
        values = tuple(orjson.loads(b"[" + gkey.encode() + b"]"))
        doc: dict[str, Value] = {}
        for steps, v in zip(self._grouping, values, strict=True):
            _put(doc, steps, v)
        g = _Group(values, doc, [new_state(f) for f in self._functions])
        self._groups[gkey] = g
        return g

    def _rendered(self, gkey: str, g: _Group, out: list[ViewChange]) -> list[ViewChange]:
        body = self._render(g)
        if body != g.body:
            g.body = body
            out.append(ViewChange(gkey, body))
        return out

    def _render(self, g: _Group) -> bytes:
        results = [s.result() for s in g.states]
        record: dict[str, Value] = {}
        flat = self._flat
        for steps, kind, index, expr, slots in self._outputs:
            if kind == "aggregate":
                value = results[index]
            elif kind == "group":
                value = g.values[index]
            else:
                assert expr is not None
                doc = dict(g.doc)
                for name, i in slots.items():
                    doc[name] = results[i]
                value = _json_value(expr.evaluate(MessageView.of_document(self.topic, doc)))
            if flat:
                record[steps[0]] = value
            else:
                _put(record, steps, value)
        return orjson.dumps(record)


def _same(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    """Inputs equal in value *and* type (``1`` and ``1.0`` sum differently)."""
    if a != b:
        return False
    return all(type(x) is type(y) for x, y in zip(a, b, strict=True))
