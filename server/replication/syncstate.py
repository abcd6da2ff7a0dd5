"""A destination's sync type: configured, effective, and the moves between them (pure).

``SyncType`` in the configuration says whether persisted acks wait for a destination.
At run time an operator (REST, later the actions of the scheduler) can *downgrade* a sync
destination to async, which releases at once the acks that were waiting for it, and
*upgrade* it back. An upgrade takes effect when the destination has caught up: it has
acknowledged every record the log held when the upgrade was asked (until then the
destination is ``upgrading`` and acks do not wait for it). A destination configured async
cannot be upgraded, and only a sync one can be downgraded.

``Tuning/MinimumSyncDestinations`` is a floor for downgrades only: a downgrade that would
leave fewer effective sync destinations than the floor is refused; the floor never
upgrades anything (:func:`check_downgrade`).

At start-up every destination is what its configuration says: a downgrade lasts until the
process stops (docs/replication.md "The sync horizon, downgrade and upgrade").
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from spool.server.replication.errors import SyncChangeRefused

__all__ = ["Effective", "SyncState", "check_downgrade"]

Effective = Literal["sync", "async", "upgrading"]


class SyncState:
    """The sync type of one destination.

    Args:
        name: the destination (for messages).
        configured_sync: ``SyncType`` is sync.

    Attributes:
        effective: what persisted acks follow now.
        upgrade_target: while ``upgrading``: the seq the destination must ack first.
    """

    __slots__ = ("configured_sync", "effective", "name", "upgrade_target")

    def __init__(self, name: str, configured_sync: bool) -> None:
        self.name = name
        self.configured_sync = configured_sync
        self.effective: Effective = "sync" if configured_sync else "async"
        self.upgrade_target = 0

    @property
    def configured(self) -> str:
        return "sync" if self.configured_sync else "async"

    @property
    def holds_acks(self) -> bool:
        """Whether persisted acks wait for this destination now."""
        return self.effective == "sync"

    @property
    def downgraded(self) -> bool:
        """Configured sync, not sync now."""
        return self.configured_sync and self.effective != "sync"

    def downgrade(self) -> None:
        """Stop holding persisted acks for this destination (a pending upgrade ends).

        Raises:
            SyncChangeRefused: it is configured async, or already async.
        """
        if not self.configured_sync:
            raise SyncChangeRefused(f"destination {self.name!r} is configured async")
        if self.effective == "async":
            raise SyncChangeRefused(f"destination {self.name!r} is already downgraded")
        self.effective = "async"
        self.upgrade_target = 0

    def upgrade(self, target: int) -> None:
        """Hold persisted acks for it again once it acknowledged up to ``target``.

        Raises:
            SyncChangeRefused: it is configured async, already sync, or upgrading.
        """
        if not self.configured_sync:
            raise SyncChangeRefused(
                f"destination {self.name!r} is configured async; an upgrade applies to a "
                "downgraded sync destination"
            )
        if self.effective == "sync":
            raise SyncChangeRefused(f"destination {self.name!r} is already sync")
        if self.effective == "upgrading":
            raise SyncChangeRefused(
                f"destination {self.name!r} is already upgrading (it becomes sync once it "
                f"has acknowledged up to {self.upgrade_target})"
            )
        self.effective = "upgrading"
        self.upgrade_target = target

    def caught_up(self, acknowledged: int) -> bool:
        """The destination acknowledged up to ``acknowledged``: an upgrade in progress
        completes when that reaches its target. Returns whether it completed now."""
        if self.effective == "upgrading" and acknowledged >= self.upgrade_target:
            self.effective = "sync"
            self.upgrade_target = 0
            return True
        return False


def check_downgrade(states: Iterable[SyncState], name: str, minimum: int) -> None:
    """Refuse downgrading ``name`` when it would leave fewer than ``minimum`` effective
    sync destinations (a destination that is not sync now does not count).

    Raises:
        SyncChangeRefused: below the floor.
    """
    states = list(states)
    target = next((s for s in states if s.name == name), None)
    if target is None or not target.holds_acks:
        return
    left = sum(1 for s in states if s.holds_acks) - 1
    if left < minimum:
        raise SyncChangeRefused(
            f"downgrading {name!r} would leave {left} sync destination"
            f"{'' if left == 1 else 's'}, below Tuning/MinimumSyncDestinations ({minimum})"
        )
