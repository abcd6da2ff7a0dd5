"""Start points, time gates and stop rules resolved against a log.

Every test that takes the ``logs`` fixture runs over the in-memory fake and over a real
transaction log, whose lookups (``seq_for_bookmark``, ``seq_for_time``) must give the same
answers.
"""

from __future__ import annotations

import pytest

from spool.server.bookmarks import BookmarkPoint, format_time_bookmark, parse_bookmark
from spool.server.protocol.errors import BookmarkNotFound
from spool.server.protocol.options import NotFoundPolicy
from spool.server.replay import ReplayPlan, ReplaySource, StopRule, plan_replay, resolve_start
from spool.server.txlog.format.record import Record
from tests.unit.replay.backends import LogFactory, ReplayLog, run_async
from tests.unit.replay.fakes import PUB, PUB_B, FakeLog

T0 = 1_700_000_000_000_000  # µs


def ts_text(offset_s: float) -> str:
    return format_time_bookmark(T0 + round(offset_s * 1_000_000))


async def make_log(logs: LogFactory, n: int = 10, durable: int | None = None) -> ReplayLog:
    """Records 1..n, one second apart from T0, publisher PUB seq 1..n; the first
    ``durable`` of them (default: all) durable."""
    log = await logs.open()
    durable = n if durable is None else durable
    for i in range(n):
        if i == durable:
            await log.flush()
        log.append(ts_us=T0 + i * 1_000_000)
    if durable == n:
        await log.flush()
    return log


def bm(seq: int) -> str:
    return f"{PUB}|{seq}|"


def plan(text: str, log: ReplaySource, policy: NotFoundPolicy = "now") -> ReplayPlan:
    return plan_replay(parse_bookmark(text), log, policy)


@run_async
async def test_epoch_and_now(logs: LogFactory) -> None:
    log = await make_log(logs, 10, durable=8)
    assert log.durable_seq == 8
    assert resolve_start(parse_bookmark("0"), log) == 1
    assert resolve_start(parse_bookmark("0|1|"), log) == 9


@run_async
async def test_epoch_after_retention() -> None:
    """Fake only: the real log's retention removes whole journals, not a chosen prefix."""
    log = FakeLog()
    for i in range(10):
        log.append(ts_us=T0 + i * 1_000_000)
    await log.flush()
    log.drop_before(4)
    assert resolve_start(parse_bookmark("0"), log) == 4


@run_async
async def test_bookmark_is_a_resume_point(logs: LogFactory) -> None:
    log = await make_log(logs)
    assert resolve_start(parse_bookmark(bm(3)), log) == 4


@run_async
async def test_list_starts_after_the_oldest_found(logs: LogFactory) -> None:
    log = await make_log(logs)
    text = f"{bm(7)},{bm(3)},{PUB_B}|99|"
    assert resolve_start(parse_bookmark(text), log) == 4


@pytest.mark.parametrize(("policy", "start"), [("now", 9), ("epoch", 1)])
@run_async
async def test_unknown_bookmark_policy(policy: str, start: int, logs: LogFactory) -> None:
    log = await make_log(logs, 10, durable=8)
    assert plan(f"{PUB_B}|5|", log, policy).start_seq == start
    assert plan(f"{PUB_B}|5|,{PUB_B}|6|", log, policy).start_seq == start


@run_async
async def test_unknown_bookmark_fail(logs: LogFactory) -> None:
    log = await make_log(logs)
    with pytest.raises(BookmarkNotFound):
        plan(f"{PUB_B}|5|", log, "fail")
    with pytest.raises(BookmarkNotFound):
        plan(f"[{PUB_B}|5|:{bm(9)}]", log, "fail")
    with pytest.raises(BookmarkNotFound):
        plan(f"[{bm(2)}:{PUB_B}|5|]", log, "fail")


@run_async
async def test_times(logs: LogFactory) -> None:
    log = await make_log(logs)
    assert plan(ts_text(-100), log) == ReplayPlan(1, T0 - 100_000_000)  # before the log: EPOCH
    assert plan(ts_text(2), log).start_seq == 3
    assert plan(ts_text(2.5), log).start_seq == 4
    future = plan(ts_text(100), log)
    assert future.start_seq == 11
    assert future.not_before_us == T0 + 100_000_000


@run_async
async def test_range_starts(logs: LogFactory) -> None:
    log = await make_log(logs)
    assert plan(f"[{bm(3)}:0|1|]", log).start_seq == 3
    assert plan(f"({bm(3)}:0|1|]", log).start_seq == 4
    assert plan(f"[{bm(6)},{bm(3)}:0|1|]", log).start_seq == 3
    assert plan(f"({bm(6)},{bm(3)}:0|1|]", log).start_seq == 4
    assert plan(f"[{ts_text(2)}:0|1|]", log).start_seq == 3
    assert plan(f"({ts_text(2)}:0|1|]", log).start_seq == 4
    assert plan("[0:0|1|]", log).start_seq == 1
    assert plan("[0|1|:0|1|]", log).start_seq == 11


