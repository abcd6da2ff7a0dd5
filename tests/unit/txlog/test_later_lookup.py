"""Where a publisher's later messages start: ``seq_for_later`` against a scan of the log.

A resume after a bookmark must not skip a later message of the bookmark's publisher that
the log holds before the bookmark's own delivery (server/replay/plan.py). The lookup that
says where the first one is goes through the indexes; the oracle is a plain scan of
every record. Logs are built from random runs of a publisher's messages in order (with
jumps), late copies filling the gaps (a publisher that failed over to this instance
before its earlier messages were replicated here), delayed messages with their due
records, across small journals and blocks so the answers come from sealed indexes, open
ones, files and the in-memory tail; asked synchronously, in a worker thread, and through
the prefetched view a replay is planned against.
"""

from __future__ import annotations

import asyncio
import tempfile
from dataclasses import dataclass
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spool.server.txlog import TransactionLog
from spool.server.txlog.format.record import RecordKind, schedule_field
from tests.unit.txlog.helpers import INSTANCE, config, read_all

PUBS = (101, 202)
_DUE = int(RecordKind.DUE)


@dataclass(frozen=True)
class _Op:
    """One append: ``what`` is ``next`` (the publisher's next sequence after a jump),
    ``late`` (fill its lowest missing sequence, if any), ``delayed`` (its next sequence
    as a scheduled record) or ``due`` (the due record of its oldest pending one)."""

    what: str
    pub: int
    jump: int = 1


_ops = st.lists(
    st.builds(
        _Op,
        what=st.sampled_from(["next", "next", "late", "delayed", "due"]),
        pub=st.sampled_from(PUBS),
        jump=st.integers(1, 4),
    ),
    min_size=1,
    max_size=120,
)


def _open(tmp: Path, tail_bytes: int) -> TransactionLog:
    return TransactionLog(
        config(tmp, journal_size=4096, preallocated=0),
        INSTANCE,
        track_gaps=True,
        block_bytes=512,
        tail_cache_bytes=tail_bytes,
    )


def _build(log: TransactionLog, ops: list[_Op]) -> set[tuple[int, int]]:
    """Append ``ops``; the bookmarks appended (the queries worth asking)."""
    high: dict[int, int] = {}
    missing: dict[int, list[int]] = {p: [] for p in PUBS}
    pending: dict[int, list[int]] = {p: [] for p in PUBS}
    held: set[tuple[int, int]] = set()
    for op in ops:
        p = op.pub
        body = b'{"n":"' + b"x" * 200 + b'"}'
        if op.what == "late":
            if not missing[p]:
                continue
            s = missing[p].pop(0)
            log.append(topic="t", message_type="json", pub_hash=p, pub_seq=s, body=body, late=True)
        elif op.what == "due":
            if not pending[p]:
                continue
            s = pending[p].pop(0)
            assert log.append_due(
                topic="t", message_type="json", pub_hash=p, pub_seqs=[s], bodies=[body]
            ) == 1  # fmt: skip
        else:
            top = high.get(p, 0)
            s = top + op.jump
            missing[p].extend(range(top + 1, s))
            high[p] = s
            if op.what == "delayed":
                assert log.append_many(
                    topic="t", message_type="json", pub_hash=p, pub_seqs=[s], bodies=[body],
                    sow_keys=[schedule_field(1, "")], kind=RecordKind.SCHEDULED,
                ) == 1  # fmt: skip
                pending[p].append(s)
            else:
                log.append(topic="t", message_type="json", pub_hash=p, pub_seq=s, body=body)
        held.add((p, s))
    return held


def _scan(records: list[tuple[int, int, int, int]], pub: int, after: int) -> int | None:
    """The oracle: the first record in log order of ``pub`` above ``after``, no due one."""
    return next(
        (seq for seq, h, s, kind in records if h == pub and s > after and kind != _DUE), None
    )


async def _check(tmp: Path, ops: list[_Op], tail_bytes: int) -> None:
    log = _open(tmp, tail_bytes)
    await log.open()
    try:
        held = _build(log, ops)
        await log.wait_durable(log.last_seq)
        records = [
            (b.seqs[i], b.pub_hashes[i], b.pub_seqs[i], b.kind(i))
            for b in await read_all(log)
            for i in range(len(b))
        ]
        queries = sorted(held | {(p, 0) for p in PUBS} | {(p, 10_000) for p in PUBS})
        located = await log.locate_all(queries, [])
        view = log.with_lookups(located)
        for pub, after in queries:
            want = _scan(records, pub, after)
            assert log.seq_for_later(pub, after) == want, (pub, after)
            assert await log._locator.locate_later(pub, after) == want, (pub, after)
            assert located.later[(pub, after)] == want, (pub, after)
            assert view.seq_for_later(pub, after) == want, (pub, after)
    finally:
        await log.close()
    reopened = _open(tmp, tail_bytes)
    await reopened.open()
    try:
        for pub, after in queries:
            assert reopened.seq_for_later(pub, after) == _scan(records, pub, after)
    finally:
        await reopened.close()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=_ops, tail_bytes=st.sampled_from([0, 1 << 20]))
def test_later_lookup_matches_a_scan_of_the_log(ops: list[_Op], tail_bytes: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(_check(Path(tmp), ops, tail_bytes))
