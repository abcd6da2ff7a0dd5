"""A replicated queue's message published on two instances (two in-process brokers over
the memory fabric, virtual clock): a publisher fails over while the instances cannot
reach each other and sends its messages again, with the same sequences, to the second
one. Each instance takes its copy as its own (it owns it and delivers it) until the
copies meet; from then on every copy names one owner (the higher instance name), the
other instance delivers none of them again, and a restart keeps that (docs/queues.md
"A message published on two instances")."""

from __future__ import annotations

from pathlib import Path

from spool.server.bookmarks import format_bookmark, pub_hash
from spool.server.clock import VirtualClock
from spool.server.queues.ownership import Grant, Ownership
from spool.server.queues.records import decode_transfers
from spool.server.txlog.format.record import RecordKind
from tests.support.engine import EngineHarness, FakeClient
from tests.support.fabric import A, B, drive, publish, scenario, xml
from tests.support.replication import MemoryFabric, destination

QUEUE = (
    "<Queue><Name>work</Name><MessageType>json</MessageType>"
    "<UnderlyingTopic>work-in</UnderlyingTopic><LeasePeriod>30s</LeasePeriod>"
    "<MaxPerSubscriptionBacklog>5</MaxPerSubscriptionBacklog></Queue>"
)
SEQS = range(1, 6)
BMS = [format_bookmark(pub_hash("qpub"), s) for s in SEQS]


def _configs(tmp_path: Path) -> dict[str, str]:
    return {
        "a": xml(tmp_path, "a", destination("b", [B], passthrough=(".*",)), sow=QUEUE),
        "b": xml(tmp_path, "b", destination("a", [A], passthrough=(".*",)), sow=QUEUE),
    }


def _own(h: EngineHarness) -> Ownership:
    own = h.broker.queues.queues["work"].ownership
    assert own is not None
    return own


async def _consumer(h: EngineHarness, name: str) -> FakeClient:
    client = await h.logon(name)
    client.send(({"c": "subscribe", "t": "work", "sub_id": "q", "o": "max_backlog=5"}, b""))
    return client


def _ack(client: FakeClient, bms: list[str]) -> None:
    client.send(({"c": "sow_delete", "t": "work", "bm": ",".join(bms)}, b""))


async def _claims(h: EngineHarness) -> list[Grant]:
    """The first-owner claims (grants at epoch 0) the instance logged itself. Its
    transfer requests are left out: whether the lease timer asked for a message before
    the test looks depends on how far the virtual clock moved meanwhile."""
    txlog = h.broker.txlog
    assert txlog is not None
    await h.commit()
    out: list[Grant] = []
    seq = txlog.first_seq
    while batch := await txlog.read_batch(seq, max_count=10_000):
        for r in batch:
            if r.kind == RecordKind.QUEUE_TRANSFER and not r.path:
                out.extend(
                    t for t in decode_transfers(r.body) if isinstance(t, Grant) and not t.epoch
                )
        seq = batch[-1].seq + 1
    return out


