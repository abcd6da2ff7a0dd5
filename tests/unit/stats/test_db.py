"""The stats database: migrations, pragmas, writer and queries against an oracle."""

from __future__ import annotations

import math
import random
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import inspect, text

from spool.server.stats.db import alembic_config, open_stats_engine
from spool.server.stats.models import Base
from spool.server.stats.query import UnknownMetric
from spool.server.stats.store import StatsStore


@pytest.fixture
def store(tmp_path: Path) -> Iterator[StatsStore]:
    s = StatsStore.open(tmp_path / "sub" / "stats.db")
    yield s
    s.close()


def test_migrations_match_the_models(tmp_path: Path) -> None:
    engine = open_stats_engine(tmp_path / "stats.db")
    # one head: branches that each added a revision need a merge revision
    heads = ScriptDirectory.from_config(alembic_config(str(engine.url))).get_heads()
    assert len(heads) == 1, f"several Alembic heads {heads}: add a merge revision"
    try:
        with engine.connect() as conn:
            diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
            assert diff == []
            version = conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
            assert version == heads[0]
            assert set(inspect(conn).get_table_names()) == {
                "alembic_version",
                *Base.metadata.tables,
            }
            assert {"metric", "sample", "pipeline_run", "action_run", "replication_event"} <= set(
                Base.metadata.tables
            )
    finally:
        engine.dispose()


def test_reopening_an_existing_database_keeps_its_data(tmp_path: Path) -> None:
    path = tmp_path / "stats.db"
    first = StatsStore.open(path)
    first.writer.write(100.0, {"a": 1.0})
    first.close()
    second = StatsStore.open(path)
    try:
        assert second.reader.query_series("a", 0, 200) == [(100.0, 1.0)]
    finally:
        second.close()


def test_connection_pragmas(store: StatsStore) -> None:
    with store.engine.connect() as conn:
        assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"
        assert conn.execute(text("PRAGMA synchronous")).scalar() == 1  # NORMAL
        assert conn.execute(text("PRAGMA foreign_keys")).scalar() == 1


def test_a_file_that_is_not_sqlite_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "stats.db"
    path.write_bytes(b"this is not a database" * 100)
    with pytest.raises(Exception, match="not a database"):
        StatsStore.open(path)


