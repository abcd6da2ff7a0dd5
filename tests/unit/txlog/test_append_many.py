"""``append_many`` (the publish hot path) against ``append`` as its oracle.

The same publishes go into two logs under the same wall clock: one record at a time
through ``append``, in runs through ``append_many``. Journals, indexes and reads must be
identical, across journal rolls in the middle of a run, and a run must stop exactly at
the first record ``append`` would refuse.
"""

from __future__ import annotations

import random
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spool.server.clock import VirtualClock, time_us
from spool.server.txlog import PublisherSequenceRegression, TransactionLog, TxlogFull
from spool.server.txlog.format.record import RecordKind
from tests.unit.txlog.helpers import INSTANCE, config, run

runs_strategy = st.lists(
    st.tuples(
        st.sampled_from(["orders", "t/b", "ünïcode"]),
        st.sampled_from([11, 22]),
        st.lists(st.integers(0, 700), min_size=1, max_size=40),  # body sizes of one run
        # what else the run's records carry: SOW keys, a record kind, a replication path
        st.sampled_from(["plain", "keys", "delta", "delete", "path"]),
    ),
    min_size=1,
    max_size=12,
)

_KINDS = {"delta": RecordKind.DELTA_PUBLISH, "delete": RecordKind.SOW_DELETE}


def _journal_names(tmp: Path) -> list[str]:
    """The journal files proper (not preallocated ones, not indexes)."""
    pattern = re.compile(re.escape(INSTANCE) + r"\.\d{20}\.journal")
    return sorted(p.name for p in (tmp / "journal").iterdir() if pattern.fullmatch(p.name))


def _log(tmp: Path, clock: VirtualClock, **kw: int) -> TransactionLog:
    """A log on ``clock`` (its flusher never sleeps on it: see helpers)."""
    cfg = config(tmp, flush_interval=0, **kw)
    return TransactionLog(cfg, INSTANCE, clock=clock, block_bytes=512)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(runs=runs_strategy)
def test_runs_equal_single_appends(tmp_path_factory: pytest.TempPathFactory, runs: list) -> None:  # type: ignore[type-arg]
    _compare(tmp_path_factory.mktemp("one"), tmp_path_factory.mktemp("many"), runs)


def _compare(one_dir: Path, many_dir: Path, runs: list[tuple[str, int, list[int], str]]) -> int:
    """Append ``runs`` both ways; assert identical logs; return how many journals."""

    async def body() -> int:
        clock = VirtualClock()
        one = _log(one_dir, clock, journal_size=8 * 1024)
        many = _log(many_dir, clock, journal_size=8 * 1024)
        await one.open()
        await many.open()
        for n, (topic, ph, sizes, shape) in enumerate(runs):
            kind = _KINDS.get(shape, RecordKind.PUBLISH)
            if shape == "delete":
                ph = 0  # a SOW deletion has no publisher identity
            first = one.publisher_last(ph) + 1
            seqs = [first + i if ph else 0 for i in range(len(sizes))]
            bodies = [bytes([65 + (n + i) % 26]) * size for i, size in enumerate(sizes)]
            keys = [f"k{i % 3}\x1e{i}" for i in range(len(sizes))] if shape != "plain" else None
            path = ("a", "b") if shape == "path" else ()
            for i, (s, b) in enumerate(zip(seqs, bodies, strict=True)):
                one.append(topic=topic, message_type="json", pub_hash=ph, pub_seq=s, body=b,
                           kind=kind, path=path, sow_key=keys[i] if keys else "")  # fmt: skip
            got = many.append_many(
                topic=topic, message_type="json", pub_hash=ph, pub_seqs=seqs, bodies=bodies,
                sow_keys=keys, kind=kind, path=path,
            )  # fmt: skip
            assert got == len(bodies)
            assert many.last_seq == one.last_seq
            if ph:
                assert many.publisher_last(ph) == seqs[-1]
            assert many.last_timestamp_us == time_us(clock)
            await clock.advance(0.001)
        await one.wait_durable(one.last_seq)
        await many.wait_durable(many.last_seq)
        assert await many.read_batch(1, max_count=10_000) == await one.read_batch(
            1, max_count=10_000
        )
        # (preallocated files are made by the flusher whenever it gets to it: not compared)
        assert [j.first_seq for j in many.journals() if j.first_seq] == [
            j.first_seq for j in one.journals() if j.first_seq
        ]
        await one.close()
        await many.close()
        names = _journal_names(one_dir)
        assert names == _journal_names(many_dir)
        for name in names:
            assert (one_dir / "journal" / name).read_bytes() == (
                many_dir / "journal" / name
            ).read_bytes(), name
        return len(names)

    return run(body)


