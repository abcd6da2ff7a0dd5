"""A replicated queue on an instance whose own last record, a confirmed queue ack, was
torn on disk while its peer was down: the ack exists only on the peer now, and the
instance holds its seq fenced, waiting for a repair.

The queue is rebuilt without the ack, so the message is back in it. It must not be
delivered before the peer gives the ack back (docs/queues.md: never after a confirmed
ack). Today the instance serves the queue once its repair wait is over, with the fence
still there: the test is an expected failure until the queues hold what a fenced range
may have acked.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from server.queues.checkpoint import checkpoint_name
from tests.support.damage import journals, zero_end_of_last_record
from tests.support.fabric import A, B, drive, scenario, xml
from tests.support.repair import Scene, caught_up, own_identity
from tests.support.replication import destination
from tests.unit.queues.test_replicated_queues import QUEUE


def _configs(tmp_path: Path) -> dict[str, str]:
    return {
        "a": xml(tmp_path, "a", destination("b", [B], passthrough=(".*",)), sow=QUEUE),
        "b": xml(tmp_path, "b", destination("a", [A], passthrough=(".*",)), sow=QUEUE),
    }


@pytest.mark.xfail(
    strict=True,
    reason="an instance whose queue ack lies in a fenced range serves the queue before "
    "the repair gives the ack back",
)
@scenario
async def test_a_message_whose_ack_was_lost_on_disk_is_not_delivered_again(
    tmp_path: Path,
) -> None:
    scene = Scene(tmp_path, _configs(tmp_path))
    clock, hs = scene.clock, scene.hs
    await scene.start("a", "b")
    try:
        pub = await hs["a"].logon("pub")
        pub.send(({"c": "publish", "t": "work-in"}, orjson.dumps({"m": "job"})))
        worker = await hs["a"].logon("worker")
        worker.send(({"c": "subscribe", "t": "work", "sub_id": "q", "o": "max_backlog=5"}, b""))
        await drive(clock, lambda: len(worker.deliveries("q")) == 1)
        ((header, _),) = worker.deliveries("q")
        worker.send(
            ({"c": "sow_delete", "t": "work", "bm": str(header["bm"]), "a": "processed"}, b"")
        )
        await drive(clock, lambda: bool(worker.acks("processed")))
        await drive(clock, lambda: all(caught_up(h) for h in hs.values()))
        assert hs["b"].broker.queues.info("work").depth == 0  # b holds the ack
        own = own_identity(hs["a"])
        await scene.stop("a")
        await scene.stop("b")
        jdir = tmp_path / "a" / "data" / "journal"
        torn = zero_end_of_last_record(journals(jdir, "a")[-1])
        assert torn.pub_hash == own  # the ack, under a's own identity
        # the queue reads the whole log
        (jdir / checkpoint_name("a")).unlink(missing_ok=True)
        again = await scene.start("a")  # b is down past the repair wait
        await drive(clock, lambda: again.broker.ready)
        txlog = again.broker.txlog
        assert txlog is not None and txlog.fences  # a lacks the ack, fenced
        consumer = await again.logon("consumer")
        consumer.send(({"c": "subscribe", "t": "work", "sub_id": "q", "o": "max_backlog=5"}, b""))
        await scene.start("b")
        await drive(clock, lambda: all(caught_up(h) for h in hs.values()))
        await clock.advance(5)
        await drive(clock, lambda: True)
        assert consumer.deliveries("q") == []  # acked before the loss: never again
        assert again.broker.queues.info("work").depth == 0
    finally:
        await scene.close()
