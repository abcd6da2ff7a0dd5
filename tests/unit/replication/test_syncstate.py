"""Configured and effective sync types, downgrade / upgrade and the floor, as a state
machine against a model."""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from spool.server.replication.errors import SyncChangeRefused
from spool.server.replication.syncstate import SyncState, check_downgrade

NAMES = ("b", "c", "d")
CONFIGURED = {"b": True, "c": True, "d": False}


class SyncMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.minimum = 1
        self.states = {n: SyncState(n, CONFIGURED[n]) for n in NAMES}
        self.model = {n: ("sync" if CONFIGURED[n] else "async") for n in NAMES}
        self.targets = {n: 0 for n in NAMES}

    @rule(name=st.sampled_from(NAMES))
    def downgrade(self, name: str) -> None:
        sync_now = sum(1 for v in self.model.values() if v == "sync")
        allowed = CONFIGURED[name] and self.model[name] != "async"
        below = self.model[name] == "sync" and sync_now - 1 < self.minimum
        if not allowed or below:
            with pytest.raises(SyncChangeRefused):
                check_downgrade(self.states.values(), name, self.minimum)
                self.states[name].downgrade()
            return
        check_downgrade(self.states.values(), name, self.minimum)
        self.states[name].downgrade()
        self.model[name] = "async"

    @rule(name=st.sampled_from(NAMES), upto=st.integers(0, 100))
    def upgrade(self, name: str, upto: int) -> None:
        if not CONFIGURED[name] or self.model[name] != "async":
            with pytest.raises(SyncChangeRefused):
                self.states[name].upgrade(upto)
            return
        self.states[name].upgrade(upto)
        self.model[name] = "upgrading"
        self.targets[name] = upto

    @rule(name=st.sampled_from(NAMES), acked=st.integers(0, 100))
    def acknowledge(self, name: str, acked: int) -> None:
        completes = self.model[name] == "upgrading" and acked >= self.targets[name]
        assert self.states[name].caught_up(acked) == completes
        if completes:
            self.model[name] = "sync"

    @rule(minimum=st.integers(0, 2))
    def floor(self, minimum: int) -> None:
        self.minimum = minimum

    @invariant()
    def matches_the_model(self) -> None:
        for name in NAMES:
            state = self.states[name]
            assert state.effective == self.model[name]
            assert state.holds_acks == (self.model[name] == "sync")
            assert state.downgraded == (CONFIGURED[name] and self.model[name] != "sync")


TestSyncMachine = SyncMachine.TestCase
TestSyncMachine.settings = settings(max_examples=100, stateful_step_count=30, deadline=None)


def test_the_floor_names_the_setting() -> None:
    states = [SyncState("b", True), SyncState("c", False)]
    with pytest.raises(SyncChangeRefused, match=r"MinimumSyncDestinations \(1\)"):
        check_downgrade(states, "b", 1)
    check_downgrade(states, "b", 0)
