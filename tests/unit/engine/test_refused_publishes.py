"""A publish the log refuses for now (``txlog full``) keeps its publisher's order: the
broker writes nothing later of that publisher from that connection until the refused
sequence comes again, and the HA client keeps it and sends it again, so every message it
holds ends in the log exactly once, in order, even when the disk frees between a refused
publish and the next (docs/protocol.md "When the transaction log refuses writes",
docs/ha-client.md "When a broker refuses writes")."""

from __future__ import annotations

import errno
from pathlib import Path

from spool.server.bookmarks import pub_hash
from spool.server.client import (
    DefaultServerChooser,
    FixedDelayStrategy,
    HAClient,
    MemoryPublishStore,
)
from spool.server.protocol.errors import TxlogFull
from spool.server.txlog import TransactionLog
from tests.support.engine import EngineHarness
from tests.support.faults import FaultySeam
from tests.unit.engine.outage import RETRY, failures, next_retry, publish, scenario, txlog_of


async def logged(log: TransactionLog, name: str) -> list[tuple[int, bytes]]:
    """``(sequence, body)`` of every record of publisher ``name`` in the log, in order."""
    ph = pub_hash(name)
    out: list[tuple[int, bytes]] = []
    seq = log.first_seq
    while batch := await log.read_batch(seq, max_count=500, upto_seq=log.last_seq):
        out.extend((r.pub_seq, r.body) for r in batch if r.pub_hash == ph)
        seq = batch[-1].seq + 1
    return out


async def disk_full(h: EngineHarness, seam: FaultySeam, log: TransactionLog) -> None:
    """Fill the disk: the group commit of what is appended fails, the log refuses writes."""
    seam.fail("write", errno.ENOSPC)
    await refusing(h, log)


async def refusing(h: EngineHarness, log: TransactionLog) -> None:
    await h.clock.advance(0.001)  # the group commit is due
    await h.until(lambda: log.write_outage is not None)


async def retry_until_written(h: EngineHarness, log: TransactionLog) -> None:
    """The disk has room again: advance to the log's retry and let it write what it kept."""
    await h.clock.advance(await next_retry(h, log) - h.clock.time() + 0.001)
    await h.until(lambda: log.write_outage is None and log.durable_seq == log.last_seq)
    await h.settle()


@scenario
async def test_later_sequences_wait_for_the_refused_one(tmp_path: Path) -> None:
    seam = FaultySeam()
    async with EngineHarness(tmp_path, files=seam, txlog_extra=RETRY) as h:
        log = txlog_of(h)
        pub = await h.logon("pub")
        other = await h.logon("other")
        pub.send(*(publish(n, a="persisted") for n in (1, 2, 3)))
        await h.commit()
        # 4 and 5 are taken, then the commit fails: they are kept and written later
        pub.send(*(publish(n, a="persisted") for n in (4, 5)))
        await disk_full(h, seam, log)
        # 6 and 7 arrive while the log refuses writes: refused, not kept
        pub.send(publish(6, a="processed", cid="p6"), publish(7, a="processed", cid="p7"))
        await h.settle()
        refused = [(a["cid"], a["reason"], a["s"]) for a in failures(pub) if a["a"] == "processed"]
        assert refused == [("p6", "txlog full", 6), ("p7", "txlog full", 7)]
        seam.heal()
        await retry_until_written(h, log)
        assert log.write_outage is None and pub.acks("persisted")[-1]["s"] == 5
        # the disk is back, but 8 would make 6 impossible to write: refused, saying why
        pub.send(publish(8, a="processed", cid="p8"))
        # another publisher is not held
        other.send(publish(1, a="processed", cid="o1"))
        await h.settle()
        [held] = [a for a in failures(pub) if a.get("cid") == "p8"]
        assert (held["reason"], held["s"]) == ("txlog full", 8)
        assert "sequence 6 of this publisher was refused" in held["detail"]
        assert failures(other) == []
        # sent again from 6, in order: all written, once, in order
        pub.send(*(publish(n, a="persisted") for n in (6, 7, 8)))
        await h.commit()
        assert pub.acks("persisted")[-1]["s"] == 8
        assert await logged(log, "pub") == [(n, b'{"n":%d}' % n) for n in range(1, 9)]


