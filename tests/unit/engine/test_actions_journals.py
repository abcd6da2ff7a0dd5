"""Journal policies on a virtual clock: archive, compress and remove at the right ages,
pins respected, replay unchanged over every state of a journal, recovery after each.

A real Broker with its real transaction log in a tmp directory (tests/support/engine.py);
time is virtual, so "a day" and "a month" pass in the time it takes to advance the clock
and let the journal work (moves, zstd, unlinks) finish in its threads.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from spool.server.actions import RunRecord
from spool.server.actions.runner import ActionRunner
from spool.server.actions.triggers import EARLY
from spool.server.txlog.storage.files import journal_name
from tests.support.engine import EngineHarness, FakeClient, scenario
from tests.support.server import config_xml

#: a record over half a journal (1 MB): every journal holds exactly one record
BIG = b'{"pad":"' + b"x" * 600_000 + b'"}'
#: about seventeen records per journal
MEDIUM = b'{"pad":"' + b"y" * 60_000 + b'"}'
DAY = 86400.0


def harness(tmp_path: Path, actions: str) -> EngineHarness:
    # statistics once a day: the sampler does not wake every virtual second
    return EngineHarness(
        tmp_path, xml=config_xml(tmp_path / "data", journal_size="1MB", admin_interval="1d",
                                 actions=actions),
    )  # fmt: skip


def states(h: EngineHarness) -> dict[int, tuple[str, str | None]]:
    """Journal id -> (state, compression), the preallocated files left out."""
    assert h.broker.txlog is not None
    return {
        j.id: (j.state, j.compression)
        for j in h.broker.txlog.journals()
        if j.state != "preallocated"
    }


def runner(h: EngineHarness, name: str) -> ActionRunner:
    return h.broker.actions.runners[name]


async def wait_runs(h: EngineHarness, name: str, count: int) -> RunRecord:
    """Until ``name`` has finished ``count`` runs (journal work runs in threads)."""
    r = runner(h, name)
    await h.until(lambda: r.runs >= count and r.running is None, timeout=30)
    assert r.runs == count, f"{name} ran {r.runs} times, expected {count}"
    return r.recent[-1]


async def publish(h: EngineHarness, client: FakeClient, body: bytes, count: int = 1) -> None:
    for _ in range(count):
        client.send(({"c": "publish", "t": "orders"}, body))
    await h.commit()


async def replay_from_epoch(h: EngineHarness, name: str, expected: int) -> list[tuple[Any, bytes]]:
    """A bookmark subscription from EPOCH: every delivery (bookmark, body), then gone."""
    c = await h.logon(name)
    c.send(({"c": "subscribe", "t": "orders", "sub_id": "all", "bm": "0"}, b""))
    await h.until(lambda: len(c.deliveries("all")) >= expected, timeout=30)
    got = [(hd["bm"], body) for hd, body in c.deliveries("all")]
    c.send(({"c": "unsubscribe", "sub_id": "all"}, b""))
    await h.settle()
    return got


async def at(h: EngineHarness, when: datetime) -> None:
    """Advance the virtual clock to ``when``."""
    await h.clock.advance(when.timestamp() - h.clock.time())


# -- ages ------------------------------------------------------------------------------------

POLICY = """
<Action><Name>retention</Name>
  <On><Module>amps-action-on-schedule</Module><Options><Every>Daily 02:00</Every></Options></On>
  <Do><Module>amps-action-do-archive-journal</Module><Options><Age>1d</Age></Options></Do>
  <Do><Module>amps-action-do-compress-journal</Module><Options><Age>7d</Age></Options></Do>
  <Do><Module>amps-action-do-remove-journal</Module><Options><Age>30d</Age></Options></Do>
