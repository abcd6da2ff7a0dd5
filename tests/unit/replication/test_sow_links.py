"""Replicated messages to a SOW topic update the destination's SOW.

Inbound runs enter the destination's publish pipeline like client publishes, so its SOW
stage keys and stores them: a ``publish`` is stored as it is, a ``delta_publish`` arrives
as the merged record the source logged (kind ``DELTA_PUBLISH``) and is stored merged. A
``sow_delete`` is not replicated in this version (server/replication/routing.py says why):
the link must stay up and keep streaming after one.
"""

from __future__ import annotations

from pathlib import Path

import orjson

from spool.server.clock import VirtualClock
from spool.server.txlog.format.record import Record, RecordKind
from tests.support.engine import EngineHarness, FakeClient
from tests.support.fabric import A, B, drive, fabric_of, scenario, xml
from tests.support.replication import MemoryFabric, destination
from tests.support.server import sow_topic

SOW = sow_topic("orders", "/id") + sow_topic("^md", durability="transient")


def _stored(h: EngineHarness, topic: str) -> dict[str, object]:
    store = h.broker.sow.topics.store(topic)
    if store is None:
        return {}
    return {rec.key: orjson.loads(rec.body) for rec in store.records()}


def _send(client: FakeClient, c: str, topic: str, doc: object, **header: object) -> None:
    client.send(({"c": c, "t": topic, **header}, orjson.dumps(doc)))


async def _logged(h: EngineHarness, kind: RecordKind) -> list[Record]:
    """The durable records of one kind in a broker's log."""
    txlog = h.broker.txlog
    assert txlog is not None
    return [r for r in await txlog.read_batch(txlog.first_seq, max_count=10_000) if r.kind == kind]


async def _delete(client: FakeClient, clock: VirtualClock, topic: str, key: str) -> int:
    """``sow_delete`` of one key; the ``records_deleted`` its stats ack reports."""
    cid = f"del-{key}"
    client.send(({"c": "sow_delete", "t": topic, "k": key, "cid": cid, "a": "stats"}, b""))
    await drive(clock, lambda: any(h.get("cid") == cid for h in client.acks("stats")))
    ack = next(h for h in client.acks("stats") if h.get("cid") == cid)
    return int(ack["records_deleted"])


def _oofs(client: FakeClient) -> list[tuple[str, str]]:
    return [
        (str(h.get("k")), str(h["reason"])) for h, _ in client.received() if h.get("c") == "oof"
    ]


