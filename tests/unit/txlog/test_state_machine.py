"""A hypothesis state machine: append, flush, crash (with torn tails), reopen, compress,
and lookups by bookmark and time, all checked against an in-memory oracle."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from server.txlog import JournalPinned, TransactionLog
from server.txlog.codec import encode, scan
from server.txlog.record import RecordKind
from tests.unit.txlog.helpers import INSTANCE, ManualClock, config

T = TypeVar("T")
PUBLISHERS = (11, 22, 33, 0)  # 0: records without publisher identity


class Oracle:
    """What the log must hold: one tuple per record, index = seq - 1."""

    def __init__(self) -> None:
        self.records: list[
            tuple[int, int, int, str, bytes]
        ] = []  # ts, pub_hash, pub_seq, topic, body

    def last_pub_seq(self, pub_hash: int) -> int:
        return max((r[2] for r in self.records if r[1] == pub_hash), default=0)

    def first_at_or_after(self, ts: int) -> int:
        return next(
            (i + 1 for i, r in enumerate(self.records) if r[0] >= ts), len(self.records) + 1
        )


class LogMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="txlog-sm-"))
        self.loop = asyncio.new_event_loop()
        self.clock = ManualClock()
        self.oracle = Oracle()
        self.durable = 0  # every record up to here was acknowledged durable
        self.log = self._open()

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(coro)

    def _open(self) -> TransactionLog:
        log = TransactionLog(
            config(self.tmp, journal_size=8 * 1024, preallocated=1, flush_interval=0.0002),
            INSTANCE,
            clock=self.clock,
            block_bytes=256,
            tail_cache_bytes=2048,
        )
        report = self._run(log.open())
        assert report.last_seq == log.last_seq
        return log

    @rule(
        n=st.integers(min_value=1, max_value=40),
        pub=st.sampled_from(PUBLISHERS),
        step=st.sampled_from([0, 1, 40, -25]),
        size=st.integers(min_value=0, max_value=400),
    )
    def append(self, n: int, pub: int, step: int, size: int) -> None:
        for i in range(n):
            self.clock.advance(step)
            ps = self.oracle.last_pub_seq(pub) + 1 if pub else 0
            body = bytes([i % 251]) * size
            topic = f"t{(size + i) % 3}"
            rec = self.log.append(
                topic=topic, message_type="json", pub_hash=pub, pub_seq=ps, body=body
            )
            self.oracle.records.append((rec.timestamp_us, pub, ps, topic, body))
            assert rec.seq == len(self.oracle.records)

    @rule()
    def flush(self) -> None:
        self._run(self.log.wait_durable(self.log.last_seq))
        assert self.log.durable_seq == self.log.last_seq == len(self.oracle.records)
        self.durable = self.log.durable_seq

    @rule(tear=st.integers(min_value=0, max_value=120))
    def crash(self, tear: int) -> None:
        """Stop as a crash at a group-commit boundary would; optionally leave a torn write."""
        self._run(self.log.abort())
        if tear:
            self._tear(tear)
        self.log = self._open()
        last = self.log.last_seq
        # everything acknowledged survived; what survived beyond is a prefix of the appends
        assert self.durable <= last <= len(self.oracle.records)
        del self.oracle.records[last:]
        self.durable = last

    def _tear(self, length: int) -> None:
        """Write the first bytes of the next record after the active journal's data."""
        journals = sorted(
            p for p in (self.tmp / "journal").iterdir() if p.name.endswith(".journal")
        )
        active = journals[-1]
        data = active.read_bytes()
        base = int(active.name.split(".")[1])
        end = scan(data, 0, len(data), base, final=True).end
        nxt = base + len(scan(data, 0, len(data), base, final=True).offsets)
        partial = encode(nxt, 0, 1, 1, "torn", "json", RecordKind.PUBLISH, (), 0, b"z" * 200)[
            :length
        ]
        with open(active, "r+b") as fh:
            fh.seek(end)
            fh.write(partial)

    @rule()
    def close_and_reopen(self) -> None:
        self._run(self.log.close())
        self.log = self._open()
        assert self.log.last_seq == len(self.oracle.records)
        self.durable = self.log.last_seq

    @precondition(lambda self: any(r[1] for r in self.oracle.records))
    @rule(data=st.data())
    def lookup_bookmark(self, data: st.DataObject) -> None:
        seq = data.draw(st.sampled_from([i + 1 for i, r in enumerate(self.oracle.records) if r[1]]))
        _, pub, ps, _, _ = self.oracle.records[seq - 1]
        assert self.log.seq_for_bookmark(pub, ps) == seq
        assert self._run(self.log.locate_bookmark(pub, ps)) == seq
        assert self.log.seq_for_bookmark(pub, self.oracle.last_pub_seq(pub) + 1) is None

    @precondition(lambda self: self.oracle.records)
    @rule(data=st.data(), delta=st.sampled_from([-1, 0, 1]))
    def lookup_time(self, data: st.DataObject, delta: int) -> None:
        ts = data.draw(st.sampled_from([r[0] for r in self.oracle.records])) + delta
        assert self.log.seq_for_time(ts) == self.oracle.first_at_or_after(ts)

    @rule(
        start=st.integers(min_value=0, max_value=400), count=st.integers(min_value=1, max_value=200)
    )
    def read(self, start: int, count: int) -> None:
        durable_before = self.log.durable_seq  # a group commit may land while reading
        got = self._run(self.log.read_batch(start, max_count=count))
        durable_after = self.log.durable_seq
        first = max(start, 1)
        assert all(r.seq <= durable_after for r in got)
        for r in got:
            ts, pub, ps, topic, body = self.oracle.records[r.seq - 1]
            assert (r.timestamp_us, r.pub_hash, r.pub_seq, r.topic, r.body) == (
                ts,
                pub,
                ps,
                topic,
                body,
            )
        assert [r.seq for r in got] == list(range(first, first + len(got)))
        if first <= durable_before:
            assert got  # something durable is there to read

    @rule()
    def compress_oldest(self) -> None:
        closed = [j for j in self.log.journals() if j.state == "closed"]
        if closed:
            try:
                self._run(self.log.compress(closed[0].id))
            except JournalPinned:  # pragma: no cover - this machine holds no pins
                raise

    @invariant()
    def publishers_match(self) -> None:
        for pub in PUBLISHERS[:-1]:
            assert self.log.publisher_last(pub) == self.oracle.last_pub_seq(pub)

    def teardown(self) -> None:
        try:
            self._run(self.log.close())
        finally:
            self.loop.close()
            shutil.rmtree(self.tmp, ignore_errors=True)


LogMachine.TestCase.settings = settings(
    max_examples=25,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestLogMachine = LogMachine.TestCase