</Action>"""


@scenario
async def test_a_policy_archives_compresses_and_removes_journals_at_their_ages(
    tmp_path: Path,
) -> None:
    """ "Archive after a day, compress after a week, remove after a month", run daily at
    02:00 UTC; one journal is written each day at noon. At each run the state of every
    journal follows from its age alone; the active journal is never touched."""
    async with harness(tmp_path, POLICY) as h:
        feed = await h.logon("feed")
        start = datetime.fromtimestamp(h.clock.time(), UTC)
        day0 = datetime(start.year, start.month, start.day, tzinfo=UTC) + timedelta(days=1)
        published: dict[int, int] = {}  # journal id -> day its record was written
        for day in range(40):
            run_at = day0 + timedelta(days=day, hours=2)
            await at(h, run_at)
            record = await wait_runs(h, "retention", day + 1)
            assert record.started == pytest.approx(run_at.timestamp(), abs=EARLY)
            assert record.outcome == "succeeded", record.message
            # the journal of the record written at noon on day d, at 02:00 on day R
            # (age (R - d) days minus 10 hours): archived from R = d + 2, compressed from
            # d + 8, removed from d + 31; the newest record's journal is the active one
            newest = max(published, default=None)
            expected: dict[int, tuple[str, str | None]] = {}
            for journal, written in published.items():
                if journal == newest:
                    expected[journal] = ("active", None)
                elif day >= written + 31:
                    continue
                else:
                    archived = day >= written + 2
                    compressed = day >= written + 8
                    state = "archived" if archived else "compressed" if compressed else "closed"
                    expected[journal] = (state, "zstd" if compressed else None)
            got = states(h)
            got.pop(h.last_seq + 1, None)  # an empty active journal after a roll, if any
            assert got == expected, f"day {day}"
            if day < 36:
                await at(h, day0 + timedelta(days=day, hours=12))
                await publish(h, feed, BIG)
                published[h.last_seq] = day  # one record per journal: its seq is its id
        runs = runner(h, "retention").recent
        assert [r.started for r in runs][-3:] == pytest.approx(
            [(day0 + timedelta(days=d, hours=2)).timestamp() for d in (37, 38, 39)], abs=EARLY
        )
        removed = [j for r in runs for s in r.steps if s.module.endswith("remove-journal")
                   for j in s.journals]  # fmt: skip
        assert removed == sorted(removed) == list(range(1, len(removed) + 1))  # oldest first


# -- pins ------------------------------------------------------------------------------------

ON_DEMAND = """
<Action><Name>archive-old</Name>
  <On><Module>amps-action-on-admin</Module></On>
  <Do><Module>amps-action-do-archive-journal</Module><Options><Count>2</Count></Options></Do>
  <Do><Module>amps-action-do-remove-journal</Module><Options><Count>3</Count></Options></Do>
</Action>"""


@scenario
async def test_a_pinned_journal_is_skipped_then_handled_once_the_pin_is_released(
    tmp_path: Path,
) -> None:
    async with harness(tmp_path, ON_DEMAND) as h:
        feed = await h.logon("feed")
        for _ in range(6):
            await publish(h, feed, BIG)  # journals 1..6, 6 active
        reader = await h.logon("reader")
        # a paused replay from EPOCH holds every journal from seq 1
        reader.send(
            ({"c": "subscribe", "t": "orders", "sub_id": "old", "bm": "0", "o": "pause"}, b"")
        )
        await h.settle()
        first = await h.run_admin("archive-old")
        assert first.outcome == "partial"
        archive, remove = first.steps
        assert (archive.status, archive.journals) == ("partial", [])
        assert [p["journal"] for p in archive.pinned] == [1, 2, 3, 4]
        assert {p["owner"] for p in archive.pinned} == {"replay:reader:old"}
        assert "retried next run" in archive.message
        assert (remove.status, [p["journal"] for p in remove.pinned]) == ("partial", [1, 2, 3])
        assert states(h) == {i: ("closed", None) for i in range(1, 6)} | {6: ("active", None)}

        # the REST surface refuses the same journals (409 there) while the pin holds
        plan = h.broker.actions.journal_plan(*h.broker.operations.journal_state())  # type: ignore[misc]
        assert plan[1][0]["pinned_by"] == "replay:reader:old"

        reader.send(({"c": "unsubscribe", "sub_id": "old"}, b""))
        await h.settle()
        second = await h.run_admin("archive-old")
        assert second.outcome == "succeeded"
        archive, remove = second.steps
        assert (archive.journals, archive.pinned) == ([1, 2, 3, 4], [])
        assert (remove.journals, remove.pinned) == ([1, 2, 3], [])
        assert states(h) == {4: ("archived", None), 5: ("closed", None), 6: ("active", None)}
        archive_dir = tmp_path / "data" / "archive"
        assert archive.files == [
            str(archive_dir / journal_name("spool-test", j)) for j in (1, 2, 3, 4)
        ]
        # remove reports the files it deleted (where they were: the archive)
        assert remove.files == archive.files[:3]


@scenario
async def test_a_pin_moving_past_a_journal_releases_it_for_the_next_run(tmp_path: Path) -> None:
    """A replay that reads on (not one that goes away) frees the journals behind it."""
    async with harness(tmp_path, ON_DEMAND) as h:
        feed = await h.logon("feed")
        for _ in range(5):
            await publish(h, feed, BIG)
        reader = await h.logon("reader")
        reader.send(
            ({"c": "subscribe", "t": "orders", "sub_id": "s", "bm": "0", "o": "pause"}, b"")
        )
        await h.settle()
        assert (await h.run_admin("archive-old")).outcome == "partial"
        reader.send(({"c": "subscribe", "t": "orders", "sub_id": "s", "o": "resume"}, b""))
        await h.until(lambda: len(reader.deliveries("s")) == 5, timeout=30)
        await h.settle()
        again = await h.run_admin("archive-old")
        assert again.outcome == "succeeded", again.message
        assert again.steps[0].journals == [1, 2, 3]


# -- replay and recovery over every state ----------------------------------------------------

SHAPES = """
<Action><Name>shape</Name>
  <On><Module>amps-action-on-admin</Module></On>
  <Do><Module>amps-action-do-archive-journal</Module><Options><Count>6</Count></Options></Do>
  <Do><Module>amps-action-do-compress-journal</Module>
      <Options><Count>4</Count><Method>gzip</Method></Options></Do>