def test_a_run_stops_at_the_record_append_refuses(tmp_path: Path) -> None:
    async def body() -> None:
        log = _log(tmp_path, VirtualClock())
        await log.open()
        kw: dict[str, Any] = {"topic": "t", "message_type": "json", "pub_hash": 5}
        # a sequence that does not increase: the records before it go in
        assert log.append_many(**kw, pub_seqs=[1, 2, 2, 3], bodies=[b"a", b"b", b"c", b"d"]) == 2
        with pytest.raises(PublisherSequenceRegression):
            log.append(**kw, pub_seq=2, body=b"c")
        assert log.append_many(**kw, pub_seqs=[3], bodies=[b"ok"]) == 1
        assert log.publisher_last(5) == 3
        assert log.append_many(**kw, pub_seqs=[], bodies=[]) == 0
        await log.wait_durable(log.last_seq)
        assert [r.pub_seq for r in await log.read_batch(1)] == [1, 2, 3]
        await log.close()
        # a closed log appends nothing (append() says why)
        assert log.append_many(**kw, pub_seqs=[9], bodies=[b"z"]) == 0

    run(body)


def test_a_run_stops_where_a_roll_would_exceed_max_size(tmp_path: Path) -> None:
    async def body() -> None:
        size = 64 * 1024
        log = _log(tmp_path, VirtualClock(), preallocated=1, max_size=2 * size + 10)
        await log.open()
        rng = random.Random(4)
        total = 0
        while True:
            n = rng.randrange(1, 200)
            first = log.publisher_last(1) + 1
            got = log.append_many(
                topic="t", message_type="json", pub_hash=1,
                pub_seqs=list(range(first, first + n)), bodies=[b"x" * 100] * n,
            )  # fmt: skip
            total += got
            await log.wait_durable(log.last_seq)
            if got < n:
                break
        assert log.last_seq == total
        with pytest.raises(TxlogFull):
            log.append(topic="t", message_type="json", pub_hash=1, pub_seq=total + 1, body=b"x")
        # a run whose first record needs the refused roll places nothing and says so
        refused = log.append_many(
            topic="t", message_type="json", pub_hash=1, pub_seqs=[total + 1, total + 2],
            bodies=[b"x" * 100] * 2,
        )  # fmt: skip
        assert refused == 0 and log.last_seq == total and log.publisher_last(1) == total
        records = await log.read_batch(1, max_count=100_000)
        assert [r.pub_seq for r in records] == list(range(1, total + 1))
        await log.close()

    run(body)


def test_runs_that_cross_journal_rolls_equal_single_appends(tmp_path: Path) -> None:
    """The property above, pinned on a script that rolls several times inside runs."""
    (tmp_path / "one").mkdir()
    (tmp_path / "many").mkdir()
    runs = [("orders", 11, [700] * 40, "plain"), ("t/b", 22, [300] * 40, "keys"),
            ("t/b", 22, [300] * 40, "delete")] * 3  # fmt: skip
    assert _compare(tmp_path / "one", tmp_path / "many", runs) > 3


def test_runs_with_correlation_ids_and_sow_keys(tmp_path: Path) -> None:
    async def body() -> None:
        log = _log(tmp_path, VirtualClock())
        await log.open()
        n = log.append_many(
            topic="t", message_type="json", pub_hash=3, pub_seqs=[1, 2, 3],
            bodies=[b"a", b"b", b"c"], corr_ids=["x1", "", "x3"], sow_keys=["k1", "k2", ""],
        )  # fmt: skip
        assert n == 3
        await log.wait_durable(log.last_seq)
        got = [(r.pub_seq, r.body, r.corr_id, r.sow_key) for r in await log.read_batch(1)]
        assert got == [(1, b"a", "x1", "k1"), (2, b"b", "", "k2"), (3, b"c", "x3", "")]
        await log.close()

    run(body)
