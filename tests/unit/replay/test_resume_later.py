"""A resume never skips a later message of its bookmark's publisher.

A publisher that fails over to an instance before its earlier messages were replicated
there has its later messages stored first; the earlier ones arrive late, after them. A
subscriber that processed the publisher's messages up to one of the late ones, on another
instance, has not processed the later ones, which this log holds before the bookmark: a
resume after it starts at the first of them (server/replay/plan.py ``_start_at``). A
range's start goes by position alone.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from spool.server.bookmarks import parse_bookmark
from spool.server.clock import VirtualClock
from spool.server.protocol.options import parse_subscribe_options
from spool.server.replay import ReplayCursor, build_member
from tests.support.wait import turns_until
from tests.unit.replay.backends import TxlogLog, run_async
from tests.unit.replay.fakes import PUB, PUB_B, FakeSink


def bm(pub_seq: int, publisher: int = PUB) -> str:
    return f"{publisher}|{pub_seq}|"


def _append(log: TxlogLog, pub_seq: int, publisher: int = PUB, *, late: bool = False) -> int:
    log.txlog.append(
        topic="t", message_type="json", pub_hash=publisher, pub_seq=pub_seq,
        body=b'{"s":%d}' % pub_seq, late=late,
    )  # fmt: skip
    return log.txlog.last_seq


async def _failed_over_publisher(tmp_path: Path) -> tuple[TxlogLog, dict[str, int]]:
    """P1, P2, then P5, P6 (P failed over here), Q1, then P3, P4 late, Q2."""
    log = await TxlogLog.open(tmp_path / "log", VirtualClock(), track_gaps=True)
    seqs = {
        "p1": _append(log, 1),
        "p2": _append(log, 2),
        "p5": _append(log, 5),
        "p6": _append(log, 6),
        "q1": _append(log, 1, PUB_B),
        "p3": _append(log, 3, late=True),
        "p4": _append(log, 4, late=True),
        "q2": _append(log, 2, PUB_B),
    }
    await log.flush()
    return log, seqs


async def _replay(log: TxlogLog, spec: str) -> FakeSink:
    clock = log.clock
    assert clock is not None
    sink = FakeSink()
    member = build_member(sink, parse_bookmark(spec), parse_subscribe_options(""), log)
    cursor = ReplayCursor(log, [member], clock=clock)
    cursor.start()
    await turns_until(lambda: sink.count("caught_up") + sink.count("completed") == 1)
    cursor.close()
    await cursor.wait_closed()
    return sink


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        # P3 arrived after P5 and P6: a client that processed P up to 3 elsewhere may
        # lack them, so the resume starts at P5 (Q1 and P3 come again)
        (bm(3), ["p5", "p6", "q1", "p3", "p4", "q2"]),
        (bm(4), ["p5", "p6", "q1", "p3", "p4", "q2"]),
        (f"{bm(3)},{bm(1, PUB_B)}", ["p5", "p6", "q1", "p3", "p4", "q2"]),
        # in order: the later messages come after the bookmark anyway
        (bm(2), ["p5", "p6", "q1", "p3", "p4", "q2"]),
        (bm(6), ["q1", "p3", "p4", "q2"]),
        (bm(1, PUB_B), ["p3", "p4", "q2"]),
        # a range starts where its bookmark is
        (f"({bm(3)}:{bm(2, PUB_B)}]", ["p4", "q2"]),
        (f"[{bm(3)}:{bm(2, PUB_B)}]", ["p3", "p4", "q2"]),
    ],
)
@run_async
async def test_a_resume_after_a_late_record_starts_at_the_later_messages(
    tmp_path: Path, spec: str, expected: list[str]
) -> None:
    log, seqs = await _failed_over_publisher(tmp_path)
    try:
        sink = await _replay(log, spec)
        assert sink.seqs == [seqs[name] for name in expected]
    finally:
        await log.close()
