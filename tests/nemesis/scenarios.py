"""Named runs: fixed settings that reproduce a finding, re-run after its fix.

``python -m tests.nemesis --scenario NAME`` (``make nemesis ARGS="--scenario NAME"``).
Each is a seed and a restricted set of fault kinds whose schedule exercises one failure
mode early and often; a run of it passes once the failure mode is gone.
"""

from __future__ import annotations

from dataclasses import dataclass

from tests.nemesis.run import Settings

__all__ = ["SCENARIOS", "Scenario"]


@dataclass(frozen=True)
class Scenario:
    what: str
    settings: Settings


SCENARIOS: dict[str, Scenario] = {
    "torn-tail": Scenario(
        "a stopped instance's last journal record is torn or cut after its peers acked it; "
        "the copy must be repaired from the peers (lost/divergent otherwise)",
        Settings(
            minutes=1.5, seed=3101, instances=3, topology="sync", faults=("torn-tail", "truncate")
        ),
    ),
    "queue-restart": Scenario(
        "traffic stops, every instance is stopped within a second and started again; the "
        "replicated queue must drain (queue-unprocessed / liveness otherwise)",
        Settings(minutes=2.0, seed=3201, instances=3, topology="sync", faults=("restart-all",)),
    ),
    "join-empty": Scenario(
        "an instance is wiped and started empty with a <Bootstrap> from a peer (with "
        "<Users>); it must finish the copy and end with every record its peers hold "
        "(liveness / lost / divergent on it otherwise)",
        Settings(minutes=1.5, seed=3501, instances=3, topology="mixed", faults=("join-empty",)),
    ),
}