@scenario
async def test_replicated_publishes_and_deltas_update_the_destination_sow(tmp_path: Path) -> None:
    configs = {
        "a": xml(tmp_path, "a", destination("b", [B]), sow=SOW),
        "b": xml(tmp_path, "b", destination("a", [A]), sow=SOW),
    }
    async with fabric_of(tmp_path, configs) as (_fabric, clock, h):
        a, b = h["a"], h["b"]
        for x, y in (("a", "b"), ("b", "a")):
            repl = h[x].broker.replication
            assert repl is not None
            await drive(clock, lambda r=repl, d=y: r.destinations[d].connected)
        watcher = await b.logon("watcher")
        watcher.send(({"c": "sow_and_subscribe", "t": "orders", "sub_id": "w", "o": "oof"}, b""))
        pa = await a.logon("pub-a")
        pb = await b.logon("pub-b")
        _send(pa, "publish", "orders", {"id": 1, "qty": 1, "px": 10}, s=1)
        _send(pa, "publish", "orders", {"id": 2, "qty": 2}, s=2)
        _send(pb, "publish", "orders", {"id": 3, "qty": 3}, s=1)
        _send(pa, "delta_publish", "orders", {"id": 1, "qty": 5}, s=3)
        _send(pa, "publish", "md.ibm", {"px": 1}, s=4, k="ibm")  # key from the k header
        want = {
            "1": {"id": 1, "qty": 5, "px": 10},
            "2": {"id": 2, "qty": 2},
            "3": {"id": 3, "qty": 3},
        }
        await drive(clock, lambda: _stored(b, "orders") == want and _stored(a, "orders") == want)
        await drive(clock, lambda: _stored(b, "md.ibm") == {"ibm": {"px": 1}})
        # B logged A's delta as the merged record, with A on its path
        txlog = b.broker.txlog
        assert txlog is not None
        await drive(clock, lambda: txlog.durable_seq == txlog.last_seq)
        deltas = [r for r in await txlog.read_batch(1, max_count=100)
                  if r.kind == RecordKind.DELTA_PUBLISH]  # fmt: skip
        assert [(orjson.loads(r.body), r.path) for r in deltas] == [
            ({"id": 1, "qty": 5, "px": 10}, ("a",))
        ]
        # a SOW subscriber on B heard of the replicated updates
        await drive(clock, lambda: any(hd.get("k") == "1" for hd, _ in watcher.deliveries("w")))
        # a sow query on B answers what A's clients wrote
        q = await b.logon("q")
        q.send(({"c": "sow", "t": "orders", "cid": "q1", "a": "completed"}, b""))
        await drive(clock, lambda: bool(q.acks("completed")))
        got = {hd["k"]: orjson.loads(body) for hd, body in q.new() if hd.get("c") == "sow"}
        assert got == want
        # a sow_delete on A removes the record on B too: B logged A's SOW_DELETE with A's
        # publisher identity and A on its path, and B's SOW subscriber heard "deleted"
        d = await a.logon("deleter")
        assert await _delete(d, clock, "orders", "2") == 1
        await drive(clock, lambda: "2" not in _stored(b, "orders"))
        await drive(clock, lambda: ("2", "deleted") in _oofs(watcher))
        await drive(clock, lambda: txlog.durable_seq == txlog.last_seq)
        gone = await _logged(b, RecordKind.SOW_DELETE)
        assert [(r.sow_key, r.pub_hash, r.pub_seq, r.path) for r in gone] == [
            ("2", a.broker.txlog.own_pub_hash, 1, ("a",))
        ]
        # and the other way; the links live on
        assert await _delete(pb, clock, "orders", "3") == 1
        await drive(clock, lambda: "3" not in _stored(a, "orders"))
        _send(pa, "publish", "orders", {"id": 4, "qty": 4}, s=5)
        await drive(clock, lambda: "4" in _stored(b, "orders"))
        assert (
            _stored(a, "orders")
            == _stored(b, "orders")
            == {
                "1": {"id": 1, "qty": 5, "px": 10},
                "4": {"id": 4, "qty": 4},
            }
        )
        for x, y in (("a", "b"), ("b", "a")):
            repl = h[x].broker.replication
            assert repl is not None and repl.destinations[y].connected


@scenario
async def test_a_delete_in_a_passthrough_loop_is_applied_once_and_does_not_loop(
    tmp_path: Path,
) -> None:
    """A <-> B, both passing everything through: A's delete reaches B once and does not
    come back to A (A is on its path); expirations stay where they happen."""
    sow = sow_topic("orders", "/id") + sow_topic("quotes", "/id", expiration="5s")
    both = {"passthrough": (".*",)}
    configs = {
        "a": xml(tmp_path, "a", destination("b", [B], **both), sow=sow),  # type: ignore[arg-type]
        "b": xml(tmp_path, "b", destination("a", [A], **both), sow=sow),  # type: ignore[arg-type]
    }
    async with fabric_of(tmp_path, configs) as (_fabric, clock, h):
        a, b = h["a"], h["b"]
        pa = await a.logon("pub-a")
        _send(pa, "publish", "orders", {"id": 1}, s=1)
        _send(pa, "publish", "orders", {"id": 2}, s=2)
        _send(pa, "publish", "quotes", {"id": 9}, s=3)
        await drive(clock, lambda: len(_stored(b, "orders")) == 2 and "9" in _stored(b, "quotes"))
        assert await _delete(pa, clock, "orders", "1") == 1
        await drive(clock, lambda: "1" not in _stored(b, "orders"))
        # both expire the quote from their own configuration; neither sends its expiration
        await drive(clock, lambda: not _stored(a, "quotes") and not _stored(b, "quotes"))
        # markers after the delete and the expirations, each way (the streams keep log order)
        _send(pa, "publish", "orders", {"id": 3}, s=4)
        pb = await b.logon("pub-b")
        _send(pb, "publish", "orders", {"id": 4}, s=1)
        await drive(clock, lambda: "3" in _stored(b, "orders") and "4" in _stored(a, "orders"))
        for x in (a, b):
            txlog = x.broker.txlog
            assert txlog is not None
            await drive(clock, lambda t=txlog: t.durable_seq == t.last_seq)
        on_a = await _logged(a, RecordKind.SOW_DELETE)
        on_b = await _logged(b, RecordKind.SOW_DELETE)
        assert [(r.sow_key, r.pub_hash, r.path) for r in on_a] == [
            ("1", a.broker.txlog.own_pub_hash, ()),
            ("9", 0, ()),
        ]
        assert sorted((r.sow_key, r.pub_hash, r.path) for r in on_b) == [
            ("1", a.broker.txlog.own_pub_hash, ("a",)),
            ("9", 0, ()),
        ]
        want = {"2": {"id": 2}, "3": {"id": 3}, "4": {"id": 4}}
        assert _stored(a, "orders") == _stored(b, "orders") == want


