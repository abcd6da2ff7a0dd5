"""SOW subscriptions on the in-process engine (virtual clock): atomic query-and-subscribe,
oof, deltas, conflation and expiration at exact virtual times."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from spool.server.txlog.format.record import RecordKind
from tests.support.engine import FakeClient
from tests.support.server import sow_topic
from tests.unit.sow.test_engine_sow import ORDERS, harness, pub, scenario


def view(c: FakeClient) -> list[tuple[str, str, Any]]:
    """(command, key, body or reason) of what a client received, acks left out."""
    out: list[tuple[str, str, Any]] = []
    for hd, body in c.new():
        cmd = hd["c"]
        if cmd in ("sow", "publish"):
            out.append((cmd, hd.get("k", ""), orjson.loads(body)))
        elif cmd == "oof":
            out.append(("oof", hd.get("k", ""), hd["reason"]))
        elif cmd in ("group_begin", "group_end"):
            out.append((cmd, "", hd["qid"]))
    return out


@scenario
async def test_updates_during_the_snapshot_come_after_its_end(tmp_path: Path) -> None:
    async with harness(tmp_path, sow=ORDERS()) as h:
        p = await h.logon("pub")
        p.send(*[pub("orders", {"id": i, "v": 0}) for i in range(3)])
        await h.settle()
        c = await h.logon("c")
        c.send(({"c": "sow_and_subscribe", "t": "orders", "sub_id": "s", "a": "processed"}, b""))
        # published before the snapshot's stream ran: after group_end, not lost, not doubled
        p.send(pub("orders", {"id": 1, "v": 1}), pub("orders", {"id": 9, "v": 1}))
        await h.settle()
        assert view(c) == [
            ("group_begin", "", "s"),
            ("sow", "0", {"id": 0, "v": 0}),
            ("sow", "1", {"id": 1, "v": 0}),
            ("sow", "2", {"id": 2, "v": 0}),
            ("group_end", "", "s"),
            ("publish", "1", {"id": 1, "v": 1}),
            ("publish", "9", {"id": 9, "v": 1}),
        ]
        p.send(pub("orders", {"id": 2, "v": 2}))
        await h.settle()
        assert view(c) == [("publish", "2", {"id": 2, "v": 2})]


@scenario
async def test_oof_when_a_record_stops_matching_is_deleted_or_expires(tmp_path: Path) -> None:
    async with harness(tmp_path, sow=ORDERS()) as h:
        p = await h.logon("pub")
        p.send(pub("orders", {"id": 1, "q": 10}), pub("orders", {"id": 2, "q": 10}),
               pub("orders", {"id": 3, "q": 1}))  # fmt: skip
        await h.settle()
        c = await h.logon("c")
        c.send(({"c": "sow_and_subscribe", "t": "orders", "sub_id": "s", "f": "/q > 5",
                 "o": "oof"}, b""))  # fmt: skip
        await h.settle()
        assert [k for cmd, k, _ in view(c) if cmd == "sow"] == ["1", "2"]
        # 1 no longer matches: oof match; 3 starts to match: delivered; 3 is dropped
        p.send(pub("orders", {"id": 1, "q": 1}), pub("orders", {"id": 3, "q": 7}),
               pub("orders", {"id": 4, "q": 0}))  # fmt: skip
        await h.settle()
        assert view(c) == [("oof", "1", "match"), ("publish", "3", {"id": 3, "q": 7})]
        # 1 is not held any more: its deletion means nothing; 2's does
        d = await h.logon("d")
        d.send(({"c": "sow_delete", "t": "orders", "k": "1,2"}, b""))
        await h.settle()
        assert view(c) == [("oof", "2", "deleted")]
        # 3 expires 5 s after this update
        p.send(pub("orders", {"id": 3, "q": 8}, e=5))
        await h.settle()
        assert view(c) == [("publish", "3", {"id": 3, "q": 8})]
        t0 = h.clock.time()
        await h.clock.advance(4.999)
        assert view(c) == []
        await h.clock.advance(0.001)
        assert view(c) == [("oof", "3", "expired")]
        assert h.clock.time() - t0 == 5.0
        store = h.broker.sow.topics.store("orders")
        assert store is not None and store.keys() == ["4"]


@scenario
async def test_topic_expiration_and_a_message_lifetime_on_the_virtual_clock(
    tmp_path: Path,
) -> None:
    async with harness(tmp_path, sow=ORDERS(expiration="10s")) as h:
        p = await h.logon("pub")
        p.send(pub("orders", {"id": 1}))
        await h.clock.advance(2)
        p.send(pub("orders", {"id": 2}, e=3), pub("orders", {"id": 3}, e=0))
        await h.settle()
        store = h.broker.sow.topics.store("orders")
        assert store is not None
        await h.clock.advance(2.999)
        assert sorted(store.keys()) == ["1", "2", "3"]
        await h.clock.advance(0.001)  # t=5: 2 expires (its own 3 s)
        assert sorted(store.keys()) == ["1", "3"]
        p.send(pub("orders", {"id": 1, "again": True}))  # t=5: 1 lives until t=15
        await h.clock.advance(9.999)
        assert sorted(store.keys()) == ["1", "3"]
        await h.clock.advance(0.001)
        assert store.keys() == ["3"]  # e=0: never
        assert h.broker.sow.expirer.expired == 2
        await h.commit()
        txlog = h.broker.txlog
        assert txlog is not None

        deleted = [r.sow_key for r in await txlog.read_batch(1) if r.kind == RecordKind.SOW_DELETE]
        assert deleted == ["2", "1"]


@scenario
async def test_delta_subscribers_get_changed_fields_and_the_key(tmp_path: Path) -> None:
    async with harness(tmp_path, sow=ORDERS()) as h:
        p = await h.logon("pub")
        p.send(pub("orders", {"id": 1, "px": {"bid": 1, "ask": 2}, "n": "a"}))
        await h.settle()
        c = await h.logon("c")
        c.send(({"c": "sow_and_delta_subscribe", "t": "orders", "sub_id": "s"}, b""))
        c.send(({"c": "delta_subscribe", "t": "orders", "sub_id": "d"}, b""))
        await h.settle()
        c.new()
        p.send(pub("orders", {"id": 1, "px": {"bid": 1, "ask": 3}, "n": "a"}))
        p.send(pub("orders", {"id": 1, "px": {"bid": 1, "ask": 3}, "n": "a"}))  # no change
        p.send(pub("orders", {"id": 1, "n": "b"}))  # px dropped: whole record
        await h.settle()
        got = [(hd["sids"], orjson.loads(b)) for hd, b in c.new() if hd["c"] == "publish"]
        assert got == [
            # the plain delta subscription did not hold the record yet: whole
            ("s", {"px": {"ask": 3}, "id": 1}),
            ("d", {"id": 1, "px": {"bid": 1, "ask": 3}, "n": "a"}),
            ("s", {"id": 1, "n": "b"}),
            ("d", {"id": 1, "n": "b"}),
        ]


@scenario
async def test_conflation_delivers_the_latest_state_once_per_window(tmp_path: Path) -> None:
    async with harness(tmp_path, sow=ORDERS()) as h:
        c = await h.logon("c")
        c.send(({"c": "subscribe", "t": "orders", "sub_id": "s", "o": "conflation=1s,oof"}, b""))
        p = await h.logon("pub")
        await h.settle()
        for v in range(3):
            p.send(pub("orders", {"id": 1, "v": v}))
            await h.clock.advance(0.25)
        p.send(pub("orders", {"id": 2, "v": 0}))
        assert view(c) == []
        await h.clock.advance(0.25)  # 1 s after the first update of key 1
        assert view(c) == [("publish", "1", {"id": 1, "v": 2})]
        await h.clock.advance(0.749)
        assert view(c) == []
        await h.clock.advance(0.001)
        assert view(c) == [("publish", "2", {"id": 2, "v": 0})]
        # made and deleted in one window: never mentioned
        p.send(pub("orders", {"id": 3}))
        d = await h.logon("d")
        d.send(({"c": "sow_delete", "t": "orders", "k": "3"}, b""))
        await h.clock.advance(1)
        assert view(c) == []


@scenario
async def test_regex_sow_and_subscribe_spans_topics_made_later(tmp_path: Path) -> None:
    async with harness(tmp_path, sow=sow_topic("^md\\.", "/sym", durability="transient")) as h:
        p = await h.logon("pub")
        p.send(pub("md.a", {"sym": "X", "p": 1}))
        await h.settle()
        c = await h.logon("c")
        c.send(({"c": "sow_and_subscribe", "t": "^md\\.", "sub_id": "s"}, b""))
        await h.settle()
        p.send(pub("md.b", {"sym": "Y", "p": 2}))
        await h.settle()
        got = [(hd["c"], hd["t"], hd.get("k")) for hd, _ in c.received()
               if hd["c"] in ("sow", "publish")]  # fmt: skip
        assert got == [("sow", "md.a", "X"), ("publish", "md.b", "Y")]


@scenario
async def test_unsubscribe_and_replace_of_sow_subscriptions(tmp_path: Path) -> None:
    async with harness(tmp_path, sow=ORDERS()) as h:
        c = await h.logon("c")
        c.send(({"c": "sow_and_subscribe", "t": "orders", "sub_id": "s"}, b""))
        c.send(({"c": "subscribe", "t": "orders", "sub_id": "s", "f": "/v = 1",
                 "o": "replace", "a": "processed", "cid": "r"}, b""))  # fmt: skip
        await h.settle()
        assert c.acks("processed")[0]["status"] == "success"
        assert len(h.broker.sow.delivery) == 1
        p = await h.logon("pub")
        p.send(pub("orders", {"id": 1, "v": 0}), pub("orders", {"id": 2, "v": 1}))
        await h.settle()
        assert [k for cmd, k, _ in view(c) if cmd == "publish"] == ["2"]
        c.send(({"c": "unsubscribe", "sub_id": "s", "a": "processed", "cid": "u"}, b""))
        await h.settle()
        assert len(h.broker.sow.delivery) == 0 and not c.session.subs
        p.send(pub("orders", {"id": 2, "v": 1}))
        await h.settle()
        assert [cmd for cmd, _, _ in view(c)] == []
