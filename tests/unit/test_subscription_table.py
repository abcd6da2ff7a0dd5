"""A connection's subscription table against a dict and the list of changes it must
report (a Hypothesis state machine), and its listener left out when nobody listens."""

from __future__ import annotations

from typing import Literal, cast

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from spool.server.ports import Outbound, SubscriptionEnd
from spool.server.protocol.options import parse_subscribe_options
from spool.server.subscription import SessionSubscription, SubscriptionTable

IDS = st.sampled_from(["a", "b", "c", "d"])
REASONS = st.sampled_from(["unsubscribe", "replaced", "disconnect"])
Change = tuple[Literal["added", "removed"], SessionSubscription, SubscriptionEnd | None]


def sub(sub_id: str, topic: str = "t") -> SessionSubscription:
    return SessionSubscription(
        outbound=cast(Outbound, object()), client="c", user=None, sub_id=sub_id, topic=topic,
        pattern=None, filter=None, filter_text=None, options=parse_subscribe_options(None),
    )  # fmt: skip


class TableMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.table = SubscriptionTable()
        self.heard: list[Change] = []
        self.table.listener = lambda event, s, reason: self.heard.append((event, s, reason))
        self.model: dict[str, SessionSubscription] = {}
        self.expected: list[Change] = []

    @rule(sub_id=IDS, topic=st.sampled_from(["t", "u"]))
    def add(self, sub_id: str, topic: str) -> None:
        new = sub(sub_id, topic)
        old = self.model.get(sub_id)
        if old is not None:
            self.expected.append(("removed", old, "replaced"))
        self.expected.append(("added", new, None))
        self.model[sub_id] = new
        self.table.add(new)

    @rule(sub_id=IDS, reason=REASONS)
    def remove(self, sub_id: str, reason: SubscriptionEnd) -> None:
        old = self.model.pop(sub_id, None)
        if old is not None:
            self.expected.append(("removed", old, reason))
        assert self.table.remove(sub_id, reason) is old

    @rule(reason=REASONS)
    def clear(self, reason: SubscriptionEnd) -> None:
        olds = list(self.model.values())
        self.expected.extend(("removed", s, reason) for s in olds)
        self.model.clear()
        assert self.table.clear(reason) == olds

    @invariant()
    def same_as_the_model(self) -> None:
        table = self.table
        assert dict(table) == self.model and len(table) == len(self.model)
        assert list(table.values()) == list(self.model.values())
        assert all(k in table for k in self.model) and "zz" not in table
        assert table.get("zz") is None
        assert self.heard == self.expected


TestSubscriptionTable = TableMachine.TestCase


def test_a_table_nobody_listens_to_works_alike() -> None:
    table = SubscriptionTable()
    table.add(sub("a"))
    table.add(sub("a"))
    assert table.remove("a", "unsubscribe") is not None
    assert table.clear("disconnect") == [] and len(table) == 0
