"""A replicated queue on an instance that lost its own last record, a confirmed queue ack,
on disk while its peer was down: the ack exists only on the peer now.

The queue is rebuilt without the ack, so the message is back in it. It must not be
delivered before the peer gives the ack back (docs/queues.md: never after a confirmed
ack, "Held after a loss"): the queue holds what the lost range may have acked, whether
the instance knows the range (a fence, waiting for a repair) or only that it lost a
tail (its sources resend it), and new work goes on meanwhile. An operator who gives up
on the lost records releases the hold: the message is delivered again (at least once).
"""

from __future__ import annotations

from pathlib import Path

import orjson

from spool.server.clock import VirtualClock
from spool.server.queues.checkpoint import checkpoint_name
from spool.server.replication.state import state_path
from tests.support.damage import journals, zero_end_of_last_record
from tests.support.engine import EngineHarness, FakeClient
from tests.support.fabric import A, B, drive, scenario, xml
from tests.support.repair import Scene, caught_up, own_identity
from tests.support.replication import destination
from tests.unit.queues.test_replicated_queues import QUEUE

#: how long a's start-up waits for b to repair its fence: short, as every virtual
#: second of it is driven in small steps while the log's threads run
_TUNED = {"sow": QUEUE, "tuning": "<JournalRepairWait>2s</JournalRepairWait>"}


def _configs(tmp_path: Path) -> dict[str, str]:
    return {
        "a": xml(tmp_path, "a", destination("b", [B], passthrough=(".*",)), **_TUNED),
        "b": xml(tmp_path, "b", destination("a", [A], passthrough=(".*",)), **_TUNED),
    }


def _publish(client: FakeClient, job: str) -> None:
    client.send(({"c": "publish", "t": "work-in"}, orjson.dumps({"m": job})))


def _subscribe(client: FakeClient) -> None:
    client.send(({"c": "subscribe", "t": "work", "sub_id": "q", "o": "max_backlog=5"}, b""))


def _jobs(client: FakeClient) -> list[str]:
    return [orjson.loads(body)["m"] for _, body in client.deliveries("q")]


async def _acked_then_torn(scene: Scene, *, named: bool) -> EngineHarness:
    """a publishes a job, a consumer at a acks it, b holds the ack; both stop, a's last
    record (the ack) is torn, and a starts alone (b down past the repair wait) with its
    queue read from the whole log. ``named``: a knows b acknowledged the torn record
    (it is fenced); else a's replication state is gone too, and all a knows is that it
    lost a tail."""
    clock, hs, tmp = scene.clock, scene.hs, scene.tmp
    await scene.start("a", "b")
    pub = await hs["a"].logon("pub")
    _publish(pub, "job")
    worker = await hs["a"].logon("worker")
    _subscribe(worker)
    await drive(clock, lambda: len(worker.deliveries("q")) == 1)
    ((header, _),) = worker.deliveries("q")
    worker.send(({"c": "sow_delete", "t": "work", "bm": str(header["bm"]), "a": "processed"}, b""))
    await drive(clock, lambda: bool(worker.acks("processed")))
    await drive(clock, lambda: all(caught_up(h) for h in hs.values()))
    assert hs["b"].broker.queues.info("work").depth == 0  # b holds the ack
    own = own_identity(hs["a"])
    await scene.stop("a")
    await scene.stop("b")
    jdir = tmp / "a" / "data" / "journal"
    last = journals(jdir, "a")[-1]
    # the ack, under a's own identity
    torn = zero_end_of_last_record(last)
    assert torn.pub_hash == own
    (jdir / checkpoint_name("a")).unlink(missing_ok=True)  # the queue reads the whole log
    if not named:  # nothing that would name the torn record is left
        state_path(tmp / "a" / "data", "a").unlink()
        (jdir / "a.clients.ack").unlink()
        last.with_suffix(".index").unlink()
    again = await scene.start("a")
    await drive(clock, lambda: again.broker.ready)
    return again


async def _a_while(clock: VirtualClock) -> None:
    """Five seconds pass, and whatever they bring runs."""
    await clock.advance(5)
    await drive(clock, lambda: True)


def _events(h: EngineHarness, name: str) -> list[dict[str, object]]:
    return [e for e in h.broker.events.recent(1000) if e["event"] == name]