@scenario
async def test_a_resync_after_a_restart_does_not_apply_an_old_delete_again(
    tmp_path: Path,
) -> None:
    """B stops holding A's publish, delete and newer publish of one key, having acked
    only the first (acks are conflated over a second); A goes on. The resync starts after
    that ack, so A scans the delete again: B's holdings name it (A's own publisher
    identity on the delete) and it is skipped, not applied over the newer record."""
    one_way = {"exclude": "replicate", "sync": False}
    configs = {
        "a": xml(tmp_path, "a", destination("b", [B], **one_way), sow=SOW),  # type: ignore[arg-type]
        "b": xml(tmp_path, "b", sow=SOW, ack_interval="1s"),
    }
    fabric = MemoryFabric()
    clock = VirtualClock()

    def start(name: str, address: tuple[str, int]) -> EngineHarness:
        harness = EngineHarness(
            tmp_path / name, configs[name], clock=clock, connector=fabric.connector(name)
        )
        fabric.register(address, harness.broker)
        return harness

    a, b = start("a", A), start("b", B)
    await a.__aenter__()
    await b.__aenter__()
    try:
        link = a.broker.replication.destinations["b"]  # type: ignore[union-attr]
        pub = await a.logon("pub")
        _send(pub, "publish", "orders", {"id": 1, "v": 1}, s=1)
        await drive(clock, lambda: link.acked >= a.last_seq)  # the first ack goes at once
        assert await _delete(pub, clock, "orders", "1") == 1
        deleted_at = a.last_seq
        _send(pub, "publish", "orders", {"id": 1, "v": 2}, s=2)
        await drive(clock, lambda: _stored(b, "orders") == {"1": {"id": 1, "v": 2}})
        txlog_b = b.broker.txlog
        assert txlog_b is not None
        await drive(clock, lambda: txlog_b.durable_seq == txlog_b.last_seq)
        assert link.acked < deleted_at  # the next ack waits for the interval
        await b.__aexit__(None, None, None)  # B stops
        await drive(clock, lambda: not link.connected)
        _send(pub, "publish", "orders", {"id": 5}, s=3)  # what B lacks, in the same journal
        b = start("b", B)
        await b.__aenter__()
        assert _stored(b, "orders") == {"1": {"id": 1, "v": 2}}  # recovered from its log
        await drive(clock, lambda: link.connected and link.acked >= a.last_seq)
        assert link.msgs_out == 4  # the held delete and publish were scanned, not sent
        await drive(clock, lambda: "5" in _stored(b, "orders"))
        assert _stored(b, "orders") == {"1": {"id": 1, "v": 2}, "5": {"id": 5}}
        assert len(await _logged(b, RecordKind.SOW_DELETE)) == 1
    finally:
        await b.__aexit__(None, None, None)
        await a.__aexit__(None, None, None)
        await fabric.close()
