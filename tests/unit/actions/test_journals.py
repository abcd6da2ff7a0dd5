"""Which journals a policy acts on, against an oracle written from the rules' wording.

The oracle does it the slow, literal way: for every prefix of the journals (oldest first)
it asks "may this whole prefix be acted on?" and keeps the longest one. The code under
test walks the list once.
"""

from __future__ import annotations

import math
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from spool.server.actions.journals import JournalOp, due_times, in_scope, select
from spool.server.config import JournalLimits
from spool.server.txlog.retention.pins import PinInfo
from spool.server.txlog.storage.journal import JournalInfo, JournalState

NOW = 1_000_000.0


def journal(
    base: int, records: int, last_time: float | None, state: JournalState, size: int,
    compression: str | None = None,
) -> JournalInfo:  # fmt: skip
    return JournalInfo(
        id=base, path=f"/j/{base}", state=state, size_bytes=size, data_bytes=size,
        compression=compression,  # type: ignore[arg-type]
        records=records, first_seq=base, last_seq=base + records - 1,
        first_bookmark=None, last_bookmark=None,
        first_time_us=None if last_time is None else int(last_time * 1e6),
        last_time_us=None if last_time is None else int(last_time * 1e6),
    )  # fmt: skip


@st.composite
def logs(draw: st.DrawFn) -> list[JournalInfo]:
    """Journals oldest first, contiguous, times mostly increasing, the newest active."""
    n = draw(st.integers(1, 8))
    out: list[JournalInfo] = []
    base = 1
    t = NOW - draw(st.floats(0, 60 * 86400))
    for i in range(n):
        records = draw(st.integers(1, 5))
        t += draw(st.floats(-3600, 10 * 86400))  # clocks may step back a little
        active = i == n - 1
        if active:
            state: JournalState = "active"
            compression = None
        else:
            state = draw(st.sampled_from(["closed", "compressed", "archived"]))
            compression = (
                "zstd"
                if state == "compressed"
                else draw(st.sampled_from([None, "gzip"]))
                if state == "archived"
                else None
            )
        out.append(
            journal(base, records, min(t, NOW), state, draw(st.integers(1, 1000)), compression)
        )
        base += records
    return out


limits_strategy = st.builds(
    JournalLimits,
    age=st.none() | st.floats(0, 40 * 86400),
    count=st.none() | st.integers(0, 9),
    size=st.none() | st.integers(0, 6000),
).filter(lambda lim: (lim.age, lim.count, lim.size) != (None, None, None))
ops = st.sampled_from(["archive", "compress", "remove"])


def due_oracle(
    op: JournalOp, logs_: list[JournalInfo], limits: JournalLimits, now: float
) -> set[int]:
    scope = [j for j in logs_ if in_scope(op, j)]
    due: set[int] = set()
    for i, j in enumerate(scope):
        newer = scope[i + 1 :]
        by_age = limits.age is not None and (
            j.last_time_us is None or now >= j.last_time_us / 1e6 + limits.age
        )
        by_count = limits.count is not None and len(newer) >= limits.count
        by_size = limits.size is not None and sum(x.size_bytes for x in [j, *newer]) > limits.size
        if by_age or by_count or by_size:
            due.add(j.id)
    return due


@settings(max_examples=200, deadline=None)
@given(logs_=logs(), op=ops, limits=limits_strategy, pin=st.none() | st.integers(1, 45))
def test_select_takes_the_longest_unpinned_run_of_due_journals_from_the_oldest(
    logs_: list[JournalInfo], op: JournalOp, limits: JournalLimits, pin: int | None
) -> None:
    pins = [PinInfo("replay:c:s", pin)] if pin is not None else []
    chosen = select(op, logs_, pins, limits, NOW)
    scope = [j for j in logs_ if in_scope(op, j)]
    due = due_oracle(op, logs_, limits, NOW)
    # the oracle: the longest prefix of the scope that is due, closed and unpinned
    best: list[JournalInfo] = []
    for k in range(len(scope) + 1):
        prefix = scope[:k]
        if all(
            j.id in due and j.state != "active" and (pin is None or j.last_seq < pin)
            for j in prefix
        ):
            best = prefix
    assert list(chosen.act) == best
    assert chosen.target == (best[-1].id if best else None)
    # what is due right after it, up to the first journal not due, waits for the pin
    rest = scope[len(best) :]
    waiting = []
    for j in rest:
        if j.id not in due or j.state == "active":
            break
        waiting.append(j.id)
    expected_pinned = waiting if pin is not None else []
    assert [p.journal for p in chosen.pinned] == expected_pinned
    assert all(p.owner == "replay:c:s" and p.seq == pin for p in chosen.pinned)
    # never the active journal, never a journal the operation cannot act on
    assert all(j.state != "active" and in_scope(op, j) for j in chosen.act)


@settings(max_examples=150, deadline=None)
@given(logs_=logs(), op=ops, limits=limits_strategy, later=st.floats(0, 40 * 86400))
def test_due_times_say_when_select_will_take_each_journal(
    logs_: list[JournalInfo], op: JournalOp, limits: JournalLimits, later: float
) -> None:
    """A journal whose due time has come at ``NOW + later`` is taken by a run then (with no
    pin); one whose time has not come is not."""
    times = due_times(op, logs_, limits, NOW)
    # count and size are evaluated on the journals as they stand: keep them the same
    when = NOW + later
    taken = {j.id for j in select(op, logs_, [], limits, when).act}
    for journal_id, at in times.items():
        if at <= when:
            assert journal_id in taken, (journal_id, at, when)
        else:
            assert journal_id not in taken
    assert all(j in times for j in taken)
    assert list(times.values()) == sorted(times.values())  # never before an older journal
    assert all(at == -math.inf or limits.age is not None for at in times.values())


def test_an_archived_journal_is_still_compressed_and_removed_but_not_archived_again() -> None:
    archived = journal(1, 3, NOW - 10 * 86400, "archived", 100)
    active = journal(4, 1, NOW, "active", 100)
    everything = JournalLimits(age=0.0)
    assert select("archive", [archived, active], [], everything, NOW).act == ()
    assert select("compress", [archived, active], [], everything, NOW).target == 1
    assert select("remove", [archived, active], [], everything, NOW).target == 1
    squeezed = replace(archived, compression="zstd")
    assert select("compress", [squeezed, active], [], everything, NOW).act == ()
