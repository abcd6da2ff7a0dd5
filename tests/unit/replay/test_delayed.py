"""Bookmark replay of delayed messages, over a real transaction log.

A delayed message is in the log twice: its scheduled record where it was published (never
delivered) and its due record where it fell due, with the same bookmark, after later
messages of its publisher. A replay delivers it at its due record, once: from EPOCH, from
a bookmark or a list resuming before or after it, and in a range whose end is its
bookmark (even one planned before it was due). Only the real log answers a bookmark *as
delivered*, so these tests do not run over the fake.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from spool.server.bookmarks import BookmarkPoint, parse_bookmark
from spool.server.clock import VirtualClock
from spool.server.protocol.options import parse_subscribe_options
from spool.server.replay import ReplayCursor, StopRule, build_member
from spool.server.txlog.format.record import Record, RecordKind, schedule_field
from tests.support.wait import turns_until
from tests.unit.replay.backends import LogFactory, TxlogLog, run_async
from tests.unit.replay.fakes import PUB, PUB_B, FakeSink

#: a due time in the past: a due record is searched from the first record stamped at or
#: after it, so the lookups as delivered find it wherever the log's clock stamped it
_DUE_US = 1


def _publish(log: TxlogLog, pub_seq: int, publisher: int = PUB) -> int:
    assert log.txlog.append_many(
        topic="t", message_type="json", pub_hash=publisher, pub_seqs=[pub_seq],
        bodies=[b'{"s":%d}' % pub_seq],
    ) == 1  # fmt: skip
    return log.txlog.last_seq


def _schedule(log: TxlogLog, pub_seq: int, publisher: int = PUB) -> int:
    assert log.txlog.append_many(
        topic="t", message_type="json", pub_hash=publisher, pub_seqs=[pub_seq],
        bodies=[b'{"s":%d}' % pub_seq], sow_keys=[schedule_field(_DUE_US, "")],
        kind=RecordKind.SCHEDULED,
    ) == 1  # fmt: skip
    return log.txlog.last_seq


def _due(log: TxlogLog, pub_seq: int, publisher: int = PUB) -> int:
    assert log.txlog.append_due(
        topic="t", message_type="json", pub_hash=publisher, pub_seqs=[pub_seq],
        bodies=[b'{"s":%d}' % pub_seq],
    ) == 1  # fmt: skip
    return log.txlog.last_seq


async def _open(logs: LogFactory) -> TxlogLog:
    log = await logs.open(VirtualClock())
    assert isinstance(log, TxlogLog)
    return log


async def _standard(log: TxlogLog) -> dict[str, int]:
    """P|1, P|2 scheduled, P|3, Q|1, P|2 due, P|4: their seqs by name."""
    seqs = {
        "p1": _publish(log, 1),
        "p2 scheduled": _schedule(log, 2),
        "p3": _publish(log, 3),
        "q1": _publish(log, 1, PUB_B),
        "p2 due": _due(log, 2),
        "p4": _publish(log, 4),
    }
    await log.flush()
    return seqs


def _cursor(log: TxlogLog, sink: FakeSink, spec: str) -> ReplayCursor:
    clock = log.clock
    assert clock is not None
    member = build_member(sink, parse_bookmark(spec), parse_subscribe_options(""), log)
    return ReplayCursor(log, [member], clock=clock)


async def _replay(log: TxlogLog, spec: str) -> FakeSink:
    """What a subscription from ``spec`` gets once caught up (or completed)."""
    sink = FakeSink()
    cursor = _cursor(log, sink, spec)
    cursor.start()
    await turns_until(lambda: sink.count("caught_up") + sink.count("completed") == 1)
    cursor.close()
    await cursor.wait_closed()
    return sink


def bm(pub_seq: int, publisher: int = PUB) -> str:
    return f"{publisher}|{pub_seq}|"


@pytest.fixture
def logs(tmp_path: Path) -> LogFactory:
    return LogFactory("txlog", tmp_path)


@run_async
async def test_epoch_delivers_the_due_record_at_its_place_never_the_scheduled(
    logs: LogFactory,
) -> None:
    log = await _open(logs)
    s = await _standard(log)
    sink = await _replay(log, "0")
    assert sink.seqs == [s["p1"], s["p3"], s["q1"], s["p2 due"], s["p4"]]
    due = sink.got[3]
    assert (due.kind, due.bookmark, due.body) == (RecordKind.DUE, bm(2), b'{"s":2}')
    assert all(r.kind is not RecordKind.SCHEDULED for r in sink.got)


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        # after the delayed message: from its publisher's later message p3, which fell
        # due before it here (a client that got p2 elsewhere first may lack p3); p2
        # comes again (a client's bookmark store discards it)
        (bm(2), ["p3", "q1", "p2 due", "p4"]),
        # after its publisher's later message: the due record, below that position, comes
        (bm(3), ["q1", "p2 due", "p4"]),
        (bm(1, PUB_B), ["p2 due", "p4"]),
        # a list starts after its oldest bookmark found
        (f"{bm(3)},{bm(1, PUB_B)}", ["q1", "p2 due", "p4"]),
        # one per publisher, the most recent received of each: p3 is the earliest start
        (f"{bm(2)},{bm(1, PUB_B)}", ["p3", "q1", "p2 due", "p4"]),
        # a range from the delayed message, inclusive: its due record first
        (f"[{bm(2)}:{bm(4)}]", ["p2 due", "p4"]),
        # a range ending at it: up to its due record, not its scheduled one
        (f"[0:{bm(2)}]", ["p1", "p3", "q1", "p2 due"]),
        (f"[0:{bm(2)})", ["p1", "p3", "q1"]),
    ],
)
@run_async
async def test_resume_points_and_ranges_go_by_the_due_record(
    logs: LogFactory, spec: str, expected: list[str]
) -> None:
    log = await _open(logs)
    s = await _standard(log)
    sink = await _replay(log, spec)
    assert sink.seqs == [s[name] for name in expected]


@pytest.mark.parametrize("found", [True, False], ids=["scheduled-when-planned", "not-yet"])
@pytest.mark.parametrize("inclusive", [True, False])
@run_async
async def test_a_range_ending_at_a_message_not_due_yet_waits_for_its_due_record(
    logs: LogFactory, found: bool, inclusive: bool
) -> None:
    """Planned before the due record was written, the end bookmark is found as its
    scheduled record (or not at all): the range still ends at the due record, after the
    messages delivered before it."""
    log = await _open(logs)
    _publish(log, 1)
    if found:
        _schedule(log, 2)
    await log.flush()
    sink = FakeSink()
    cursor = _cursor(log, sink, f"[0:{bm(2)}{']' if inclusive else ')'}")
    cursor.start()
    await turns_until(lambda: len(sink.got) == 1)
    if not found:
        _schedule(log, 2)
    later = [_publish(log, 3), _publish(log, 1, PUB_B)]
    await log.flush()
    await turns_until(lambda: len(sink.got) == 3)
    assert sink.count("completed") == 0
    due = _due(log, 2)
    _publish(log, 4)
    await log.flush()
    await asyncio.wait_for(cursor.wait_closed(), 5)
    assert sink.seqs == [1, *later, *([due] if inclusive else [])]
    assert sink.events[-1] == ("completed", len(sink.got))


def _rec(seq: int, pub_seq: int, kind: RecordKind = RecordKind.PUBLISH) -> Record:
    return Record(seq, seq, PUB, pub_seq, "t", "json", kind, (), 0, b"{}")


@pytest.mark.parametrize("inclusive", [True, False])
def test_stop_rule_verdicts_on_a_scheduled_end_are_the_same_when_met_again(
    inclusive: bool,
) -> None:
    """Records met again (a cursor re-reading after a pause): the end found as its
    scheduled record stays at its due record, not waited for again."""
    log = [
        _rec(1, 1),
        _rec(2, 2, RecordKind.SCHEDULED),
        _rec(3, 3),
        _rec(4, 2, RecordKind.DUE),
        _rec(5, 4),
    ]
    stop = StopRule(
        last_seq=2 if inclusive else 1, inclusive=inclusive,
        found=[BookmarkPoint(PUB, 2)], look_at=None if inclusive else 2,
    )  # fmt: skip
    first = [stop.verdict(r) for r in log]
    assert first == ["pass", "pass", "pass", "last" if inclusive else "beyond", "beyond"]
    assert stop.bound == (4 if inclusive else 3)
    # met again, the end is where the first pass put it
    again = ["pass", "pass", "pass", "last"] if inclusive else ["pass", "pass", "last", "beyond"]
    assert [stop.verdict(r) for r in log] == [*again, "beyond"]
    assert stop.bound == (4 if inclusive else 3)