def test_write_and_query_against_an_oracle(store: StatsStore) -> None:
    rng = random.Random(7)
    oracle: dict[str, dict[float, float]] = {}
    paths = ["instance/msgs_in_rate", "host/cpu_percent", "clients/a%2Fb/msgs_out"]
    for tick in range(200):
        ts = 1_000.0 + tick * 10
        values = {p: rng.uniform(0, 100) for p in paths if rng.random() < 0.8}
        assert store.writer.write(ts, values) == len(values)
        for p, v in values.items():
            oracle.setdefault(p, {})[ts] = v
    assert store.reader.list_metrics() == sorted(paths)
    for p in paths:
        t0, t1 = 1_200.0, 2_500.0  # inclusive bounds on sample times
        expected = [(ts, v) for ts, v in sorted(oracle[p].items()) if t0 <= ts <= t1]
        assert store.reader.query_series(p, t0, t1) == expected
        for step in (10.0, 60.0, 333.0):
            buckets: dict[int, list[float]] = {}
            for ts, v in expected:
                buckets.setdefault(int((ts - t0) // step), []).append(v)
            want = [(t0 + k * step, sum(vs) / len(vs)) for k, vs in sorted(buckets.items())]
            got = store.reader.query_series(p, t0, t1, step)
            assert [ts for ts, _ in got] == [ts for ts, _ in want]
            for (_, a), (_, b) in zip(got, want, strict=True):
                assert math.isclose(a, b, rel_tol=1e-9)


def test_unknown_metric(store: StatsStore) -> None:
    with pytest.raises(UnknownMetric) as info:
        store.reader.query_series("nope", 0, 1)
    assert info.value.path == "nope"


def test_non_finite_values_are_skipped_and_rewrites_keep_the_last(store: StatsStore) -> None:
    assert store.writer.write(5.0, {"a": math.nan, "b": math.inf, "c": 1.0}) == 1
    assert store.writer.write(5.0, {"c": 2.0}) == 1
    assert store.writer.write(6.0, {}) == 0
    assert store.reader.list_metrics() == ["c"]
    assert store.reader.query_series("c", 0, 10) == [(5.0, 2.0)]


def test_truncate_deletes_old_samples_and_empty_metrics(store: StatsStore) -> None:
    store.writer.write(10.0, {"old": 1.0, "both": 1.0})
    store.writer.write(20.0, {"both": 2.0, "new": 3.0})
    assert store.writer.truncate(15.0) == 2
    assert store.reader.list_metrics() == ["both", "new"]
    assert store.reader.query_series("both", 0, 100) == [(20.0, 2.0)]
    # the writer recreates a metric that a truncate removed
    store.writer.write(30.0, {"old": 4.0})
    assert store.reader.query_series("old", 0, 100) == [(30.0, 4.0)]


def test_many_metrics_in_one_write(store: StatsStore) -> None:
    values = {f"clients/c{i}/msgs_in": float(i) for i in range(1_200)}
    assert store.writer.write(1.0, values) == 1_200
    assert len(store.reader.list_metrics()) == 1_200
    assert store.reader.query_series("clients/c777/msgs_in", 0, 2) == [(1.0, 777.0)]


def test_delete_series_removes_the_series_and_their_samples_in_batches(
    store: StatsStore,
) -> None:
    # more paths than one batch holds, and names LIKE would misread (% and _)
    doomed = [f"clients/c{i}/msgs_in" for i in range(1_100)] + ["clients/a%25_b/msgs_in"]
    kept = ["clients/keep/msgs_in", "instance/msgs_in"]
    for ts in (1.0, 2.0):
        store.writer.write(ts, dict.fromkeys([*doomed, *kept], ts))
    assert store.writer.delete_series([*doomed, "clients/never/msgs_in"]) == 2 * len(doomed)
    assert store.reader.list_metrics() == kept
    assert store.reader.query_series("clients/keep/msgs_in", 0, 3) == [(1.0, 1.0), (2.0, 2.0)]
    with store.engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM sample")).scalar() == 4
    assert store.writer.delete_series([]) == 0


def test_delete_series_leaves_pipeline_series_alone(store: StatsStore) -> None:
    store.writer.write(1.0, {"clients/x/msgs_in": 1.0})
    with store.engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO pipeline_run (id, job, instance, source, started_at, records,"
                " intervals, damaged_spans) VALUES (1, 'stats', 'i', '/j', 0, 0, '1m', 0)"
            )
        )
        conn.execute(text("UPDATE metric SET run_id = 1"))
    assert store.writer.delete_series(["clients/x/msgs_in"]) == 0
    assert store.reader.list_metrics() == ["clients/x/msgs_in"]
    assert store.reader.last_samples(["clients/"]) == []


def test_last_samples_gives_each_series_its_newest_time(store: StatsStore) -> None:
    store.writer.write(1.0, {"clients/a/msgs_in": 1.0, "subscriptions/a/s/seconds_behind": 0.0})
    store.writer.write(5.0, {"clients/a/msgs_in": 2.0, "instance/msgs_in": 2.0})
    store.writer.write(3.0, {"clients/a_b/msgs_in": 2.0, "clientsX/a/msgs_in": 2.0})
    got = sorted(store.reader.last_samples(["clients/", "subscriptions/"]))
    assert got == [
        ("clients/a/msgs_in", 5.0),
        ("clients/a_b/msgs_in", 3.0),
        ("subscriptions/a/s/seconds_behind", 1.0),
    ]
    assert store.reader.last_samples([]) == []


def test_latest_values_give_each_matching_series_its_newest_recent_value(
    store: StatsStore,
) -> None:
    store.writer.write(1.0, {"topics/a/msgs_in_rate": 1.0, "topics/old/msgs_in_rate": 9.0})
    store.writer.write(5.0, {"topics/a/msgs_in_rate": 2.0, "topics/a/bytes_in_rate": 20.0})
    store.writer.write(6.0, {"topics/a/msgs_in": 3.0, "clients/a/msgs_in_rate": 4.0})
    got = store.reader.latest_values("topics/", "_in_rate", since=4.0)
    assert got == {"topics/a/msgs_in_rate": 2.0, "topics/a/bytes_in_rate": 20.0}
    # the prefix is literal, not a LIKE pattern
    assert store.reader.latest_values("topics_", "_in_rate", since=0.0) == {}


def test_readers_see_data_while_the_file_is_open_elsewhere(store: StatsStore) -> None:
    store.writer.write(1.0, {"a": 1.0})
    other = sqlite3.connect(f"file:{store.path}?mode=ro", uri=True)
    try:
        rows = other.execute(
            "SELECT m.path, s.value FROM sample s JOIN metric m ON m.id = s.metric_id"
        ).fetchall()
    finally:
        other.close()
    assert rows == [("a", 1.0)]


def test_replication_events_are_written_read_by_window_and_truncated(store: StatsStore) -> None:
    rows = [
        (100.0, "out", "b", "connected", "b@g at 127.0.0.1:1"),
        (101.0, "out", "b", "refused", "validation failed: [txlog] ..."),
        (102.0, "in", "a", "connected", "from 127.0.0.1:2"),
        (103.0, "out", "c", "downgraded", "persisted acks no longer wait for it"),
    ]
    assert store.writer.write_link_events(rows) == 4
    assert store.writer.write_link_events([]) == 0
    assert store.reader.link_events(0, 200) == rows
    assert store.reader.link_events(0, 200, link="b") == rows[:2]
    assert store.reader.link_events(0, 200, direction="in") == [rows[2]]
    assert store.reader.link_events(100.5, 102.5) == rows[1:3]
    assert store.reader.link_events(0, 200, limit=2) == rows[2:]  # the newest, oldest first
    store.writer.truncate(102.0)
    assert store.reader.link_events(0, 200) == rows[2:]


def test_link_samples_are_written_read_per_link_and_truncated(store: StatsStore) -> None:
    """The per-link history (migration 0005): one row per link per tick, read back by link
    and direction against the rows written (the oracle), retention applies."""
    ticks = {
        100.0: [("out", "b", True, "sync", 0, 0.0, 10.0, 5), ("in", "z", True, None, 2, None, 1.0, 3)],
        101.0: [("out", "b", True, "async", 40, 7.5, 0.0, 5)],
        102.0: [("out", "b", False, "async", 90, 12.0, 0.0, 5), ("out", "c", True, "sync", 0, 0.0, 1.0, 9)],
    }  # fmt: skip
    for ts, rows in ticks.items():
        assert store.writer.write_link_samples(ts, rows) == len(rows)
    assert store.writer.write_link_samples(103.0, []) == 0

    def oracle(direction: str, link: str, t0: float, t1: float) -> list[dict[str, object]]:
        return [
            {"time": ts, "connected": up, "effective_sync_type": sync, "messages_behind": behind,
             "seconds_behind": seconds, "msgs_per_sec": rate, "position": pos}
            for ts, rows in ticks.items() if t0 <= ts <= t1
            for d, lk, up, sync, behind, seconds, rate, pos in rows if (d, lk) == (direction, link)
        ]  # fmt: skip

    assert store.reader.link_history(0, 200, link="b", direction="out") == oracle(
        "out", "b", 0, 200
    )
    assert [s["effective_sync_type"] for s in oracle("out", "b", 0, 200)] == [
        "sync",
        "async",
        "async",
    ]
    assert store.reader.link_history(0, 200, link="z", direction="in") == oracle("in", "z", 0, 200)
    assert store.reader.link_history(0, 200, link="z", direction="out") == []
    assert store.reader.link_history(100.5, 101.5, link="b", direction="out") == oracle(
        "out", "b", 100.5, 101.5
    )
    newest = store.reader.link_history(0, 200, link="b", direction="out", limit=2)
    assert [s["time"] for s in newest] == [101.0, 102.0]
    store.writer.truncate(101.0)
    assert store.reader.link_history(0, 200, link="b", direction="out") == oracle(
        "out", "b", 101, 200
    )
