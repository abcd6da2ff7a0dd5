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

from collections.abc import Iterable, Sequence
from typing import Any, Final, NamedTuple, Protocol

import orjson

from spool.server.expr import Filter, MessageView, ValueExpr, compile_filter, compile_value
from spool.server.expr.ast import Field
from spool.server.expr.parser import parse
from spool.server.expr.values import Value, resolve
from spool.server.views.aggregates import State, input_function, new_state
from spool.server.views.definition import ViewDefinition
from spool.server.views.numbers import json_number

__all__ = ["MAX_GROUP_KEY_CHARS", "Change", "Record", "ViewChange", "ViewEngine", "group_key"]

MAX_GROUP_KEY_CHARS: Final = 4096
"""Longest group key (a SOW key's limit): a record whose grouping values give a longer
one is left out of the view."""

_SCALARS: Final = frozenset((str, int, float, bool))

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


def _loads(body: bytes) -> dict[str, Value]:
    """A body as a document: one that is not a JSON object has no fields."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return {}
    return doc if type(doc) is dict else {}


def _top_level(text: str) -> str | None:
    """The field name when ``text`` is one top-level field (``/qty``), else None."""
    tree = parse(text)
    if isinstance(tree, Field) and len(tree.steps) == 1 and isinstance(tree.steps[0], str):
        return tree.steps[0]
    return None


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
        # An argument that is one top-level field is read with dict.get; others are
        # compiled expressions over a MessageView (made only when something needs it).
        self._readers: list[tuple[str | None, ValueExpr]] = [
            (_top_level(a), compile_value(a)) for a in args
        ]
        self._inputs = [(i, input_function(f)) for f, i in inputs]
        names = [g[0] for g in definition.grouping if len(g) == 1]
        self._group_names = names if len(names) == len(definition.grouping) else None
        self._needs_view = self._filter is not None or any(n is None for n, _ in self._readers)
        self._functions = [agg.function for agg in definition.aggregates]
        # what each output field is: (steps, kind, index, expression, slots)
        self._outputs: list[tuple[tuple[str, ...], str, int, ValueExpr | None, dict[str, int]]] = []
        for item in definition.projection:
            expr = compile_value(item.expression) if item.kind == "computed" else None
            self._outputs.append((item.out, item.kind, item.index, expr, definition.slots(item)))
        self._simple: list[tuple[str, bool, int]] | None = None
        if all(len(i.out) == 1 and i.kind != "computed" for i in definition.projection):
            self._simple = [(i.out[0], i.kind == "group", i.index) for i in definition.projection]
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
            touched: dict[str, bytes | None] = {}
            self._update(change.key, None, touched)
            return self._changes(touched)
        contribution = self._contribution(new.body, document)
        old = self._members.get(change.key)
        if contribution is None or old is None or old[0] != contribution[0]:
            moved: dict[str, bytes | None] = {}
            self._update(change.key, contribution, moved)
            return self._changes(moved)
        # the usual update: the record stays in its group
        gkey, after = contribution
        before = old[1]
        if before == after and _same(before, after):
            return []
        self._members[change.key] = contribution
        g = self._groups[gkey]
        for state, x, y in zip(g.states, before, after, strict=True):
            if x is not y:
                state.replace(x, y)
        body = self._render(g)
        if body == g.body:
            return []
        g.body = body
        return [ViewChange(gkey, body)]

    def apply_many(
        self, changes: Sequence[Change], documents: Sequence[dict[str, Value] | None] | None = None
    ) -> list[ViewChange]:
        """Take a run of changes (a ``put_run``'s) and return the view's changes: one per
        group the run changed, its record as the run left it, each group rendered once.

        ``documents``, when given, holds per change its new body parsed (None: parse it).
        """
        touched: dict[str, bytes | None] = {}
        update = self._update
        contribution = self._contribution
        for i, change in enumerate(changes):
            new = change.new
            if new is None:
                update(change.key, None, touched)
            else:
                doc = None if documents is None else documents[i]
                update(change.key, contribution(new.body, doc), touched)
        return self._changes(touched)

    def load(self, records: Iterable[Record]) -> None:
        """Build the view from the underlying topic's records (at start-up: the view is
        derived state and is not stored). The view must be empty."""
        if self._members:
            raise ValueError("load() builds a view from nothing: this one has records")
        scratch: dict[str, bytes | None] = {}
        for rec in records:
            contribution = self._contribution(rec.body, None)
            if contribution is not None:
                self._update(rec.key, contribution, scratch)
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
        view: MessageView | None = None
        if self._needs_view:
            if document is None:
                view = MessageView(self.topic, body)
            else:
                view = MessageView.of_document(self.topic, document, body=body)
            flt = self._filter
            if flt is not None and not flt.matches(view):
                return None
            doc = view.document
        elif document is not None:
            doc = document if type(document) is dict else {}
        else:
            doc = _loads(body)
        names = self._group_names
        if names is not None:
            values = [doc.get(n) for n in names]
        else:
            values = [resolve(doc, steps) for steps in self._grouping]
        for v in values:
            if type(v) not in _SCALARS:
                return None  # missing, NULL, an object or an array: no group
        try:
            key = group_key(values)
        except TypeError:  # an int beyond 64 bits from a document not parsed by orjson
            return None
        if len(key) > MAX_GROUP_KEY_CHARS:
            return None
        raw = [
            doc.get(name) if name is not None else expr.evaluate(view)  # type: ignore[arg-type]
            for name, expr in self._readers
        ]
        return (key, tuple([convert(1 if i < 0 else raw[i]) for i, convert in self._inputs]))

    def _update(self, key: str, new: Contribution | None, touched: dict[str, bytes | None]) -> None:
        """Put ``key``'s new contribution in place of its old one, noting in ``touched``
        the record each group had before its first change (None: the group was absent)."""
        members = self._members
        old = members.get(key)
        if new is None:
            if old is None:
                return
            del members[key]
        else:
            if old is not None and old[0] == new[0] and _same(old[1], new[1]):
                return
            members[key] = new
        groups = self._groups
        if old is not None:
            gkey, inputs = old
            g = groups[gkey]
            if gkey not in touched:
                touched[gkey] = g.body
            if new is not None and new[0] == gkey:
                for state, x, y in zip(g.states, inputs, new[1], strict=True):
                    if x is not y:
                        state.replace(x, y)
                return
            g.members -= 1
            if not g.members:
                del groups[gkey]
            else:
                for state, x in zip(g.states, inputs, strict=True):
                    state.remove(x)
        if new is not None:
            gkey, inputs = new
            g = groups.get(gkey)  # type: ignore[assignment]
            if gkey not in touched:
                touched[gkey] = None if g is None else g.body
            if g is None:
                g = self._new_group(gkey)
            g.members += 1
            for state, x in zip(g.states, inputs, strict=True):
                state.add(x)

    def _changes(self, touched: dict[str, bytes | None]) -> list[ViewChange]:
        """Render the touched groups; report those whose record is not what it was."""
        out: list[ViewChange] = []
        groups = self._groups
        for gkey, before in touched.items():
            g = groups.get(gkey)
            if g is None:
                if before is not None:
                    out.append(ViewChange(gkey, None))
                continue
            body = self._render(g)
            g.body = body
            if body != before:
                out.append(ViewChange(gkey, body))
        return out

    def _new_group(self, gkey: str) -> _Group:
        values = tuple(orjson.loads(b"[" + gkey.encode() + b"]"))
        doc: dict[str, Value] = {}
        for steps, v in zip(self._grouping, values, strict=True):
            _put(doc, steps, v)
        g = _Group(values, doc, [new_state(f) for f in self._functions])
        self._groups[gkey] = g
        return g

    def _render(self, g: _Group) -> bytes:
        results = [s.result() for s in g.states]
        simple = self._simple
        if simple is not None:  # flat output paths, no computed field
            values = g.values
            return orjson.dumps(
                {name: values[i] if grouped else results[i] for name, grouped, i in simple}
            )
        record: dict[str, Value] = {}
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
            _put(record, steps, value)
        return orjson.dumps(record)


def _same(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    """Inputs equal in value *and* type (``1`` and ``1.0`` sum differently)."""
    if a != b:
        return False
    return all(type(x) is type(y) for x, y in zip(a, b, strict=True))
