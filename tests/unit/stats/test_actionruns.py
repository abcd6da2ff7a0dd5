"""The action-run history table against a list oracle: newest first, per action, bounded."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spool.server.stats.actionruns import ActionRunLog, ActionRunRow
from spool.server.stats.store import StatsStore


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StatsStore]:
    s = StatsStore.open(tmp_path_factory.mktemp("runs") / "stats.db")
    yield s
    s.close()


def row(action: str, n: int) -> ActionRunRow:
    return ActionRunRow(action, "amps-action-on-admin", float(n), n + 0.5, "succeeded", "ops",
                        orjson.dumps({"n": n}).decode())  # fmt: skip


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(actions=st.lists(st.sampled_from(["a", "b", "c"]), max_size=40), keep=st.integers(1, 6))
def test_runs_read_back_newest_first_and_each_action_keeps_its_newest(
    store: StatsStore, actions: list[str], keep: int
) -> None:
    with store.engine.begin() as conn:
        conn.exec_driver_sql("DELETE FROM action_run")
    log = ActionRunLog(store.engine, keep=keep)
    oracle: list[tuple[int, str, int]] = []  # (id, action, n), oldest first
    for n, action in enumerate(actions):
        run_id = log.append(row(action, n))
        oracle.append((run_id, action, n))
        mine = [o for o in oracle if o[1] == action]
        for old in mine[:-keep]:
            oracle.remove(old)
    newest = list(reversed(oracle))
    assert [(r.id, orjson.loads(r.record)["n"]) for r in log.recent(limit=100)] == [
        (i, n) for i, _, n in newest
    ]
    for action in ("a", "b", "c"):
        assert [r.id for r in log.recent(action, 100)] == [i for i, a, _ in newest if a == action]
        last = log.last_of(action)
        expected = next((i for i, a, _ in newest if a == action), None)
        assert (last.id if last else None) == expected
    if len(newest) > 2:
        middle = newest[1][0]
        assert [r.id for r in log.recent(limit=100, before_id=middle)] == [
            i for i, _, _ in newest if i < middle
        ]
    assert len(log.recent(limit=2)) == min(2, len(newest))


def test_the_store_opens_with_the_history_table(tmp_path: Path) -> None:
    s = StatsStore.open(tmp_path / "stats.db")
    try:
        assert s.action_runs.append(row("x", 1)) == 1
        assert [r.id for r in s.action_runs.recent("x")] == [1]
    finally:
        s.close()
