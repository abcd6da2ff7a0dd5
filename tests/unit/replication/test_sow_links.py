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

from server.txlog.record import RecordKind
from tests.support.engine import EngineHarness, FakeClient
from tests.support.fabric import A, B, drive, fabric_of, scenario, xml
from tests.support.replication import destination
from tests.support.server import sow_topic

SOW = sow_topic("orders", "/id") + sow_topic("^md", durability="transient")


def _stored(h: EngineHarness, topic: str) -> dict[str, object]:
    store = h.broker.sow.topics.store(topic)
    if store is None:
        return {}
    return {rec.key: orjson.loads(rec.body) for rec in store.records()}


def _send(client: FakeClient, c: str, topic: str, doc: object, **header: object) -> None:
    client.send(({"c": c, "t": topic, **header}, orjson.dumps(doc)))


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
        watcher.send(({"c": "sow_and_subscribe", "t": "orders", "sub_id": "w"}, b""))
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
        # a sow_delete on A stays on A (not replicated in this version); the link lives on
        d = await a.logon("deleter")
        d.send(({"c": "sow_delete", "t": "orders", "k": "2", "cid": "d", "a": "stats"}, b""))
        await drive(clock, lambda: bool(d.acks("stats")))
        _send(pa, "publish", "orders", {"id": 4, "qty": 4}, s=5)
        await drive(clock, lambda: "4" in _stored(b, "orders"))
        assert "2" not in _stored(a, "orders") and "2" in _stored(b, "orders")
        repl_a = a.broker.replication
        assert repl_a is not None and repl_a.destinations["b"].connected