def rec_at(log: ReplayLog, seq: int) -> Record:
    return log.records[seq - log.first_seq]


def verdicts(stop: StopRule, log: ReplayLog) -> list[str]:
    return [stop.verdict(r) for r in log.records]


@run_async
async def test_stop_at_bookmark_inclusive_and_exclusive(logs: LogFactory) -> None:
    log = await make_log(logs)
    stop = plan(f"[0:{bm(4)}]", log).stop
    assert stop is not None and stop.bound == 4
    assert verdicts(stop, log)[2:5] == ["pass", "last", "beyond"]
    stop = plan(f"[0:{bm(4)})", log).stop
    assert stop is not None and stop.bound == 3


@run_async
async def test_stop_at_list_is_the_newest(logs: LogFactory) -> None:
    log = await make_log(logs)
    stop = plan(f"[0:{bm(2)},{bm(6)},{bm(4)}]", log).stop
    assert stop is not None and stop.bound == 6
    stop = plan(f"[0:{bm(2)},{bm(6)})", log).stop
    assert stop is not None and stop.bound == 5


@run_async
async def test_stop_at_now_is_the_durable_end_when_subscribing(logs: LogFactory) -> None:
    log = await make_log(logs, 10, durable=7)
    stop = plan("[0:0|1|]", log).stop
    assert stop is not None and stop.bound == 7


@run_async
async def test_pending_end_bookmark_is_reached_when_it_arrives(logs: LogFactory) -> None:
    log = await make_log(logs, 3)
    stop = plan(f"[0:{PUB_B}|2|]", log).stop
    assert stop is not None and stop.bound is None
    log.append(publisher=PUB_B, pub_seq=1)
    log.append()
    log.append(publisher=PUB_B, pub_seq=2)
    log.append()
    assert verdicts(stop, log) == ["pass"] * 5 + ["last", "beyond"]
    assert stop.bound == 6


@run_async
async def test_pending_end_exclusive_and_skipped_sequence(logs: LogFactory) -> None:
    log = await make_log(logs, 2)
    stop = plan(f"[0:{PUB_B}|5|)", log).stop
    assert stop is not None
    log.append(publisher=PUB_B, pub_seq=5)
    assert verdicts(stop, log) == ["pass", "pass", "beyond"]
    # A bookmark that never made it into this log ends at its publisher's next message.
    log = await make_log(logs, 2)
    stop = plan(f"[0:{PUB_B}|5|]", log).stop
    assert stop is not None
    log.append(publisher=PUB_B, pub_seq=7)
    assert verdicts(stop, log) == ["pass", "pass", "beyond"]


@run_async
async def test_list_end_with_found_and_pending(logs: LogFactory) -> None:
    log = await make_log(logs, 4)
    stop = plan(f"[0:{bm(2)},{PUB_B}|1|]", log).stop
    assert stop is not None and stop.bound is None
    log.append(publisher=PUB_B, pub_seq=1)
    assert verdicts(stop, log) == ["pass"] * 4 + ["last"]


@run_async
async def test_stop_at_time(logs: LogFactory) -> None:
    log = await make_log(logs)
    stop = plan(f"[0:{ts_text(3)}]", log).stop
    assert stop is not None
    assert verdicts(stop, log)[3:5] == ["pass", "beyond"]
    assert stop.bound == 4
    stop = plan(f"[0:{ts_text(3)})", log).stop
    assert stop is not None
    assert verdicts(stop, log)[2:4] == ["pass", "beyond"]
    assert stop.bound == 3


@run_async
async def test_future_end_time_is_settled_by_the_clock(logs: LogFactory) -> None:
    log = await make_log(logs, 3)
    stop = plan(f"[0:{ts_text(10)}]", log).stop
    assert stop is not None
    assert stop.deadline_us == T0 + 10_000_001
    stop.on_clock(T0 + 10_000_000, log)
    assert stop.bound is None  # the end moment itself is still inside the range
    log.append(ts_us=T0 + 10_000_000)
    stop.on_clock(T0 + 10_000_001, log)
    assert stop.bound == 4 and stop.deadline_us is None
    assert stop.reached(5) and not stop.reached(4)


@run_async
async def test_verdict_is_idempotent(logs: LogFactory) -> None:
    log = await make_log(logs, 3)
    stop = StopRule(pending=[BookmarkPoint(PUB_B, 1)], inclusive=True)
    log.append(publisher=PUB_B, pub_seq=1)
    last = rec_at(log, 4)
    assert stop.verdict(last) == "last"
    assert stop.verdict(last) == "last"