@scenario
async def test_a_message_whose_ack_was_lost_on_disk_is_not_delivered_again(
    tmp_path: Path,
) -> None:
    scene = Scene(tmp_path, _configs(tmp_path))
    clock, hs = scene.clock, scene.hs
    try:
        again = await _acked_then_torn(scene, named=True)
        txlog = again.broker.txlog
        assert txlog is not None and txlog.fences  # a lacks the ack, fenced
        info = again.broker.queues.info("work")
        assert (info.depth, info.held, info.backlog) == (1, 1, 0)
        assert any("fenced" in why for why in info.hold)
        assert any(a["id"] == "queue-held" for a in again.broker.operations.alerts())
        (listed,) = again.broker.queues.browse("work", 0, 10).messages
        assert listed["reason"] == "held"
        consumer = await again.logon("consumer")
        _subscribe(consumer)
        await _a_while(clock)
        assert consumer.deliveries("q") == []  # held while b is down
        await scene.start("b")
        await drive(clock, lambda: all(caught_up(h) for h in hs.values()))
        await drive(clock, lambda: not again.broker.txlog.fences)  # type: ignore[union-attr]
        # the repair removed the fence; the queues take the range in after it (read in
        # the log's threads) and the hold ends then, not with the fence
        await drive(clock, lambda: not again.broker.queues.info("work").hold)
        await _a_while(clock)
        assert consumer.deliveries("q") == []  # acked before the loss: never again
        info = again.broker.queues.info("work")
        assert (info.depth, info.held, info.hold) == (0, 0, [])
        assert _events(again, "queue_hold_ended")
        assert not any(a["id"] == "queue-held" for a in again.broker.operations.alerts())
    finally:
        await scene.close()


@scenario
async def test_a_lost_tail_nothing_names_holds_until_the_source_resent_it(
    tmp_path: Path,
) -> None:
    scene = Scene(tmp_path, _configs(tmp_path))
    clock, hs = scene.clock, scene.hs
    try:
        again = await _acked_then_torn(scene, named=False)
        txlog = again.broker.txlog
        assert txlog is not None and not txlog.fences and txlog.lost_since_us is not None
        info = again.broker.queues.info("work")
        assert (info.depth, info.held) == (1, 1)
        assert info.hold == ["lost tail: waiting for b to resend"]
        consumer = await again.logon("consumer")
        _subscribe(consumer)
        pub = await again.logon("pub-2")
        _publish(pub, "new")  # new work is not held
        await drive(clock, lambda: len(consumer.deliveries("q")) == 1)
        await _a_while(clock)
        assert _jobs(consumer) == ["new"]  # and the old one still is, b being down
        await scene.start("b")
        await drive(clock, lambda: all(caught_up(h) for h in hs.values()))
        await drive(clock, lambda: not again.broker.queues.info("work").hold)
        await _a_while(clock)
        assert _jobs(consumer) == ["new"]  # the resync gave the ack back first
        assert again.broker.queues.info("work").depth == 1  # "new", leased
    finally:
        await scene.close()


@scenario
async def test_an_operator_who_gives_up_on_the_lost_records_gets_the_message_again(
    tmp_path: Path,
) -> None:
    scene = Scene(tmp_path, _configs(tmp_path))
    clock = scene.clock
    try:
        again = await _acked_then_torn(scene, named=True)
        txlog = again.broker.txlog
        assert txlog is not None
        (fence,) = txlog.fences
        consumer = await again.logon("consumer")
        _subscribe(consumer)
        ops = again.broker.operations
        assert await ops.release_fence(fence.first_seq) is not None
        await drive(clock, lambda: not again.broker.queues.hold.fences)
        await _a_while(clock)
        # the lost tail still waits for b to resend
        assert consumer.deliveries("q") == []
        assert again.broker.queues.info("work").hold == ["lost tail: waiting for b to resend"]
        assert ops.release_queue_hold("admin") == 1
        await drive(clock, lambda: len(consumer.deliveries("q")) == 1)
        assert _jobs(consumer) == ["job"]  # at least once, as released
        # each release says what it gave up: the fenced seqs, then the wait for b
        fenced, released = _events(again, "queue_hold_released")
        assert (fenced["first_seq"], fenced["last_seq"]) == (fence.first_seq, fence.last_seq)
        assert released["user"] == "admin" and released["messages"] == 1
        assert ops.release_queue_hold("admin") == 0  # nothing held any more
    finally:
        await scene.close()