@scenario
async def test_a_message_published_on_both_instances_gets_one_owner(tmp_path: Path) -> None:
    configs = _configs(tmp_path)
    fabric = MemoryFabric()
    clock = VirtualClock()
    h = {
        n: EngineHarness(tmp_path / n, configs[n], clock=clock, connector=fabric.connector(n))
        for n in ("a", "b")
    }
    fabric.register(A, h["a"].broker)
    fabric.register(B, h["b"].broker)
    for harness in h.values():
        await harness.__aenter__()
    try:
        repl_a, repl_b = h["a"].broker.replication, h["b"].broker.replication
        assert repl_a is not None and repl_b is not None
        await drive(clock, lambda: all(d.connected for r in (repl_a, repl_b)
                                       for d in r.destinations.values()))  # fmt: skip
        # b goes out of reach (a cannot send it anything, nor b to a)
        fabric.cut(B, source="a")
        fabric.cut(A, source="b")
        await drive(clock, lambda: "a" not in repl_b.inbound and "b" not in repl_a.inbound)

        # the publisher sends 1-5 to a, which logs them and delivers them (its own)
        ca = await _consumer(h["a"], "ca")
        qpub = await h["a"].logon("qpub")
        publish(qpub, "work-in", SEQS, acks="processed")
        await drive(clock, lambda: len(ca.deliveries("q")) == 5)
        # no persisted ack (b, a's sync destination, is out of reach): the publisher
        # fails over to b and sends 1-5 again, the same sequences
        await qpub.session.close()
        qpub_b = await h["b"].logon("qpub")
        publish(qpub_b, "work-in", SEQS, acks="processed")
        cb = await _consumer(h["b"], "cb")
        await drive(clock, lambda: len(cb.deliveries("q")) == 5)
        assert [str(hd["bm"]) for hd, _ in cb.deliveries("q")] == BMS
        # the window before the copies meet: each instance owns its copy
        assert all(_own(h["a"]).owner(bm) == "a" for bm in BMS)
        assert all(_own(h["b"]).owner(bm) == "b" for bm in BMS)
        _ack(cb, BMS[:2])  # b's consumer processes 1 and 2
        await drive(clock, lambda: h["b"].broker.queues.info("work").depth == 3)

        # the instances meet again: b's copies (then b's acks) reach a, a's reach b
        fabric.heal(B, source="a")
        fabric.heal(A, source="b")
        await drive(clock, lambda: h["a"].broker.queues.info("work").depth == 3
                    and all(_own(h["a"]).owner(bm) == "b" for bm in BMS[2:]))  # fmt: skip
        await drive(clock, lambda: all(_own(h["b"]).view(bm) is not None for bm in BMS[2:]))
        # one owner everywhere: b (the higher name); a logged what it learned
        assert all(_own(h["b"]).owner(bm) == "b" for bm in BMS[2:])
        assert h["a"].broker.queues.info("work").owned == 0
        assert await _claims(h["a"]) == [Grant(bm, "b", 0) for bm in BMS]
        assert await _claims(h["b"]) == []
        # a's consumer goes: its leases end, and a delivers none of them again (before,
        # a went on owning its copies and gave them to its next consumer while b's
        # consumer held them: processed twice at once)
        await ca.session.close()
        ca2 = await _consumer(h["a"], "ca2")
        await clock.advance(5.0)
        await drive(clock, lambda: True)
        assert ca2.deliveries("q") == []

        # a restarts: its log keeps what it learned from b's copies (dropped, never
        # sent again)
        await h["a"].__aexit__(None, None, None)
        h["a"] = EngineHarness(
            tmp_path / "a", configs["a"], clock=clock, connector=fabric.connector("a")
        )
        fabric.register(A, h["a"].broker)
        await h["a"].__aenter__()
        assert all(_own(h["a"]).owner(bm) == "b" for bm in BMS[2:])
        ca3 = await _consumer(h["a"], "ca3")
        await clock.advance(5.0)
        await drive(clock, lambda: True)
        assert ca3.deliveries("q") == []

        # b's consumer processes the rest: gone from both copies, each processed once
        # after the copies met
        _ack(cb, BMS[2:])
        await drive(clock, lambda: h["a"].broker.queues.info("work").depth == 0
                    and h["b"].broker.queues.info("work").depth == 0)  # fmt: skip
        assert ca3.deliveries("q") == [] and len(cb.deliveries("q")) == 5
        ia, ib = h["a"].broker.queues.info("work"), h["b"].broker.queues.info("work")
        assert (ia.transferred_in, ia.transferred_out) == (0, 0)
        assert (ib.transferred_in, ib.transferred_out) == (0, 0)
    finally:
        for harness in h.values():
            await harness.__aexit__(None, None, None)
        await fabric.close()
