"""The compiled expressions callers hold: :class:`Filter` and :class:`ValueExpr`.

A :class:`Filter` answers "does this message match?" (subscriptions, SOW queries, queue
barriers); a :class:`ValueExpr` gives an expression's value (conflation keys, SOW keys,
Spark). Both wrap the closure the :class:`~spool.server.expr.compiler.Compiler` built, plus what
callers need to know about the expression without evaluating it (the fields and
functions it reads). Evaluation never raises: a filter runs inside the fan-out, where an
exception would take a session down for one odd message.

The per-message methods are the hot path: ``matches`` is one ``try`` around one call of
the compiled predicate, and ``select`` hoists the predicate and the view out of its loop.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from spool.server.clock import Clock
from spool.server.expr.ast import Call, Field, Node, walk
from spool.server.expr.closures import Fn, Pred
from spool.server.expr.compiler import Compiler
from spool.server.expr.values import Value
from spool.server.expr.view import MessageView


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
        clock: the time source of its clock functions (part of its identity: the same
            text compiled for another clock is another filter).
    """

    __slots__ = ("_pred", "clock", "errors", "functions", "paths", "reads_body", "text")

    def __init__(self, text: str, tree: Node, clock: Clock) -> None:
        self.text = text
        self.paths = _paths(tree)
        self.reads_body = _reads_body(tree)
        self.functions = frozenset(n.name for n in walk(tree) if isinstance(n, Call))
        self.errors = 0
        self.clock = clock
        self._pred: Pred = Compiler(clock).true(tree)

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
        documents: list[dict[str, Value] | None] | None = None,
    ) -> list[int]:
        """The indices ``i`` of messages ``(topics[i], bodies[i])`` the filter matches.

        The batch form of :meth:`matches` for replays, which filter thousands of
        records per read: one view is reused and the per-call overhead goes away.
        ``bookmark_of`` / ``timestamp_of`` give a record's ``BOOKMARK()`` and
        ``TIMESTAMP()``; they are called only when the filter uses those functions.
        ``CLIENT_NAME()`` is empty (a replayed record does not keep its publisher's name).
        ``documents``, when given, holds each body parsed (None: not yet), shared by the
        filters that read the same messages: a body parsed here is kept there.
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
            view._doc = None if documents is None else documents[i]
            if bm_of is not None:
                view.bookmark = bm_of(i)
            if ts_of is not None:
                view.timestamp = ts_of(i)
            try:
                if pred(view):
                    keep(i)
            except Exception:  # as in matches(): an error is "no match", never a crash
                self.errors += 1
            if documents is not None:
                documents[i] = view._doc
        return out

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Filter):
            return NotImplemented
        return self.text == other.text and self.clock is other.clock

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
        clock: the time source of its clock functions (part of its identity, as for
            :class:`Filter`).
    """

    __slots__ = ("_fn", "clock", "errors", "paths", "text")

    def __init__(self, text: str, tree: Node, clock: Clock) -> None:
        self.text = text
        self.paths = _paths(tree)
        self.errors = 0
        self.clock = clock
        self._fn: Fn = Compiler(clock).value(tree)

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
        return self.text == other.text and self.clock is other.clock

    def __hash__(self) -> int:
        return hash(self.text)

    def __repr__(self) -> str:
        return f"ValueExpr({self.text!r})"
