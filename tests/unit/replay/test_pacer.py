"""RatePacer as a pure state machine: decisions for given records and times."""

from __future__ import annotations

import pytest

from spool.server.protocol.options import Rate
from spool.server.replay import MAX_LAG, RatePacer
from spool.server.txlog.format.record import Record
from tests.unit.replay.fakes import FakeLog


def records(n: int, *, size: int = 10, gap_us: int = 1_000_000) -> list[Record]:
    log = FakeLog()
    for i in range(n):
        log.append(body=b"x" * size, ts_us=1_000_000 + i * gap_us)
    return log.records


def test_msgs_one_at_a_time_at_low_rates() -> None:
    recs = records(5)
    pacer = RatePacer(Rate("msgs", 10))
    assert pacer.take(recs, 0, 0.0) == (1, 0.0)
    pacer.charge(recs, 0, 1, 1)
    count, wait = pacer.take(recs, 1, 0.0)
    assert count == 0 and wait == pytest.approx(0.1)
    assert pacer.take(recs, 1, 0.1)[0] == 1


def test_msgs_charges_only_what_was_delivered() -> None:
    recs = records(5)
    pacer = RatePacer(Rate("msgs", 10))
    pacer.take(recs, 0, 0.0)
    pacer.charge(recs, 0, 1, 0)  # filtered out: costs nothing
    assert pacer.take(recs, 1, 0.0) == (1, 0.0)


def test_msgs_burst_window_at_high_rates() -> None:
    recs = records(1000)
    pacer = RatePacer(Rate("msgs", 10_000))
    count, _ = pacer.take(recs, 0, 0.0)
    assert count == 100  # 10 ms worth
    pacer.charge(recs, 0, count, count)
    count, wait = pacer.take(recs, 100, 0.0)
    assert count == 0 and wait == pytest.approx(1e-4)
    # Idle time refills up to the bucket, never more.
    assert pacer.take(recs, 100, 5.0)[0] == 100


def test_bytes_may_go_into_debt() -> None:
    recs = records(3, size=512)
    pacer = RatePacer(Rate("bytes", 1024))
    assert pacer.take(recs, 0, 0.0) == (1, 0.0)
    pacer.charge(recs, 0, 1, 1)
    count, wait = pacer.take(recs, 1, 0.0)
    assert count == 0 and wait == pytest.approx(0.5)
    assert pacer.take(recs, 1, 0.5)[0] == 1


def test_bytes_partial_match_charges_the_largest() -> None:
    log = FakeLog()
    for size in (100, 300, 200):
        log.append(body=b"x" * size)
    pacer = RatePacer(Rate("bytes", 1000))
    pacer._tokens = 600.0  # a full bucket of 600 bytes
    pacer._updated = 0.0
    assert pacer.take(log.records, 0, 0.0) == (3, 0.0)
    pacer.charge(log.records, 0, 3, 1)
    assert pacer._tokens == pytest.approx(300.0)


def test_multiplier_follows_the_original_gaps() -> None:
    recs = records(3, gap_us=1_000_000)
    pacer = RatePacer(Rate("multiplier", 2))
    assert pacer.take(recs, 0, 0.0) == (1, 0.0)
    pacer.charge(recs, 0, 1, 1)
    count, wait = pacer.take(recs, 1, 0.0)
    assert count == 0 and wait == pytest.approx(0.5)
    # Waking a little late does not push the due time further.
    assert pacer.take(recs, 1, 0.52)[0] == 1


def test_multiplier_releases_records_stamped_together_at_once() -> None:
    recs = records(4, gap_us=0)
    pacer = RatePacer(Rate("multiplier", 1))
    assert pacer.take(recs, 0, 0.0) == (4, 0.0)


def test_multiplier_max_gap() -> None:
    log = FakeLog()
    for t in (0, 60_000_000):
        log.append(ts_us=1_000_000 + t)
    pacer = RatePacer(Rate("multiplier", 5), max_gap=10.0)
    pacer.take(log.records, 0, 0.0)
    pacer.charge(log.records, 0, 1, 1)
    assert pacer.take(log.records, 1, 0.0)[1] == pytest.approx(10.0)


def test_multiplier_reanchors_after_a_stall() -> None:
    recs = records(3, gap_us=1_000_000)
    pacer = RatePacer(Rate("multiplier", 1))
    pacer.take(recs, 0, 0.0)
    pacer.charge(recs, 0, 1, 1)
    # The consumer stalled for 30 s: the next record waits a full gap from "now - MAX_LAG"
    # instead of bursting everything that would have been due.
    count, wait = pacer.take(recs, 1, 30.0)
    assert count == 0 and wait == pytest.approx(1.0 - MAX_LAG)


def test_rejects_non_positive_rates() -> None:
    with pytest.raises(ValueError):
        RatePacer(Rate("msgs", 0))
