"""Derived messages on the in-process engine (virtual clock): what an action publishes
because of another message goes through the broker's own publish path under an identity of
its own, with its source's sequences, so running it again over the same sources stores
nothing twice; and no client may log on under such an identity.

Calls go through :class:`~spool.server.operations.Operations`, as the action runtime's do.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spool.server.bookmarks import (
    broker_pub_hash,
    derived_pub_hash,
    format_bookmark,
    pub_hash,
)
from spool.server.brokerpublish import DerivedOutcome
from spool.server.txlog.format.record import Record, RecordKind
from tests.support.engine import EngineHarness, FakeClient, scenario

SOURCE = pub_hash("feed")
DERIVED = derived_pub_hash("enrich", 0, SOURCE)
CLIENTS = "/spool/events/clients"


def harness(tmp_path: Path, **kw: Any) -> EngineHarness:
    """An engine with small journals, none preallocated (the property test makes many)."""
    return EngineHarness(
        tmp_path, journal_size="1MB",
        txlog_extra="<PreallocatedJournalFiles>1</PreallocatedJournalFiles>", **kw,
    )  # fmt: skip


def batch(seqs: list[int], run: int = 0) -> tuple[list[bytes], list[str]]:
    """Bodies and correlation ids of derived messages with sequences ``seqs`` (the corr id
    is the source's bookmark, as the runtime sets it); ``run`` marks which run made them."""
    bodies = [orjson.dumps({"seq": s, "run": run}) for s in seqs]
    return bodies, [format_bookmark(SOURCE, s) for s in seqs]


def publish(
    h: EngineHarness, seqs: list[int], *, topic: str = "derived", run: int = 0
) -> DerivedOutcome:
    bodies, corr_ids = batch(seqs, run)
    return h.broker.operations.publish_derived(
        topic, DERIVED, seqs, bodies, corr_ids, action="enrich"
    )


async def records(h: EngineHarness, topic: str = "derived") -> list[Record]:
    """The log's publish records of ``topic``, once everything appended is durable."""
    await h.commit()
    txlog = h.broker.txlog
    assert txlog is not None
    got = await txlog.read_batch(1, max_count=10_000)
    return [r for r in got if r.topic == topic and r.kind == RecordKind.PUBLISH]


def seen(c: FakeClient, sub_id: str) -> list[tuple[str | None, str | None, int, int]]:
    """(bookmark, corr id, seq, run) of each message a subscription received."""
    out: list[tuple[str | None, str | None, int, int]] = []
    for hd, body in c.deliveries(sub_id):
        doc = orjson.loads(body)
        out.append((hd.get("bm"), hd.get("x"), doc["seq"], doc["run"]))
    return out


def test_a_derived_identity_is_its_own_namespace() -> None:
    assert pub_hash(f"spool-action:enrich/0#{SOURCE}") == DERIVED
    others = {
        derived_pub_hash("enrich", 1, SOURCE),  # another step
        derived_pub_hash("other", 0, SOURCE),  # another action
        derived_pub_hash("enrich", 0, pub_hash("feed2")),  # another source
        SOURCE,
        broker_pub_hash("spool-test"),
        pub_hash("enrich"),
    }
    assert DERIVED not in others and len(others) == 6


@scenario
async def test_a_derived_batch_is_stored_with_its_sequences_and_corr_ids(tmp_path: Path) -> None:
    async with harness(tmp_path) as h:
        sub = await h.logon("sub")
        sub.send(({"c": "subscribe", "t": "derived", "sub_id": "live"}, b""))
        await h.settle()
        out = publish(h, [4, 5, 9])
        assert out == DerivedOutcome(accepted=3, duplicates=0, failure=None,
                                     last_seq=h.last_seq, refused=0)  # fmt: skip
        stored = await records(h)
        assert [(r.pub_hash, r.pub_seq, r.corr_id) for r in stored] == [
            (DERIVED, s, format_bookmark(SOURCE, s)) for s in (4, 5, 9)
        ]
        assert stored[-1].seq == out.last_seq
        txlog = h.broker.txlog
        assert txlog is not None and txlog.publisher_last(DERIVED) == 9
        # the broker's own numbering is untouched: the derived id is another publisher
        assert txlog.publisher_last(txlog.own_pub_hash) == 0
        assert seen(sub, "live") == [
            (format_bookmark(DERIVED, s), format_bookmark(SOURCE, s), s, 0) for s in (4, 5, 9)
        ]


@scenario
async def test_wait_durable_returns_once_the_group_commit_wrote_the_batch(
    tmp_path: Path,
) -> None:
    async with harness(tmp_path, flush_interval="100ms") as h:
        ops = h.broker.operations
        await ops.wait_durable(0)  # nothing recorded: nothing to wait for
        publish(h, [1])
        await h.commit()  # the next group commit is then a whole interval away
        out = publish(h, [2, 3])
        waiting = asyncio.ensure_future(ops.wait_durable(out.last_seq))
        await h.settle()
        assert not waiting.done() and h.durable_seq < out.last_seq
        await h.commit()
        await asyncio.wait_for(waiting, timeout=10)
        assert h.durable_seq >= out.last_seq


@scenario
async def test_the_same_batch_again_stores_nothing_and_counts_duplicates(tmp_path: Path) -> None:
    async with harness(tmp_path) as h:
        sub = await h.logon("sub")
        sub.send(({"c": "subscribe", "t": "derived", "sub_id": "live"}, b""))
        await h.settle()
        assert publish(h, [1, 2, 3]).accepted == 3
        again = publish(h, [1, 2, 3], run=1)
        assert again == DerivedOutcome(accepted=0, duplicates=3, failure=None, last_seq=0)
        assert [(r.pub_seq, orjson.loads(r.body)["run"]) for r in await records(h)] == [
            (1, 0), (2, 0), (3, 0),
        ]  # fmt: skip
        assert [(s, run) for _, _, s, run in seen(sub, "live")] == [(1, 0), (2, 0), (3, 0)]


@scenario
async def test_a_partial_overlap_stores_only_the_new_messages(tmp_path: Path) -> None:
    async with harness(tmp_path) as h:
        assert publish(h, [1, 2, 3]).accepted == 3
        out = publish(h, [2, 3, 4, 5], run=1)
        assert (out.accepted, out.duplicates, out.failure, out.refused) == (2, 2, None, 0)
        assert out.last_seq == h.last_seq
        assert [(r.pub_seq, orjson.loads(r.body)["run"]) for r in await records(h)] == [
            (1, 0), (2, 0), (3, 0), (4, 1), (5, 1),
        ]  # fmt: skip


@scenario
async def test_a_replay_subscriber_sees_each_derived_message_once(tmp_path: Path) -> None:
    async with harness(tmp_path) as h:
        publish(h, [1, 2])
        publish(h, [1, 2, 3], run=1)  # a catch-up over sources already done, and one more
        publish(h, [3], run=2)
        await h.commit()
        reader = await h.logon("reader")
        reader.send(({"c": "subscribe", "t": "derived", "sub_id": "r", "bm": "0"}, b""))
        await h.until(lambda: len(reader.deliveries("r")) >= 3)
        await h.settle()
        assert seen(reader, "r") == [
            (format_bookmark(DERIVED, s), format_bookmark(SOURCE, s), s, run)
            for s, run in ((1, 0), (2, 0), (3, 1))
        ]


@scenario
async def test_a_topic_the_log_does_not_record_is_delivered_at_every_run(tmp_path: Path) -> None:
    """Without a bookmark there is nothing to de-duplicate on: each run is accepted and
    delivered again, nothing is logged, and there is no sequence to wait for."""
    async with harness(tmp_path, topics=("derived",)) as h:
        sub = await h.logon("sub")
        sub.send(({"c": "subscribe", "t": "loose", "sub_id": "live"}, b""))
        await h.settle()
        before = h.last_seq
        for run in range(2):
            out = publish(h, [1, 2], topic="loose", run=run)
            assert out == DerivedOutcome(accepted=2, duplicates=0, failure=None, last_seq=0)
        await h.settle()
        assert seen(sub, "live") == [
            (None, format_bookmark(SOURCE, s), s, run) for run in (0, 1) for s in (1, 2)
        ]
        assert h.last_seq == before
        txlog = h.broker.txlog
        assert txlog is not None and txlog.publisher_last(DERIVED) == 0


@scenario
async def test_refusals_are_counted_and_the_batch_is_checked(tmp_path: Path) -> None:
    async with harness(tmp_path, event_topics=f"<Topic><Name>{CLIENTS}</Name></Topic>") as h:
        out = publish(h, [1, 2], topic=CLIENTS)
        assert (out.accepted, out.duplicates, out.refused, out.last_seq) == (0, 0, 2, 0)
        assert out.failure is not None and out.failure.reason == "invalid topic"
        assert "is an event topic" in out.failure.detail
        out = publish(h, [1], topic="^re")
        assert (out.refused, out.failure and out.failure.reason) == (1, "invalid topic")
        ops = h.broker.operations
        with pytest.raises(ValueError, match="one sequence and one corr id per body"):
            ops.publish_derived("derived", DERIVED, [1, 2], [b"{}"], [""], action="a")
        with pytest.raises(ValueError, match="sequence is between 1"):
            ops.publish_derived("derived", DERIVED, [0], [b"{}"], [""], action="a")
        with pytest.raises(ValueError, match="out of range"):
            ops.publish_derived("derived", 1, [1], [b"{}"], [""], action="a")
        empty = ops.publish_derived("derived", DERIVED, [], [], [], action="a")
        assert empty == DerivedOutcome(0, 0, None, 0)
        txlog = h.broker.txlog
        assert txlog is not None and txlog.publisher_last(DERIVED) == 0


@scenario
async def test_a_logon_under_a_reserved_identity_is_refused(tmp_path: Path) -> None:
    async with harness(tmp_path) as h:
        for name in ("spool-broker:spool-test", "spool-action:enrich/0#1"):
            c = h.connect()
            c.send(({"c": "logon", "cid": "l", "client_name": name}, b""))
            await h.until(lambda c=c: c.acks() and c.transport.close_code is not None)
            (ack,) = c.acks()
            assert (ack["status"], ack["reason"]) == ("failure", "invalid message")
            assert ack["detail"] == (
                f"client name {name!r} is reserved: names starting 'spool-broker:' or "
                "'spool-action:' are the broker's own publisher identities"
            )
            assert c.transport.close_code == 1008
            assert not h.broker.clients.holds(name)
        # only the prefixes are reserved
        ok = await h.logon("spool-actions")
        assert h.broker.clients.holds("spool-actions") and not ok.closed


# -- effectively once ------------------------------------------------------------------------

#: (which derived id, how far back the batch starts, how many messages it has)
runs = st.lists(
    st.tuples(st.integers(0, 1), st.integers(0, 4), st.integers(1, 4)), min_size=1, max_size=12
)


@settings(
    max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(runs)
def test_re_runs_in_any_order_store_one_record_per_source_sequence(
    tmp_path_factory: Any, script: list[tuple[int, int, int]]
) -> None:
    """Batches of two derived ids, interleaved; each id's batches start at most one past
    what it published already (a lane keeps its order), and may reach back over it (a
    re-run, a catch-up): every source sequence ends up stored exactly once, as its first
    run made it, and each outcome counts exactly the new messages as accepted."""
    ids = [derived_pub_hash("enrich", step, SOURCE) for step in (0, 1)]

    async def body() -> None:
        async with harness(tmp_path_factory.mktemp("derived")) as h:
            ops = h.broker.operations
            top = [0, 0]
            first: dict[tuple[int, int], int] = {}  # (id, seq) -> the run that stored it
            for run, (which, back, length) in enumerate(script):
                lo = max(1, top[which] + 1 - back)
                seqs = list(range(lo, lo + length))
                bodies, corr_ids = batch(seqs, run)
                out = ops.publish_derived(
                    "derived", ids[which], seqs, bodies, corr_ids, action="enrich"
                )
                new = [s for s in seqs if s > top[which]]
                assert (out.accepted, out.duplicates, out.failure) == (
                    len(new), length - len(new), None,
                )  # fmt: skip
                for s in new:
                    first[(which, s)] = run
                top[which] = max(top[which], seqs[-1])
            stored = await records(h)
            got = [(ids.index(r.pub_hash), r.pub_seq, orjson.loads(r.body)["run"])
                   for r in stored]  # fmt: skip
            assert sorted(got) == sorted((w, s, run) for (w, s), run in first.items())
            for which in (0, 1):
                mine = [s for w, s, _ in got if w == which]
                assert mine == list(range(1, top[which] + 1))

    asyncio.run(body())
