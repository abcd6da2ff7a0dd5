"""Repair as in-process scenarios on the virtual clock: a sync pair linked by in-memory
pipes (tests/support/fabric.py); one broker restarted on damaged files gets its records
back from the other, with their identity and the path they had."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from spool.server.bookmarks import pub_hash
from spool.server.queues.checkpoint import checkpoint_name
from spool.server.replication.repair import RETRY_MAX
from tests.support.damage import (
    RecordAt,
    flip_byte,
    journals,
    records_of,
    remove_journal,
    truncate_inside_last_record,
    zero_end_of_last_record,
)
from tests.support.engine import EngineHarness
from tests.support.fabric import A, B, C, drive, persisted, publish, records, scenario, xml
from tests.support.repair import (
    Publisher,
    Scene,
    ack_work,
    caught_up,
    folded_sow,
    jobs,
    order,
    own_identity,
    sow_keys,
    sow_state,
    work,
)
from tests.support.replication import destination
from tests.support.server import sow_topic


async def _torn_and_restarted(scene: Scene) -> tuple[EngineHarness, RecordAt]:
    """a stopped, the end of its last record zeroed, a started again and ready."""
    await scene.stop("a")
    torn = zero_end_of_last_record(journals(scene.tmp / "a" / "data" / "journal", "a")[-1])
    again = await scene.start("a")
    await drive(scene.clock, lambda: again.broker.ready)
    return again, torn


async def _published_last(scene: Scene, last_publisher: str, count: int) -> None:
    """``count`` messages published at the other instance, then ``count`` at
    ``last_publisher`` (a's last records are its), every link caught up."""
    hs, clock = scene.hs, scene.clock
    pubs = {n: await hs[n].logon(f"pub-{n}") for n in ("a", "b")}
    other = "b" if last_publisher == "a" else "a"
    for name in (other, last_publisher):
        publish(pubs[name], "orders", range(1, count + 1))
        await drive(clock, lambda n=name: persisted(pubs[n]) == count)  # type: ignore[misc]
    await drive(clock, lambda: all(caught_up(h) for h in hs.values()))


def _both_ways(tmp_path: Path) -> Scene:
    """a and b, each the other's sync destination, passing every group through."""
    return Scene(tmp_path, {
        "a": xml(tmp_path, "a", destination("b", [B], passthrough=(".*",))),
        "b": xml(tmp_path, "b", destination("a", [A], passthrough=(".*",))),
    })  # fmt: skip


@pytest.mark.parametrize("last_publisher", ["a", "b"])
def test_a_torn_tail_comes_back_with_its_identity_and_path(
    tmp_path: Path, last_publisher: str
) -> None:
    import asyncio

    asyncio.run(_scenario(tmp_path, last_publisher))


async def _scenario(tmp_path: Path, last_publisher: str) -> None:
    scene = _both_ways(tmp_path)
    hs = scene.hs
    await scene.start("a", "b")
    try:
        await _published_last(scene, last_publisher, 40)
        before = await records(hs["a"])
        again, torn = await _torn_and_restarted(scene)
        assert torn.pub_hash == pub_hash(f"pub-{last_publisher}")
        txlog = again.broker.txlog
        assert txlog is not None and txlog.fences == []
        repairer = again.broker.repairer
        assert repairer is not None and repairer.progress.records_repaired == 1
        after = await records(again)
        # the same records, in the same order, with the same paths: the torn one came
        # back published here (no path) or from b (b on its path), not as b's copy
        assert after == before
        (back,) = [r for r in after if (r[0], r[1]) == (torn.pub_hash, torn.pub_seq)]
        assert back[3] == (() if last_publisher == "a" else ("b",))
    finally:
        await scene.close()


def test_records_no_peer_holds_stay_fenced_until_an_operator_releases_them(
    tmp_path: Path,
) -> None:
    import asyncio

    asyncio.run(_unrepairable(tmp_path))


async def _unrepairable(tmp_path: Path) -> None:
    """A's last record is of a topic A does not replicate: b never had it. The fence stays
    and says what was found; released, readers pass over it and the seq stays taken."""
    config = xml(
        tmp_path, "a",
        destination("b", [B], topics=(("orders", None),), exclude="replicate"),
        tuning="<JournalRepairWait>2s</JournalRepairWait>",
        sow=sow_topic("local", "/n", durability="transient"),
    )  # fmt: skip
    scene = Scene(tmp_path, {"a": config, "b": xml(tmp_path, "b")})
    clock = scene.clock
    ha = await scene.start("b", "a")
    try:
        pub = await ha.logon("pub-a")
        publish(pub, "orders", range(1, 21))
        publish(pub, "local", range(21, 23))
        await drive(clock, lambda: persisted(pub) == 22)
        await drive(clock, lambda: caught_up(ha))
        again, torn = await _torn_and_restarted(scene)
        txlog = again.broker.txlog
        assert txlog is not None
        (fence,) = txlog.fences
        assert (fence.first_seq, fence.exact) == (torn.seq, True)
        assert "b: 0 of 1 records found" in fence.repair
        # it names the record no peer has, so a release is an informed decision
        assert f"missing (1, as pub_hash|pub_seqs): {torn.pub_hash}|{torn.pub_seq}" in fence.repair
        ops = again.broker.operations
        info = ops.transaction_log_info()
        assert info is not None and info["repair"] is not None
        assert info["repair"]["state"] in ("waiting", "repairing")  # it keeps asking
        assert "txlog-damaged" in [a["id"] for a in ops.alerts()]
        # the SOW was rebuilt without it, and waits for it (the queues' pins would hold)
        assert again.broker.pipeline.unfolded == [(torn.seq, torn.seq)]
        assert sorted(again.broker.sow.topics.store("local").keys()) == ["21"]  # type: ignore[union-attr]
        released = await ops.release_fence(torn.seq)
        assert released is not None and released["first_seq"] == torn.seq
        assert txlog.fences == []
        # given up: nothing to take in, nothing waited for any more
        await drive(clock, lambda: again.broker.pipeline.unfolded == [])
        assert sorted(again.broker.sow.topics.store("local").keys()) == ["21"]  # type: ignore[union-attr]
        await drive(clock, lambda: ops.alerts() == [])
        # the message is gone (a released placeholder, no publisher, holds its seq)
        assert [s for h, s, _, _ in await records(again) if h] == list(range(1, 22))
        assert txlog.last_seq == torn.seq
    finally:
        await scene.close()


def test_an_instance_wiped_and_started_empty_gets_its_own_records_back(tmp_path: Path) -> None:
    import asyncio

    asyncio.run(_wiped(tmp_path))


async def _wiped(tmp_path: Path) -> None:
    """A's files are deleted and A starts empty, without a bootstrap: B's link resyncs it
    from its (empty) holdings, and gives back also the records A published itself (A is
    on their path at B: loop protection alone would keep them from A for ever)."""
    import shutil

    scene = _both_ways(tmp_path)
    clock, hs = scene.clock, scene.hs
    await scene.start("a", "b")
    try:
        pubs = {n: await hs[n].logon(f"pub-{n}") for n in ("a", "b")}
        for n in ("a", "b"):
            publish(pubs[n], "orders", range(1, 31))
            await drive(clock, lambda n=n: persisted(pubs[n]) == 30)
        await drive(clock, lambda: all(caught_up(h) for h in hs.values()))
        want = {(h, s, body) for h, s, body, _ in await records(hs["a"])}
        assert len(want) == 60
        await scene.stop("a")
        shutil.rmtree(tmp_path / "a" / "data")
        again = await scene.start("a")
        link = hs["b"].broker.replication.destinations["a"]  # type: ignore[union-attr]
        link.reconnect()
        await drive(clock, lambda: link.connected and link.acked >= hs["b"].last_seq, timeout=60)
        got = [(h, s, body) for h, s, body, _ in await records(again)]
        assert sorted(got) == sorted(want) and len(got) == len(want)
    finally:
        await scene.close()


@pytest.mark.parametrize("cut", ["torn", "at a record boundary", "acknowledged, unnamed"])
@pytest.mark.parametrize("last_publisher", ["a", "b"])
def test_a_lost_tail_nothing_vouches_for_is_sent_again_by_the_sources(
    tmp_path: Path, last_publisher: str, cut: str
) -> None:
    import asyncio

    asyncio.run(_unvouched(tmp_path, last_publisher, cut))


async def _unvouched(tmp_path: Path, last_publisher: str, cut: str) -> None:
    """A's last record is lost and no file of A says it was durable (no clients.ack, no
    index, no replication positions): A keeps no fence. Torn, A cuts it and its welcome
    says when it lost records: B's link resyncs from then on. Cut at a record boundary,
    nothing tells A: B's link sees that A's holdings lack a record A acknowledged and
    examines A's last records again. Cut so, but with B's acknowledgment of it in A's
    replication positions: A holds its seq (a released placeholder: nothing names the
    record, so no peer can be asked for it) and says when it lost records. Either way,
    whoever published it (A on its path)."""
    scene = _both_ways(tmp_path)
    clock, hs = scene.clock, scene.hs
    await scene.start("a", "b")
    try:
        await _published_last(scene, last_publisher, 20)
        want = sorted((h, s, body) for h, s, body, _ in await records(hs["a"]))
        await scene.stop("a")
        data = tmp_path / "a" / "data"
        last = journals(data / "journal", "a")[-1]
        if cut == "torn":
            torn = zero_end_of_last_record(last)
        else:
            torn = truncate_inside_last_record(last, keep=0)
        for path in [*data.glob("journal/*.index"), *data.glob("journal/*.clients.ack")]:
            path.unlink()
        (state,) = data.glob("replication/*.replication.json")
        saved = orjson.loads(state.read_bytes())
        if cut != "acknowledged, unnamed":
            # the log keeps its identity; what its destination acknowledged is forgotten
            for dest in saved["destinations"].values():
                dest["acked"] = 0
            state.write_bytes(orjson.dumps(saved))
        else:
            assert max(d["acked"] for d in saved["destinations"].values()) >= torn.seq
        again = await scene.start("a")
        await drive(clock, lambda: again.broker.ready)
        txlog = again.broker.txlog
        assert txlog is not None and txlog.fences == []
        assert bool(txlog.lost_since_us) == (cut != "at a record boundary")
        assert not txlog.holds(torn.pub_hash, torn.pub_seq)
        report = txlog.recovery_report
        assert report is not None
        if cut == "acknowledged, unnamed":
            (lost,) = report.unnamed
            assert (lost["first_seq"], lost["last_seq"]) == (torn.seq, torn.seq)
            assert txlog.last_seq == torn.seq  # its seq stays taken
        else:
            assert report.unnamed == ()
        # b's link to a (reconnecting on its own) brings the record back
        await drive(clock, lambda: txlog.holds(torn.pub_hash, torn.pub_seq))
        await drive(clock, lambda: txlog.durable_seq == txlog.last_seq)
        # (a released placeholder is no publisher's record)
        got = sorted((h, s, body) for h, s, body, _ in await records(again) if h)
        assert got == want
    finally:
        await scene.close()


REPL = "repl-token-for-repair-tests-0123456"
PUB = "pub-token-for-repair-tests-01234567"


@pytest.mark.parametrize("repl_writes", [".*", "^audit$"])
def test_with_users_records_come_back_only_as_a_user_here_who_may_write_them(
    tmp_path: Path, repl_writes: str
) -> None:
    import asyncio

    asyncio.run(_as_user(tmp_path, repl_writes))


async def _as_user(tmp_path: Path, repl_writes: str) -> None:
    """With <Users>, repaired records are written as the user of A that A's destination
    credentials log on as: written back when that user may write their topic, else the
    fence stays and names the user, the topic and the fix."""

    def users(write: str) -> str:
        return (
            f"<User><Name>pub</Name><Token>{PUB}</Token><Write>.*</Write></User>"
            f"<User><Name>repl</Name><Token>{REPL}</Token><Read>.*</Read>"
            f"<Write>{write}</Write></User>"
        )

    creds = {"user": "repl", "secret": REPL, "exclude": "replicate"}
    config = xml(
        tmp_path, "a", destination("b", [B], **creds),  # type: ignore[arg-type]
        users=users(repl_writes), tuning="<JournalRepairWait>2s</JournalRepairWait>",
    )  # fmt: skip
    scene = Scene(tmp_path, {"a": config, "b": xml(tmp_path, "b", users=users(".*"))})
    clock = scene.clock
    ha = await scene.start("b", "a")
    try:
        pub = await ha.logon("pub-a", user_id="pub", pw=PUB)
        publish(pub, "orders", range(1, 21))
        await drive(clock, lambda: persisted(pub) == 20)
        await drive(clock, lambda: caught_up(ha))
        again, torn = await _torn_and_restarted(scene)
        txlog = again.broker.txlog
        assert txlog is not None
        if repl_writes == ".*":
            assert txlog.fences == [] and txlog.holds(torn.pub_hash, torn.pub_seq)
            return
        (fence,) = txlog.fences
        assert fence.first_seq == torn.seq
        assert "user 'repl'" in fence.repair and "'orders'" in fence.repair, fence.repair
        assert "<Write>" in fence.repair
        assert not txlog.holds(torn.pub_hash, torn.pub_seq)
    finally:
        await scene.close()


SOW_AND_QUEUE = sow_topic("orders", "/k", durability="transient") + (
    "<Queue><Name>work</Name><MessageType>json</MessageType>"
    "<UnderlyingTopic>work-in</UnderlyingTopic><LeasePeriod>1h</LeasePeriod>"
    "<MaxPerSubscriptionBacklog>100</MaxPerSubscriptionBacklog></Queue>"
)
#: filler bodies: about a thousand fill a 1 MB journal
PAD = b'{"pad":"' + b"x" * 1000 + b'"}'


@pytest.mark.parametrize("damage", ["flipped", "missing"])
def test_sow_and_queues_take_in_records_repaired_after_start_up(
    tmp_path: Path, damage: str
) -> None:
    import asyncio

    asyncio.run(_refolded(tmp_path, damage))


async def _refolded(tmp_path: Path, damage: str) -> None:
    """A's middle journal is lost and A starts while B is down: its SOW and queue are
    rebuilt without that journal's records. Once B is back and A's fence is repaired, A
    takes them in while it runs: the SOW equals the fold of the whole log (a repaired
    update never undoes a later one, a key deleted later stays deleted), the queue
    delivers each message not acked exactly once, and no acked message again (acked in
    the lost journal, or after it).

    ``flipped``: a byte of each record of the journal is flipped (its index is intact:
    the fence knows its records' bookmarks exactly). ``missing``: the journal and its
    index are gone (the fence's bookmarks are those between the records around it, an
    over-approximation): B's resync must not send its records back as new ones; they
    come back through the repair, in place, and the log holds each bookmark once."""

    def config(name: str, other: str, addr: tuple[str, int]) -> str:
        return xml(
            tmp_path, name, destination(other, [addr], passthrough=(".*",)),
            sow=SOW_AND_QUEUE, journal_size="1MB",
            txlog_extra="<PreallocatedJournalFiles>1</PreallocatedJournalFiles>",
            tuning="<JournalRepairWait>0s</JournalRepairWait>",
        )  # fmt: skip

    scene = Scene(tmp_path, {"a": config("a", "b", B), "b": config("b", "a", A)})
    clock, hs = scene.clock, scene.hs
    await scene.start("a", "b")
    try:
        ha = hs["a"]
        pub = await ha.logon("pub")
        worker = await ha.logon("worker")
        worker.send(({"c": "subscribe", "t": "work", "sub_id": "q", "o": "max_backlog=100"}, b""))
        send = Publisher(ha, pub).send

        # before the journal that will be lost
        await send("orders", [order(k, 1) for k in ("k0", "k1", "k2", "k4")])
        await send("work-in", jobs("q1", "q2", "q3", "q4", "q5"))
        await drive(clock, lambda: len(work(worker)) == 5)
        await send("pad", [PAD] * 1100)
        lost_from = ha.last_seq + 1
        # the lost journal: updates, a new key, a delete; acks of earlier messages; new
        # messages, two acked there, two acked later, two never
        ack_work(worker, {"q1", "q2"})
        await send("orders", [order("k0", 2), order("k1", 2), order("k2", 2), order("k3", 2)])
        pub.send(({"c": "sow_delete", "t": "orders", "k": "k4", "a": "processed"}, b""))
        await send("work-in", jobs("r1", "r2", "r3", "r4", "r5", "r6"))
        await drive(clock, lambda: len(work(worker)) == 11)
        ack_work(worker, {"r1", "r2"})
        lost_to = ha.last_seq
        await send("pad", [PAD] * 1100)
        # after it: a later update and a later delete of keys it changed, later acks
        await send("orders", [order("k0", 3)])
        pub.send(({"c": "sow_delete", "t": "orders", "k": "k2", "a": "processed"}, b""))
        ack_work(worker, {"r3", "r4"})
        await send("work-in", jobs("s1"))
        await drive(clock, lambda: all(caught_up(h) for h in hs.values()))
        want_sow = sow_state(ha)
        assert {k: orjson.loads(v[0])["v"] for k, v in want_sow.items()} == {
            "k0": 3, "k1": 2, "k3": 2,
        }  # fmt: skip
        held_before = [(h, s) for h, s, _, _ in await records(ha)]
        last_before = ha.last_seq
        await scene.stop("a")
        await scene.stop("b")
        journal_dir = tmp_path / "a" / "data" / "journal"
        middle = journals(journal_dir, "a")[1]
        damaged = [r for r in records_of(middle) if lost_from <= r.seq <= lost_to]
        # the journal held everything published between the two fillers
        assert [r.seq for r in damaged] == list(range(lost_from, lost_to + 1))
        if damage == "flipped":
            # a byte of each such record flipped (a finished journal: found when the
            # start-up reads it)
            for rec in reversed(damaged):  # (the scan finds records up to the first damage)
                flip_byte(middle, rec.offset + rec.length // 2)
        else:
            middle.unlink()
            middle.with_suffix(".index").unlink()
        # as after a crash before the queue checkpoint passed q1 and q2: the start-up
        # reads the whole log (the acks of q1 and q2 are among the damaged records)
        (journal_dir / checkpoint_name("a")).unlink()

        again = await scene.start("a")
        await drive(clock, lambda: again.broker.ready)
        txlog = again.broker.txlog
        assert txlog is not None
        fenced = [(f.first_seq, f.last_seq) for f in txlog.fences]
        assert fenced and all(f.exact == (damage == "flipped") for f in txlog.fences)
        assert {s for a, b in fenced for s in range(a, b + 1)} >= {r.seq for r in damaged}
        pipeline = again.broker.pipeline
        assert pipeline.unfolded == fenced
        # rebuilt without the damaged records: an older k1, k4 still there, no k3; q1
        # and q2 back in the queue (their acks were lost), r5 and r6 missing
        before = {k: orjson.loads(v[0])["v"] for k, v in sow_state(again).items()}
        assert before == {"k0": 3, "k1": 1, "k4": 1}
        assert again.broker.queues.info("work").depth == 6  # q1..q5, s1
        # the pin and checkpoint of the queue hold from the damaged range until it is back
        assert again.broker.queues.queues["work"].pin_from(txlog.last_seq) <= fenced[0][0]

        # the instance's own records in it (queue acks) are among what it asks for
        assert any(key == txlog.own_pub_hash for f in txlog.fences for key, _, _ in f.identities)
        await scene.start("b")
        await drive(clock, lambda: not txlog.fences and not pipeline.unfolded)
        await drive(clock, lambda: all(caught_up(h) for h in hs.values()))
        # nothing came back as a new record: the log is the one it was, each bookmark once
        assert again.last_seq == last_before
        assert [(h, s) for h, s, _, _ in await records(again)] == held_before
        assert sow_state(again) == await folded_sow(again) == want_sow
        refolded = [e for e in again.broker.events.recent(500) if e["event"] == "state_refolded"]
        assert [(e["first_seq"], e["last_seq"]) for e in refolded] == fenced
        consumer = await again.logon("consumer")
        consumer.send(({"c": "subscribe", "t": "work", "sub_id": "q", "o": "max_backlog=100"}, b""))
        want = ["q3", "q4", "q5", "r5", "r6", "s1"]
        await drive(clock, lambda: len(work(consumer)) >= len(want))
        await clock.advance(5)
        await drive(clock, lambda: True)
        assert sorted(work(consumer)) == want  # each once; none acked
        ack_work(consumer, set(want))
        await drive(clock, lambda: again.broker.queues.info("work").depth == 0)
    finally:
        await scene.close()


def test_an_instance_that_lost_its_own_last_record_never_reuses_its_bookmark(
    tmp_path: Path,
) -> None:
    import asyncio

    asyncio.run(_own_tail(tmp_path))


async def _own_tail(tmp_path: Path) -> None:
    """A's last record is its own (a sow_delete, under A's broker identity), acked by B,
    then torn while both are stopped, with nothing of A naming it: A only holds its seq. A starts
    while B is down and deletes another key: that record must not take the lost one's
    bookmark (B would drop it as a duplicate, and A the lost one when B sends it back).
    Once B is back, both hold both deletes and their SOWs agree."""
    scene = _sow_pair(tmp_path, "<JournalRepairWait>0s</JournalRepairWait>")
    clock, hs = scene.clock, scene.hs
    await scene.start("a", "b")
    try:
        await _a_deleted_key_1(scene)
        own = own_identity(hs["a"])
        await scene.stop("a")
        await scene.stop("b")
        jdir = tmp_path / "a" / "data" / "journal"
        torn = zero_end_of_last_record(journals(jdir, "a")[-1])
        assert torn.pub_hash == own
        # nothing of A names it (no index, no clients.ack): only B's acknowledgment in
        # A's replication positions says it was durable
        for path in [*jdir.glob("*.index"), *jdir.glob("*.clients.ack")]:
            path.unlink()
        again = await scene.start("a")
        await drive(clock, lambda: again.broker.ready)
        report = again.broker.txlog.recovery_report  # type: ignore[union-attr]
        assert report is not None and report.unnamed
        assert own_identity(again) == own  # the same log: the same identity
        assert sorted(sow_keys(again)) == ["1", "2", "3"]  # the delete went with the tail
        admin = await again.logon("admin")
        admin.send(({"c": "sow_delete", "t": "orders", "k": "2", "a": "processed"}, b""))
        await drive(clock, lambda: sorted(sow_keys(again)) == ["1", "3"])
        await drive(clock, lambda: again.durable_seq >= again.last_seq)
        mine = [s for h, s, _, _ in await records(again) if h == torn.pub_hash]
        assert mine and mine[-1] > torn.pub_seq  # not the lost record's bookmark
        await scene.start("b")
        await drive(clock, lambda: all(caught_up(h) for h in hs.values()))
        await drive(clock, lambda: sorted(sow_keys(again)) == sorted(sow_keys(hs["b"])) == ["3"])
    finally:
        await scene.close()


def _sow_pair(tmp_path: Path, a_tuning: str = "") -> Scene:
    """a and b with a transient SOW topic orders, each the other's destination."""
    sow = sow_topic("orders", "/n", durability="transient")
    return Scene(tmp_path, {
        "a": xml(tmp_path, "a", destination("b", [B], passthrough=(".*",)), sow=sow,
                 tuning=a_tuning),
        "b": xml(tmp_path, "b", destination("a", [A], passthrough=(".*",)), sow=sow),
    })  # fmt: skip


async def _a_deleted_key_1(scene: Scene) -> None:
    """Keys 1 to 3 published at a, then key 1 deleted at a (a record of a's own identity),
    and b caught up."""
    clock, hs = scene.clock, scene.hs
    pub = await hs["a"].logon("pub-a")
    publish(pub, "orders", range(1, 4))
    await drive(clock, lambda: persisted(pub) == 3)
    pub.send(({"c": "sow_delete", "t": "orders", "k": "1", "a": "processed"}, b""))
    await drive(clock, lambda: all(caught_up(h) for h in hs.values()))
    await drive(clock, lambda: sorted(sow_keys(hs["b"])) == ["2", "3"])


def test_an_instance_wiped_and_started_again_never_reuses_its_bookmarks(
    tmp_path: Path,
) -> None:
    import asyncio

    asyncio.run(_wiped_own(tmp_path))


async def _wiped_own(tmp_path: Path) -> None:
    """A logs its own record (a sow_delete, under A's own identity), B holds it. A's data
    directory is wiped and A starts again alone, empty, without a bootstrap, and deletes a
    key: that record must not take a bookmark A's earlier log used (B would drop it as a
    duplicate of the old delete and keep the key, and A the old delete). Once B is back,
    both hold both deletes and their SOWs agree."""
    import shutil

    scene = _sow_pair(tmp_path)
    clock, hs = scene.clock, scene.hs
    await scene.start("a", "b")
    try:
        await _a_deleted_key_1(scene)
        old = own_identity(hs["a"])
        before = {(h, s) for h, s, _, _ in await records(hs["b"])}
        assert (old, 1) in before
        await scene.stop("a")
        await scene.stop("b")
        shutil.rmtree(tmp_path / "a" / "data")
        again = await scene.start("a")  # alone: B holds A's earlier records
        await drive(clock, lambda: again.broker.ready)
        other = await again.logon("pub-a2")
        publish(other, "orders", range(4, 6))
        await drive(clock, lambda: {"4", "5"} <= set(sow_keys(again)))
        other.send(({"c": "sow_delete", "t": "orders", "k": "4", "a": "processed"}, b""))
        await drive(clock, lambda: "4" not in sow_keys(again))
        await drive(clock, lambda: again.durable_seq >= again.last_seq)
        new = own_identity(again)
        mine = [(h, s) for h, s, _, _ in await records(again) if h not in (0, pub_hash("pub-a2"))]
        assert mine == [(new, 1)] and (new, 1) not in before
        await scene.start("b")
        await drive(clock, lambda: all(caught_up(h) for h in hs.values()))
        await drive(
            clock, lambda: sorted(sow_keys(again)) == sorted(sow_keys(hs["b"])) == ["2", "3", "5"]
        )
        held = {(h, s) for h, s, _, _ in await records(again)}
        assert {(old, 1), (new, 1)} <= held
    finally:
        await scene.close()


def test_a_missing_journal_no_peer_fills_whole_gets_back_what_peers_hold(
    tmp_path: Path,
) -> None:
    import asyncio

    asyncio.run(_missing_unfillable(tmp_path))


async def _missing_unfillable(tmp_path: Path) -> None:
    """A's middle journal is lost; it held records of a topic A does not replicate, so no
    peer can give the fence back whole. B's resync sends none of its records (A claims
    them: its repair alone fills the range); the repair writes back what B holds in the
    fence's first seqs and keeps the rest fenced, naming the records no peer sent. Once
    an operator releases that, A asks B to resync, and nothing comes twice."""

    def config(name: str, dest: str) -> str:
        return xml(
            tmp_path, name, dest, journal_size="1MB",
            txlog_extra="<PreallocatedJournalFiles>1</PreallocatedJournalFiles>",
            tuning="<JournalRepairWait>0s</JournalRepairWait>",
        )  # fmt: skip

    def dest(name: str, addr: tuple[str, int]) -> str:
        topics = (("orders", None), ("pad", None))
        return destination(name, [addr], topics=topics, exclude="replicate", passthrough=(".*",))

    scene = Scene(tmp_path, {"a": config("a", dest("b", B)), "b": config("b", dest("a", A))})
    clock, hs = scene.clock, scene.hs
    await scene.start("a", "b")
    try:
        ha = hs["a"]
        pub = await ha.logon("pub")
        publisher = Publisher(ha, pub)
        send = publisher.send

        await send("orders", [order("k0", 1)])
        await send("pad", [PAD] * 1100)
        await send("orders", [order("k1", 1)])
        local_from = publisher.n + 1
        await send("local", [b'{"x":1}', b'{"x":2}'])  # never replicated
        await send("orders", [order("k2", 1)])
        await send("pad", [PAD] * 1100)
        await send("orders", [order("k3", 1)])
        await drive(clock, lambda: all(caught_up(h) for h in hs.values()))
        before = [(h, s) for h, s, _, _ in await records(ha)]
        await scene.stop("a")
        await scene.stop("b")
        jdir = tmp_path / "a" / "data" / "journal"
        middle = journals(jdir, "a")[1]
        lost = {(r.pub_hash, r.pub_seq) for r in records_of(middle)}
        local = {(h, s) for h, s in lost if local_from <= s < local_from + 2}
        assert len(local) == 2
        middle.unlink()
        middle.with_suffix(".index").unlink()

        again = await scene.start("a")
        await drive(clock, lambda: again.broker.ready)
        txlog = again.broker.txlog
        assert txlog is not None
        (fence,) = txlog.fences
        assert not fence.exact
        await scene.start("b")
        # B holds all but the local records: they go back in the fence's first seqs, and
        # its last two stay fenced, naming the records no peer sent
        await drive(clock, lambda: bool(txlog.fences) and txlog.fences[0].records == 2)
        (rest,) = txlog.fences
        assert (rest.first_seq, rest.last_seq) == (fence.last_seq - 1, fence.last_seq)
        assert all(txlog.holds(h, s) for h, s in lost - local)
        assert not any(txlog.holds(h, s) for h, s in local)
        await drive(clock, lambda: all(caught_up(h) for h in hs.values()))
        assert again.last_seq == len(before)  # nothing came back over the link
        assert f"{fence.records - 2} of {fence.records} records found" in rest.repair
        (pub_hash,) = {h for h, _ in local}
        first = min(s for _, s in local)
        assert f"{pub_hash}|{first}..{first + 1}" in rest.repair, rest.repair
        assert "at most 2 were" in rest.repair
        assert "the other 2 seqs stay fenced" in rest.repair

        await again.broker.operations.release_fence(rest.first_seq)
        # A asks B to resync: it holds nothing of the range A lacks now
        await drive(clock, lambda: any(
            e["event"] == "resync_after_fence" for e in again.broker.events.recent(200)
        ))  # fmt: skip
        await drive(clock, lambda: all(caught_up(h) for h in hs.values()))
        await drive(clock, lambda: txlog.durable_seq >= txlog.last_seq)
        after = await _bookmarks(again)
        assert sorted(after) == sorted(set(before) - local)
        assert len(after) == len(set(after))
    finally:
        await scene.close()


def test_a_range_only_several_peers_hold_together_is_repaired_from_all_of_them(
    tmp_path: Path,
) -> None:
    import asyncio

    asyncio.run(_from_several(tmp_path))


async def _from_several(tmp_path: Path) -> None:
    """C's middle journal is lost. It held records A's clients published and records B's
    clients published; A and B replicate only their own clients' records, to C alone, so
    neither holds the whole range. The repair adds up what both send: the fence is written
    back, each publisher's records in order, and C's log holds what it held before."""

    def config(name: str, *dests: str) -> str:
        return xml(
            tmp_path, name, *dests, journal_size="1MB",
            txlog_extra="<PreallocatedJournalFiles>1</PreallocatedJournalFiles>",
            tuning="<JournalRepairWait>0s</JournalRepairWait>",
        )  # fmt: skip

    def to(name: str, addr: tuple[str, int]) -> str:
        return destination(name, [addr], passthrough=())  # their own clients' records only

    scene = Scene(tmp_path, {
        "a": config("a", to("c", C)),
        "b": config("b", to("c", C)),
        "c": config("c", to("a", A), to("b", B)),
    })  # fmt: skip
    clock, hs = scene.clock, scene.hs
    await scene.start("a", "b", "c")
    try:
        pubs = {n: Publisher(hs[n], await hs[n].logon(f"pub-{n}")) for n in ("a", "b", "c")}

        async def both(i: int) -> None:
            await pubs["a"].send("orders", [order(f"a{i}", 1)])
            await pubs["b"].send("orders", [order(f"b{i}", 1)])

        await both(0)  # before and after the range too: C's journals name both publishers
        await pubs["c"].send("pad", [PAD] * 1100)
        for i in range(1, 7):  # the range: A's and B's records, interleaved
            await both(i)
        await pubs["c"].send("pad", [PAD] * 1100)
        await both(7)
        await drive(clock, lambda: all(caught_up(h) for h in hs.values()))
        before = [(h, s) for h, s, _, _ in await records(hs["c"])]
        for name in ("a", "b", "c"):
            await scene.stop(name)
        jdir = tmp_path / "c" / "data" / "journal"
        middle = journals(jdir, "c")[1]
        lost = [(r.pub_hash, r.pub_seq) for r in records_of(middle)]
        mine = {pub_hash(f"pub-{n}") for n in ("a", "b")}
        assert mine <= {h for h, _ in lost}  # both publishers' records are in it
        middle.unlink()
        middle.with_suffix(".index").unlink()

        await scene.start("a", "b")
        again = await scene.start("c")
        await drive(clock, lambda: again.broker.ready)
        txlog = again.broker.txlog
        assert txlog is not None
        await drive(clock, lambda: not txlog.fences)
        (repaired,) = [e for e in again.broker.events.recent(500) if e["event"] == "repaired"]
        assert sorted(repaired["peers"]) == ["a", "b"]
        after = await _bookmarks(again)
        assert sorted(after) == sorted(before)
        for h in {h for h, _ in after}:  # each publisher's sequences in order
            seqs = [s for k, s in after if k == h]
            assert seqs == sorted(seqs)
    finally:
        await scene.close()


async def _bookmarks(h: EngineHarness) -> list[tuple[int, int]]:
    """The bookmarks of a broker's log in order, past released placeholders (a read of a
    run of them alone returns nothing: the next one starts after it)."""
    txlog = h.broker.txlog
    assert txlog is not None
    out: list[tuple[int, int]] = []
    seq = txlog.first_seq
    while seq <= txlog.durable_seq:
        batch = await txlog.read_batch(seq, max_count=10_000)
        out.extend((r.pub_hash, r.pub_seq) for r in batch if r.pub_hash)
        seq = batch[-1].seq + 1 if batch else seq + 1
    return out


@scenario
async def test_damage_the_scrub_finds_while_running_is_repaired_at_once(
    tmp_path: Path,
) -> None:
    """A record of a finished journal damaged under a running instance: the scrub fences
    it, and the repair asks the peer at once, not at the repair loop's next wake (up to
    half a minute away while nothing was fenced)."""
    config = {"journal_size": "1MB"}
    scene = Scene(tmp_path, {
        "a": xml(tmp_path, "a", destination("b", [B], passthrough=(".*",)), **config),
        "b": xml(tmp_path, "b", destination("a", [A], passthrough=(".*",)), **config),
    })  # fmt: skip
    clock, hs = scene.clock, scene.hs
    await scene.start("a", "b")
    try:
        pub = await hs["a"].logon("pub")
        await Publisher(hs["a"], pub).send("orders", [b'{"pad":"%s"}' % (b"x" * 1000)] * 1500)
        await drive(clock, lambda: caught_up(hs["a"]))
        txlog, repairer = hs["a"].broker.txlog, hs["a"].broker.repairer
        assert txlog is not None and repairer is not None
        before = await records(hs["a"])
        first = journals(tmp_path / "a" / "data" / "journal", "a")[0]
        hit = records_of(first)[100]
        flip_byte(first, hit.offset + hit.length // 2)
        assert txlog.scrub()
        await drive(clock, lambda: bool(txlog.fences))
        fenced_at = clock.time()
        await drive(clock, lambda: not txlog.fences)
        assert clock.time() - fenced_at < RETRY_MAX / 10
        assert repairer.progress.records_repaired == 1
        assert await records(hs["a"]) == before
    finally:
        await scene.close()


@pytest.mark.parametrize("local", ["none", "first", "second"])
def test_a_journal_lost_next_to_a_standing_fence_is_repaired_with_it(
    tmp_path: Path, local: str
) -> None:
    import asyncio

    asyncio.run(_lost_next_to_a_fence(tmp_path, local))


async def _lost_next_to_a_fence(tmp_path: Path, local: str) -> None:
    """A loses a journal from the middle of its log while its peer is away: the fence
    stands. A restarts and has lost the journal after it too: a second fence, next to
    the first. Both take their intervals from the journals around the pair, so both ask
    for the records of both. Each record used to go to the first fence that asked for
    it, which then had more records than seqs and the second none: neither was ever
    written back. Neighbouring fences are repaired as one run of seqs: every record a
    peer holds comes back, once, in the order it had. With ``local``, the first or the
    second journal also held a record of a topic A does not replicate: the pair is one
    record short, the records found fill their seqs in order and one seq stays fenced
    (the fence that is whole is written back first, and takes nothing more after)."""

    def config(name: str, dest: str) -> str:
        return xml(
            tmp_path, name, dest, journal_size="1MB",
            txlog_extra="<PreallocatedJournalFiles>1</PreallocatedJournalFiles>",
            tuning="<JournalRepairWait>0s</JournalRepairWait>",
        )  # fmt: skip

    def dest(name: str, addr: tuple[str, int]) -> str:
        topics = (("pad", None),)
        return destination(name, [addr], topics=topics, exclude="replicate", passthrough=(".*",))

    scene = Scene(tmp_path, {"a": config("a", dest("b", B)), "b": config("b", dest("a", A))})
    clock, hs = scene.clock, scene.hs
    await scene.start("a", "b")
    try:
        ha = hs["a"]
        x = Publisher(ha, await ha.logon("x")).send
        y = Publisher(ha, await ha.logon("y")).send
        await y("pad", [PAD] * 10)
        await x("pad", [PAD] * 1000)
        kept = await x("local", [b'{"x":1}']) if local == "first" else range(0)
        await x("pad", [PAD] * 1000)
        await y("pad", [PAD] * 490)
        if local == "second":
            kept = await y("local", [b'{"y":1}'])
        local_keys = {(pub_hash("x" if local == "first" else "y"), s) for s in kept}
        await y("pad", [PAD] * 1510)
        await x("pad", [PAD] * 10)
        await y("pad", [PAD] * 10)
        await drive(clock, lambda: all(caught_up(h) for h in hs.values()))
        before = await _bookmarks(ha)
        await scene.stop("b")
        await scene.stop("a")
        jdir = tmp_path / "a" / "data" / "journal"
        files = journals(jdir, "a")
        assert len(files) >= 4, files
        lost = remove_journal(files[1], "a")
        again = await scene.start("a")
        txlog = again.broker.txlog
        assert txlog is not None
        assert len(txlog.fences) == 1  # nobody to repair it from yet
        await scene.stop("a")
        lost += remove_journal(files[2], "a")

        again = await scene.start("a")
        txlog = again.broker.txlog
        assert txlog is not None
        fences = [(f.first_seq, f.last_seq) for f in txlog.fences]
        assert len(fences) == 2 and fences[0][1] + 1 == fences[1][0], fences
        unsent = {(r.pub_hash, r.pub_seq) for r in lost} & local_keys
        assert len(unsent) == len(kept)  # the local record was in a journal lost
        await scene.start("b")
        if kept:
            await drive(clock, lambda: [f.records for f in txlog.fences] == [1])
            (rest,) = txlog.fences
            assert fences[0][0] <= rest.first_seq <= fences[1][1]
            await again.broker.operations.release_fence(rest.first_seq)  # no peer has it
        else:
            await drive(clock, lambda: not txlog.fences)
        assert all(
            txlog.holds(r.pub_hash, r.pub_seq)
            for r in lost
            if (r.pub_hash, r.pub_seq) not in unsent
        )
        await drive(clock, lambda: all(caught_up(h) for h in hs.values()))
        assert await _bookmarks(again) == [b for b in before if b not in unsent]
    finally:
        await scene.close()