</Action>
<Action><Name>trim</Name>
  <On><Module>amps-action-on-admin</Module></On>
  <Do><Module>amps-action-do-remove-journal</Module><Options><Count>5</Count></Options></Do>
</Action>"""

#: after "shape" on eight journals, oldest first: the first two archived and compressed,
#: the next two compressed in place, three plain, the active one
SHAPED = [
    ("archived", "gzip"),
    ("archived", "gzip"),
    ("compressed", "gzip"),
    ("compressed", "gzip"),
    ("closed", None),
    ("closed", None),
    ("closed", None),
    ("active", None),
]


def shapes(h: EngineHarness) -> list[tuple[str, str | None]]:
    """The journals' (state, compression), oldest first."""
    return [v for _, v in sorted(states(h).items())]


async def eight_journals(h: EngineHarness) -> int:
    """Write records until the eighth journal is active; how many were written."""
    feed = await h.logon("feed")
    count = 0
    while len(states(h)) < 8:
        await publish(h, feed, MEDIUM, 5)
        count += 5
    return count


@scenario
async def test_replay_from_epoch_is_the_same_over_plain_archived_and_compressed_journals(
    tmp_path: Path,
) -> None:
    async with harness(tmp_path, SHAPES) as h:
        written = await eight_journals(h)
        before = await replay_from_epoch(h, "before", written)
        assert len(before) == written
        shaped = await h.run_admin("shape")
        assert shaped.outcome == "succeeded", shaped.message
        assert shapes(h) == SHAPED
        after = await replay_from_epoch(h, "after", written)
        assert after == before
        # a replay from the middle of a compressed journal starts where it should
        middle = before[len(before) // 3][0]
        c = await h.logon("middle")
        c.send(({"c": "subscribe", "t": "orders", "sub_id": "m", "bm": middle}, b""))
        tail = len(before) - len(before) // 3 - 1
        await h.until(lambda: len(c.deliveries("m")) >= tail, timeout=30)
        assert [(hd["bm"], b) for hd, b in c.deliveries("m")] == before[len(before) // 3 + 1 :]


@scenario
async def test_a_restart_after_archive_compress_and_remove_recovers(tmp_path: Path) -> None:
    async with harness(tmp_path, SHAPES) as h:
        written = await eight_journals(h)
        before = await replay_from_epoch(h, "before", written)
        assert (await h.run_admin("shape")).outcome == "succeeded"
        last_seq = h.last_seq
    # 1. archived and compressed journals are found again where they are, in their state
    async with harness(tmp_path, SHAPES) as h:
        assert shapes(h) == SHAPED
        ids = sorted(states(h))
        assert h.last_seq == last_seq
        assert await replay_from_epoch(h, "again", written) == before
        trimmed = await h.run_admin("trim")
        assert trimmed.steps[0].journals == ids[:3]
        assert trimmed.steps[0].files[0].startswith(str(tmp_path / "data" / "archive"))
        first_kept = states(h)
        assert sorted(first_kept) == ids[3:]
    # 2. after a removal the log starts at the first journal kept; replay from EPOCH gives
    #    what is left, in order; the publisher's numbering goes on
    async with harness(tmp_path, SHAPES) as h:
        assert states(h) == first_kept
        first = min(first_kept)
        assert h.broker.txlog is not None and h.broker.txlog.first_seq == first
        # one publisher: a record's local seq is its publisher sequence (the bookmark's)
        kept = [(bm, body) for bm, body in before if int(bm.split("|")[1]) >= first]
        assert await replay_from_epoch(h, "tail", len(kept)) == kept
        feed = await h.logon("feed")
        await publish(h, feed, b'{"after":"restart"}')
        assert h.last_seq == last_seq + 1
        assert h.broker.txlog.publisher_last(feed.session.pub_hash) == written + 1
