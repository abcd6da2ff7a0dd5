"""The fault schedule: which fault, on which instances, for how long, drawn from the seed.

The whole schedule is drawn before the run starts, from the seed, the instance names,
the run's length and the kinds enabled, and nothing else: a seed replays the same
schedule on any machine (only the time each step takes to bite and to heal differs).
A run is a sequence of *periods*; a period either injects one fault kind into some
instances and heals it at its end, or is quiet (about a quarter of them). The first
periods of a run take every enabled kind once, in a seeded order, so even a short run
injects each kind; the rest draw kinds at random.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["KINDS", "Period", "Schedule", "draw_schedule"]

#: every fault kind: its nominal duration range in seconds (scaled by the run's
#: ``pace``), the target shapes it draws from, and about how long its healing takes
#: (restarts, waits for the copies), which the schedule counts against the run's length
KINDS: dict[str, tuple[tuple[float, float], tuple[str, ...], float]] = {
    # kind: (nominal duration range s, target shapes, what healing costs besides, s)
    "kill": ((2, 6), ("one", "minority", "majority"), 8),
    "pause": ((4, 9), ("one", "minority", "majority"), 3),
    "partition": ((5, 12), ("isolate", "split", "one-way"), 3),
    "delay": ((5, 12), ("one", "minority", "all"), 2),
    "loss": ((5, 12), ("one", "minority", "all"), 3),
    "disk-full": ((1, 3), ("one",), 5),
    "torn-tail": ((1, 2), ("one", "minority"), 12),
    "truncate": ((1, 2), ("one", "minority"), 12),
    "bit-flip": ((1, 2), ("one", "minority"), 12),
    "missing-journal": ((1, 2), ("one", "minority"), 15),
    "lost-writes": ((1, 2), ("one", "minority"), 10),
    "clock-jump": ((5, 12), ("one", "minority", "all"), 2),
    "downgrade": ((4, 10), ("one", "all"), 3),
    "remove-link": ((4, 10), ("pair",), 20),
    "join-empty": ((1, 2), ("one",), 15),
    "restart-all": ((1, 3), ("all",), 15),
    # the clients' own disk (their file stores), not an instance's: no targets
    "client-disk-full": ((3, 8), ("clients",), 3),
}

#: about a quarter of the periods are quiet
QUIET_SHARE = 0.25
#: a quiet period's nominal length (scaled by the pace)
QUIET = (4.0, 8.0)


@dataclass(frozen=True)
class Period:
    """One step of the schedule.

    Attributes:
        index: its place in the run (0-based).
        kind: a key of :data:`KINDS`, or ``quiet``.
        shape: how the targets were drawn (``one``, ``minority``, ``split``, ...).
        targets: the instances the fault acts on (for a partition: the side cut off).
        duration: seconds the fault stays before it heals (a quiet period: its length).
        params: what else the kind needs (delay, loss share, clock offset, ...).
    """

    index: int
    kind: str
    shape: str
    targets: tuple[str, ...]
    duration: float
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def quiet(self) -> bool:
        return self.kind == "quiet"

    def describe(self) -> str:
        if self.quiet:
            return f"#{self.index} quiet {self.duration:.1f}s"
        extra = " ".join(f"{k}={v}" for k, v in sorted(self.params.items()))
        return (
            f"#{self.index} {self.kind} {self.shape} [{','.join(self.targets)}] "
            f"{self.duration:.1f}s{' ' + extra if extra else ''}"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "kind": self.kind,
            "shape": self.shape,
            "targets": list(self.targets),
            "duration": round(self.duration, 2),
            "params": self.params,
        }


@dataclass(frozen=True)
class Schedule:
    seed: int
    periods: tuple[Period, ...]

    def kinds(self) -> set[str]:
        return {p.kind for p in self.periods if not p.quiet}


def _targets(rng: random.Random, names: Sequence[str], shape: str) -> tuple[str, ...]:
    n = len(names)
    minority = max(1, (n - 1) // 2)
    if shape in ("one", "isolate", "one-way"):
        count = 1
    elif shape in ("minority", "split"):
        count = rng.randint(1, minority)
    elif shape == "majority":
        count = n // 2 + 1
    elif shape == "pair":
        count = 2
    elif shape == "clients":
        return ()
    else:  # all
        return tuple(names)
    return tuple(sorted(rng.sample(list(names), count)))


def _params(rng: random.Random, kind: str, shape: str, names: Sequence[str]) -> dict[str, Any]:
    if kind == "delay":
        return {"delay_ms": rng.choice((50, 100, 200, 400)), "jitter_ms": rng.choice((0, 50))}
    if kind == "loss":
        return {"percent": rng.choice((5, 10, 20, 30))}
    if kind == "clock-jump":
        return {"offset_s": rng.choice((-1, 1)) * rng.choice((30, 300, 3600))}
    if kind == "kill" or kind == "restart-all":
        return {"signal": rng.choice(("KILL", "TERM")) if kind == "restart-all" else "KILL"}
    if kind == "bit-flip":
        return {"file": rng.choice(("journal", "index")), "salt": rng.randrange(1 << 30)}
    if kind == "missing-journal":
        return {"salt": rng.randrange(1 << 30)}
    if kind in ("torn-tail", "truncate"):
        return {"bytes": rng.choice((1, 17, 40, 200)), "salt": rng.randrange(1 << 30)}
    if kind == "join-empty":
        return {"source_salt": rng.randrange(1 << 30)}
    return {}


def draw_schedule(
    seed: int,
    names: Sequence[str],
    seconds: float,
    kinds: Sequence[str],
    *,
    pace: float = 1.0,
) -> Schedule:
    """The periods of a run of about ``seconds`` (nominal durations, before each fault's
    own time to bite and heal), every kind of ``kinds`` at least once.

    ``pace`` scales the nominal durations (the CI variant runs shorter faults).
    """
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        raise ValueError(f"unknown fault kinds: {', '.join(unknown)}")
    rng = random.Random(seed)
    first = list(kinds)
    rng.shuffle(first)
    periods: list[Period] = []
    spent = 0.0
    since_quiet = 0
    while first or spent < seconds:
        # a quiet period about one time in four, never two in a row, and never first
        quiet = (
            bool(periods)
            and not periods[-1].quiet
            and (rng.random() < QUIET_SHARE or since_quiet >= 4)
        )
        index = len(periods)
        if quiet:
            length = rng.uniform(*QUIET) * pace
            periods.append(Period(index, "quiet", "", (), length))
            since_quiet = 0
        else:
            if not kinds:
                break
            kind = first.pop(0) if first else rng.choice(list(kinds))
            (lo, hi), shapes, _ = KINDS[kind]
            shape = rng.choice(shapes)
            targets = _targets(rng, names, shape)
            length = rng.uniform(lo, hi) * pace
            periods.append(
                Period(index, kind, shape, targets, length, _params(rng, kind, shape, names))
            )
            since_quiet += 1
        spent += periods[-1].duration + (0 if quiet else KINDS[periods[-1].kind][2])
    if periods and not periods[-1].quiet:
        periods.append(Period(len(periods), "quiet", "", (), QUIET[0] * pace))
    return Schedule(seed, tuple(periods))
