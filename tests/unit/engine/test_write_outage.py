"""A write outage of the transaction log, as the engine's clients live it (virtual clock).

Faults come through the log's file seam. What must hold: a ``flush`` and every publish
waiting for ``persisted`` get ``txlog full`` with the cause at once, not after a timeout;
new publishes are refused with their own ``s``; a bookmark replay keeps delivering what is
durable and is not failed; the log retries on the clock (``WriteRetryInterval``, doubling)
and, once the disk takes writes, writes what it had accepted, acknowledges it, delivers it
and takes publishes again. The event log tells the story.
"""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Any

import pytest

from tests.support.engine import EngineHarness
from tests.support.faults import FaultySeam
from tests.unit.engine.outage import RETRY, failures, next_retry, publish, scenario, txlog_of


def events(h: EngineHarness, name: str) -> list[dict[str, Any]]:
    return [e for e in h.broker.events.recent(500) if e["event"] == name]


@scenario
async def test_an_outage_fails_waiters_at_once_keeps_replays_and_resumes_on_the_clock(
    tmp_path: Path,
) -> None:
    seam = FaultySeam()
    async with EngineHarness(tmp_path, files=seam, txlog_extra=RETRY) as h:
        log = txlog_of(h)
        pub = await h.logon("pub")
        reader = await h.logon("reader")
        reader.send(({"c": "subscribe", "t": "orders", "sub_id": "r", "bm": "0"}, b""))
        pub.send(*(publish(n, a="persisted") for n in range(1, 6)))
        await h.commit()
        assert [a["s"] for a in pub.acks("persisted")] == [5]
        assert len(reader.deliveries("r")) == 5

        # the disk fills up: the commit of 6..8 fails
        seam.fail("write", errno.ENOSPC)
        pub.send(*(publish(n, a="persisted") for n in range(6, 9)))
        await h.clock.advance(0.001)  # the group commit is due
        await h.until(lambda: log.write_outage is not None)
        await h.settle()
        outage = log.write_outage
        assert outage is not None
        now = h.clock.time()
        # every persisted waiter is told at once: one failure with the highest s waiting
        [told] = failures(pub)
        assert (told["a"], told["reason"], told["s"]) == ("persisted", "txlog full", 8)
        assert "injected write failure" in told["detail"] and "since" in told["detail"]
        # a flush is answered at once; a new publish is refused with its own s
        pub.send(({"c": "flush", "cid": "f"}, b""), publish(9, a="processed", cid="p9"))
        await h.settle()
        assert h.clock.time() == now  # no time passed: nothing waited
        flush_ack, refused = failures(pub)[1:]
        assert (flush_ack["cid"], flush_ack["reason"]) == ("f", "txlog full")
        assert (refused["cid"], refused["reason"], refused["s"]) == ("p9", "txlog full", 9)
        # the replay served what is durable and waits; it was not failed
        assert len(reader.deliveries("r")) == 5 and failures(reader) == []
        [began] = events(h, "flush_failed")
        assert began["level"] == "error" and began["retry_in_s"] == 1.0
        # every dashboard page and /api/instance show it, with the cause and since when
        [alert] = h.broker.operations.instance_info()["alerts"]
        assert (alert["id"], alert["level"]) == ("txlog-refusing-writes", "error")
        assert (
            alert["since"] == "2023-11-14T22:13:20Z"
            and "injected write failure" in alert["message"]
        )
        info = h.broker.operations.transaction_log_info()
        assert info is not None and info["write_outage"] is not None
        assert info["write_outage"]["pending_records"] == 3

        # retries 1 s after the failure (fails: still full) and 2 s after that (works)
        first = await next_retry(h, log)
        assert first - outage.since == pytest.approx(1.0)
        writes = seam.calls["write"]
        await h.clock.advance(first - h.clock.time() - 0.001)
        assert seam.calls["write"] == writes, "retried early"
        await h.clock.advance(0.002)
        await h.until(lambda: (o := log.write_outage) is not None and o.attempts == 1)
        seam.heal()
        second = await next_retry(h, log)
        assert second - first == pytest.approx(2.0, abs=0.005)
        await h.clock.advance(second - h.clock.time() - 0.001)
        assert log.write_outage is not None and log.durable_seq == 5
        await h.clock.advance(0.002)
        await h.until(lambda: log.durable_seq == 8)
        await h.settle()
        assert log.write_outage is None
        # acknowledged after all, delivered in order, and publishes are taken again
        assert pub.acks("persisted")[-1] == {
            "c": "ack", "a": "persisted", "status": "success", "s": 8, "bm": pub.acks("persisted")[0]["bm"].replace("|5|", "|8|"), "l": 0,
        }  # fmt: skip
        assert [b for _, b in reader.deliveries("r")] == [b'{"n":%d}' % n for n in range(1, 9)]
        assert h.broker.operations.alerts() == []
        [resumed] = events(h, "writes_resumed")
        assert resumed["level"] == "warning" and resumed["retries"] == 2
        assert resumed["records"] == 3 and resumed["down_s"] == pytest.approx(3.0, abs=0.005)
        pub.send(publish(9, a="persisted"))
        await h.commit()
        assert pub.acks("persisted")[-1]["s"] == 9
        assert [b for _, b in reader.deliveries("r")][-1] == b'{"n":9}'


@scenario
async def test_a_flush_already_waiting_when_the_outage_begins_fails_then(tmp_path: Path) -> None:
    """A flush sent before the failure is known waits for the commit; the failure of that
    commit answers it (a client never waits for a disk that refuses writes)."""
    seam = FaultySeam()
    async with EngineHarness(tmp_path, files=seam, txlog_extra=RETRY, flush_interval="50ms") as h:
        log = txlog_of(h)
        pub = await h.logon("pub")
        pub.send(publish(1))  # an idle log commits it at once...
        await h.until(lambda: log.durable_seq == 1)  # ...and the next one 50 ms later
        seam.fail("fsync", errno.EIO)
        pub.send(publish(2), ({"c": "flush", "cid": "f"}, b""))
        await h.settle()
        assert failures(pub) == []  # waiting for the group commit
        await h.clock.advance(0.05)
        await h.until(lambda: log.write_outage is not None)
        await h.settle()
        [answer] = failures(pub)
        assert (answer["cid"], answer["reason"]) == ("f", "txlog full")
        assert "fsync failed" in answer["detail"]
        seam.heal()
        await h.clock.advance(1.0)
        await h.until(lambda: log.durable_seq == 2)


@scenario
async def test_an_instance_starts_without_room_for_preallocation_and_says_so(
    tmp_path: Path,
) -> None:
    """Preallocation is an optimisation: an instance whose disk cannot allocate its
    journals starts, takes publishes (the journal grows as it is written), and warns."""
    seam = FaultySeam("allocate", fail_at=1, err=errno.ENOSPC)
    async with EngineHarness(tmp_path, files=seam) as h:
        assert h.broker.ready
        [warned] = events(h, "preallocation_failed")
        assert warned["level"] == "warning" and warned["ready"] == 0
        [alert] = h.broker.operations.alerts()
        assert (alert["id"], alert["level"]) == ("txlog-preallocation", "warning")
        pub = await h.logon("pub")
        pub.send(*(publish(n, a="persisted") for n in range(1, 4)))
        await h.commit()
        assert [a["s"] for a in pub.acks("persisted")] == [3] and failures(pub) == []
