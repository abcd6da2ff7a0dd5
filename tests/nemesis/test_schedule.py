"""The fault schedule is the seed's alone, covers every kind, and keeps quiet periods."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.nemesis.schedule import KINDS, draw_schedule

NAMES = ["a", "b", "c", "d", "e"]


@given(
    seed=st.integers(0, 2**32),
    n=st.integers(3, 5),
    seconds=st.floats(30, 3600),
    kinds=st.lists(st.sampled_from(sorted(KINDS)), min_size=1, unique=True),
)
@settings(max_examples=60, deadline=None)
def test_a_seed_draws_one_schedule_with_every_kind_and_quiet_periods(
    seed: int, n: int, seconds: float, kinds: list[str]
) -> None:
    names = NAMES[:n]
    one = draw_schedule(seed, names, seconds, kinds)
    assert one == draw_schedule(seed, names, seconds, kinds)  # a replay draws the same
    assert one.kinds() == set(kinds)
    periods = one.periods
    assert periods[-1].quiet, "the run ends on a quiet period"
    assert not periods[0].quiet
    for a, b in itertools.pairwise(periods):
        assert not (a.quiet and b.quiet)
    for p in periods:
        assert set(p.targets) <= set(names)
        if p.shape in ("minority", "split"):
            assert len(p.targets) < n / 2
        if p.shape == "majority":
            assert len(p.targets) > n / 2
    faults = sum(1 for p in periods if not p.quiet)
    if faults >= 8:
        quiet = sum(1 for p in periods if p.quiet)
        assert 0.12 <= quiet / len(periods) <= 0.4


def test_another_seed_draws_another_schedule() -> None:
    kinds = sorted(KINDS)
    a = draw_schedule(1, NAMES[:3], 600, kinds)
    b = draw_schedule(2, NAMES[:3], 600, kinds)
    assert a.periods != b.periods


def test_an_unknown_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown fault kinds: nap"):
        draw_schedule(1, NAMES[:3], 60, ["kill", "nap"])