@scenario
async def test_a_hold_ends_with_the_connection_and_below_it_nothing_changes(
    tmp_path: Path,
) -> None:
    """Sequences below the held one are written as usual; a duplicate is a duplicate; a new
    connection (a new logon) is not held: a plain client that does not resend chooses."""
    seam = FaultySeam()
    async with EngineHarness(tmp_path, files=seam, txlog_extra=RETRY) as h:
        log = txlog_of(h)
        pub = await h.logon("pub")
        pub.send(*(publish(n) for n in (1, 2)))
        await h.commit()
        pub.send(publish(3))  # taken; its commit fails: kept and written later
        await disk_full(h, seam, log)
        pub.send(publish(6, a="processed", cid="p6"))
        await h.settle()
        seam.heal()
        await retry_until_written(h, log)
        # 4 and 5 are below the hold (6): written; 3 again is a duplicate; 7 waits for 6
        pub.send(
            publish(4, a="processed", cid="p4"),
            publish(5, a="processed", cid="p5"),
            publish(3, a="processed", cid="p3"),
            publish(7, a="processed", cid="p7"),
        )
        await h.commit()
        answers = {a["cid"]: a.get("reason") for a in pub.acks("processed")}
        assert answers == {"p6": "txlog full", "p4": None, "p5": None, "p3": "duplicate",
                           "p7": "txlog full"}  # fmt: skip
        assert [s for s, _ in await logged(log, "pub")] == [1, 2, 3, 4, 5]
        # a new connection of the same publisher starts without a hold (6 is given up)
        await pub.session.close("bye", 1000)
        again = await h.logon("pub")
        again.send(publish(7, a="processed", cid="q7"))
        await h.commit()
        assert [a.get("status") for a in again.acks("processed")] == ["success"]
        assert [s for s, _ in await logged(log, "pub")] == [1, 2, 3, 4, 5, 7]


@scenario
async def test_publishes_the_broker_numbers_hold_nothing(tmp_path: Path) -> None:
    """A publish without a sequence (the broker numbers it) refused while the log refuses
    writes leaves no hold: the next one is written once the disk frees."""
    seam = FaultySeam()
    async with EngineHarness(tmp_path, files=seam, txlog_extra=RETRY) as h:
        log = txlog_of(h)
        pub = await h.logon("pub")
        pub.send(({"c": "publish", "t": "orders"}, b'{"n":1}'))
        await disk_full(h, seam, log)
        pub.send(({"c": "publish", "t": "orders", "a": "processed", "cid": "p2"}, b'{"n":2}'))
        await h.settle()
        assert [a["reason"] for a in failures(pub)] == ["txlog full"]
        assert pub.session.origin is not None and pub.session.origin.held == {}
        seam.heal()
        await retry_until_written(h, log)
        pub.send(({"c": "publish", "t": "orders", "a": "processed", "cid": "p3"}, b'{"n":3}'))
        await h.commit()
        assert [b for _, b in await logged(log, "pub")] == [b'{"n":1}', b'{"n":3}']


@scenario
async def test_the_ha_client_resends_what_was_refused_when_the_disk_frees_at_the_worst_moment(
    tmp_path: Path,
) -> None:
    """The client hears of the refusals only after the disk freed and its next publishes
    reached the broker: without the broker's hold those would be written past the refused
    ones, and their persisted ack would empty the store of messages never written."""
    seam = FaultySeam()
    async with EngineHarness(tmp_path, files=seam, txlog_extra=RETRY) as h:
        log = txlog_of(h)
        errors: list[BaseException] = []
        client = HAClient(
            "ha-pub", publish_store=MemoryPublishStore(),
            chooser=DefaultServerChooser(["ws://engine/amps/json"]),
            delay=FixedDelayStrategy(0.5, clock=h.clock.monotonic),
            connector=h.client_connector, sleep=h.clock.sleep,
        )  # fmt: skip
        client.exception_listener = errors.append
        await client.connect_and_logon()
        link = h.links[-1]
        store = client.publish_store
        for n in range(1, 4):
            client.publish("orders", b'{"n":%d}' % n)
        await h.until(lambda: log.last_seq == 3)
        await h.commit()
        await h.until(lambda: store.unpersisted_count() == 0)

        # 4 and 5 are taken before the disk is known full (kept, written later)
        seam.fail("write", errno.ENOSPC)
        for n in (4, 5):
            client.publish("orders", b'{"n":%d}' % n)
        await h.until(lambda: log.last_seq == 5)
        await refusing(h, log)
        # the client stops hearing the broker: 6..8 are refused, the client does not know
        link.stop_reading()
        for n in (6, 7, 8):
            client.publish("orders", b'{"n":%d}' % n)
        await h.settle()
        origin = link.session.origin
        assert origin is not None and origin.held == {pub_hash("ha-pub"): 6}
        # the disk frees, the log writes 4 and 5, and then 9..10 arrive: the worst moment
        seam.heal()
        await retry_until_written(h, log)
        for n in (9, 10):
            client.publish("orders", b'{"n":%d}' % n)
        await h.settle()
        assert [s for s, _ in await logged(log, "ha-pub")] == [1, 2, 3, 4, 5]
        assert store.unpersisted_count() == 7  # 4..10: the client has heard nothing since
        # the client hears it all: 6.. are kept, sent again in order, and written once
        link.resume_reading()
        for _ in range(20):
            if store.unpersisted_count() == 0:
                break
            await h.clock.advance(0.5)  # the delay strategy's wait, then the group commit
            await h.until(lambda: log.durable_seq == log.last_seq)
            await h.settle()
        assert await logged(log, "ha-pub") == [(n, b'{"n":%d}' % n) for n in range(1, 11)]
        assert store.unpersisted_count() == 0 and store.last_discarded == 10
        # every refusal reached the exception listener
        assert errors and all(isinstance(e, TxlogFull) for e in errors)
        assert len(h.links) == 1  # on the same connection
        await client.close()
