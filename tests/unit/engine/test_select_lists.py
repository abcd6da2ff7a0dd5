"""Select lists on a real broker in this process: live and bookmark subscriptions get
the projection of each message, filters read the whole message, a message is projected
once per distinct select list, and the commands that cannot honour one refuse it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from spool.server.clock import VirtualClock
from spool.server.fanout import FanOut
from spool.server.ports import AppendedRun, Origin
from spool.server.protocol.options import parse_subscribe_options
from spool.server.protocol.selection import projection_count
from spool.server.router import Router
from spool.server.subscription import SessionSubscription
from spool.server.txlog.format.record import RecordKind
from spool.server.wire import topic_json
from tests.support.engine import EngineHarness, FakeClient, scenario
from tests.support.server import sow_topic
from tests.unit.engine.test_seams import Peer

ORDERS = [
    {"id": i, "px": 1.5 * i, "qty": 10 * i, "meta": {"src": "x", "note": "n"}} for i in range(4)
]


def publish(topic: str, body: object) -> tuple[dict[str, Any], bytes]:
    return {"c": "publish", "t": topic}, orjson.dumps(body)


def subscribe(topic: str, sub_id: str, **header: Any) -> tuple[dict[str, Any], bytes]:
    return {"c": "subscribe", "t": topic, "sub_id": sub_id, "a": "processed", **header}, b""


def got(client: FakeClient, sub_id: str) -> list[object]:
    return [orjson.loads(b) for _, b in client.deliveries(sub_id)]


@scenario
async def test_live_and_replay_deliver_the_selected_fields(tmp_path: Path) -> None:
    async with EngineHarness(tmp_path) as h:
        sub = await h.logon("sub")
        sub.send(
            subscribe("md", "few", o="select=[-/,+/id,+/meta/src]"),
            subscribe("md", "most", o="select=[-/meta]", f="/meta/note = 'n' AND /qty > 10"),
            subscribe("md", "all"),
        )
        await h.settle()
        pub = await h.logon("pub")
        pub.send(*(publish("md", o) for o in ORDERS))
        await h.commit()
        await h.settle()
        assert got(sub, "few") == [{"id": i, "meta": {"src": "x"}} for i in range(4)]
        # the filter read /meta, which is not delivered
        assert got(sub, "most") == [{"id": i, "px": 1.5 * i, "qty": 10 * i} for i in (2, 3)]
        assert got(sub, "all") == ORDERS
        # a message is sent once per select list on the connection: "all" alone has its own
        assert all(h_["sids"] in ("few", "most", "all") for h_, _ in sub.deliveries())

        replay = await h.logon("replay")
        replay.send(
            subscribe("md", "r", bm="0", o="select=[-/,+/px]", f="/id >= 1"),
            subscribe("md", "whole", bm="0"),
        )
        await h.until(lambda: len(replay.deliveries("r")) == 3)
        await h.until(lambda: len(replay.deliveries("whole")) == 4)
        assert got(replay, "r") == [{"px": 1.5 * i} for i in (1, 2, 3)]
        assert got(replay, "whole") == ORDERS
        # the replay goes on live, still selecting
        pub.send(publish("md", {"id": 9, "px": 9.0, "qty": 1}))
        await h.commit()
        await h.until(lambda: len(replay.deliveries("r")) == 4)
        assert got(replay, "r")[-1] == {"px": 9.0}
        assert [hd["bm"] for hd, _ in replay.deliveries("r")] == [
            hd["bm"] for hd, _ in replay.deliveries("whole")[1:]
        ]


QUEUE = (
    "<Queue><Name>work</Name><MessageType>json</MessageType>"
    "<UnderlyingTopic>work-in</UnderlyingTopic><LeasePeriod>1h</LeasePeriod></Queue>"
)


@scenario
async def test_refusals(tmp_path: Path) -> None:
    async with EngineHarness(tmp_path, sow=sow_topic("orders", "/id") + QUEUE) as h:
        c = await h.logon("c")
        c.send(
            subscribe("md", "s1", cid="twice", o="select=[+/a,+/a]"),
            subscribe("md", "s2", cid="empty", o="select=[]"),
            subscribe("orders", "s3", cid="form", o="select=[a]"),
            ({"c": "sow", "t": "orders", "cid": "path", "a": "processed", "o": "select=[+/a//b]"},
             b""),
            subscribe("work", "s4", cid="queue", o="select=[-/,+/a]"),
            subscribe("md", "s5", cid="ok", o="select=[-/,+/a]"),
        )  # fmt: skip
        await h.settle()
        refused = [a for a in c.acks("processed") if a.get("status") == "failure"]
        assert [(a["cid"], a["reason"]) for a in refused] == [
            (cid, "invalid options") for cid in ("twice", "empty", "form", "path", "queue")
        ]
        details = [str(a.get("detail", "")) for a in refused]
        for detail, words in zip(
            details,
            ("listed twice", "empty", "unknown select item", "/a/b", "not available on a queue"),
            strict=True,
        ):
            assert words in detail, (detail, words)
        assert [a["cid"] for a in c.acks("processed") if a["status"] == "success"] == ["ok"]
        assert set(c.session.subs) == {"s5"}


def _sub(peer: Peer, sub_id: str, options: str, flt: str | None = None) -> SessionSubscription:
    from spool.server.expr import compile_filter

    return SessionSubscription(
        outbound=peer, client="c", user=None, sub_id=sub_id, topic="t", pattern=None,
        filter=compile_filter(flt) if flt else None, filter_text=flt,
        options=parse_subscribe_options(options), sid_bytes=orjson.dumps(sub_id),
    )  # fmt: skip


class _NoAuth:
    enabled = False

    def can_read(self, user: object, topic: str) -> bool:
        return True

    def can_write(self, user: object, topic: str) -> bool:
        return True


def _run(bodies: list[bytes]) -> AppendedRun:
    return AppendedRun(
        topic="t", topic_literal=topic_json("t"), origin=Origin("client", "p", None, None),
        pub_hash=5, pub_seqs=list(range(1, len(bodies) + 1)), bodies=bodies, first_seq=1,
        timestamp_us=1_700_000_000_000_000, corr_ids=None, sow_keys=None,
        kind=RecordKind.PUBLISH, publisher_name="p",
    )  # fmt: skip


def test_a_message_is_projected_once_per_select_list() -> None:
    router = Router()
    peers = [Peer() for _ in range(5)]
    same = "select=[-/,+/n]"
    subs = [
        _sub(peers[0], "a", same),
        _sub(peers[0], "b", same, "/n % 2 = 0"),  # shares messages with "a"
        _sub(peers[0], "c", "select=[-/x]"),  # another list: its own messages
        _sub(peers[0], "d", ""),  # none: the whole messages, apart
        *(_sub(p, "e", same, "/n > 1") for p in peers[1:]),
    ]
    for sub in subs:
        router.add(sub)
    bodies = [b'{"n":%d,"x":"%d"}' % (n, n) for n in range(4)]
    before = projection_count()
    FanOut(router, _NoAuth(), VirtualClock()).appended(_run(bodies))
    # four messages, two lists: eight projections, whatever the number of subscribers
    assert projection_count() - before == 8
    msgs = [(m["sids"], orjson.loads(b)) for m, b in peers[0].messages()]
    assert msgs == [
        ("d", {"n": 0, "x": "0"}), ("d", {"n": 1, "x": "1"}),
        ("d", {"n": 2, "x": "2"}), ("d", {"n": 3, "x": "3"}),
        ("a,b", {"n": 0}), ("a", {"n": 1}), ("a,b", {"n": 2}), ("a", {"n": 3}),
        ("c", {"n": 0}), ("c", {"n": 1}), ("c", {"n": 2}), ("c", {"n": 3}),
    ]  # fmt: skip
    for p in peers[1:]:
        assert [orjson.loads(b) for _, b in p.messages()] == [{"n": 2}, {"n": 3}]
    assert [s.progress.delivered for s in subs[:4]] == [4, 2, 4, 4]


def test_only_the_messages_taken_are_projected() -> None:
    router = Router()
    peer = Peer()
    router.add(_sub(peer, "a", "select=[-/,+/n]", "/n = 3"))
    before = projection_count()
    FanOut(router, _NoAuth(), VirtualClock()).appended(_run([b'{"n":%d}' % n for n in range(5)]))
    assert projection_count() - before == 1
    assert [b for _, b in peer.messages()] == [b'{"n":3}']


# -- SOW topics -------------------------------------------------------------------------


def sow_msgs(client: FakeClient, qid: str) -> list[tuple[str, object]]:
    return [
        (str(hd["k"]), orjson.loads(b))
        for hd, b in client.received()
        if hd.get("c") == "sow" and hd.get("qid") == qid
    ]


@scenario
async def test_sow_queries_and_subscriptions_deliver_the_selected_fields(tmp_path: Path) -> None:
    async with EngineHarness(tmp_path, sow=sow_topic("orders", "/id")) as h:
        pub = await h.logon("pub")
        pub.send(*(publish("orders", o) for o in ORDERS[:3]))
        await h.commit()
        c = await h.logon("c")
        c.send(
            ({"c": "sow", "t": "orders", "qid": "q", "o": "select=[-/,+/px]", "f": "/qty >= 10",
              "orderby": "/qty DESC"}, b""),
        )  # fmt: skip
        await h.until(lambda: any(hd.get("c") == "group_end" for hd, _ in c.received()))
        assert [b for _, b in sow_msgs(c, "q")] == [{"px": 3.0}, {"px": 1.5}]
        c.send(
            ({"c": "sow_and_subscribe", "t": "orders", "sub_id": "ss", "o": "select=[-/meta]",
              "f": "/id < 2"}, b""),
            ({"c": "subscribe", "t": "orders", "sub_id": "plain", "o": "select=[-/,+/qty],oof",
              "f": "/qty < 25"}, b""),
            ({"c": "delta_subscribe", "t": "orders", "sub_id": "d",
              "o": "select=[-/,+/id,+/px,+/meta/note]"}, b""),
        )  # fmt: skip
        await h.settle()
        assert [b for _, b in sow_msgs(c, "ss")] == [
            {"id": 0, "px": 0.0, "qty": 0},
            {"id": 1, "px": 1.5, "qty": 10},
        ]
        # a new record: whole (as selected) to every subscriber
        pub.send(
            publish("orders", {"id": 5, "px": 5.0, "qty": 5, "meta": {"src": "y", "note": "m"}})
        )
        await h.commit()
        await h.settle()
        assert got(c, "plain") == [{"qty": 5}]
        assert got(c, "d") == [{"id": 5, "px": 5.0, "meta": {"note": "m"}}]
        c.new()
        # a delta subscriber gets the selected fields that changed (and the key fields
        # the delta carries, as selected)
        pub.send(
            publish("orders", {"id": 5, "px": 6.0, "qty": 5, "meta": {"src": "y", "note": "m"}})
        )
        await h.commit()
        await h.settle()
        assert [orjson.loads(b) for hd, b in c.new() if hd.get("sids") == "d"] == [
            {"id": 5, "px": 6.0}
        ]
        # nothing it selects changed (only /qty and /meta/src): nothing is sent to it;
        # the plain subscriber's filter no longer matches: its oof carries the selection
        pub.send(
            publish("orders", {"id": 5, "px": 6.0, "qty": 50, "meta": {"src": "z", "note": "m"}})
        )
        await h.commit()
        await h.settle()
        fresh = c.new()
        assert [hd.get("sids") for hd, _ in fresh if hd.get("c") == "publish"] == []
        assert [(hd["reason"], orjson.loads(b)) for hd, b in fresh if hd.get("c") == "oof"] == [
            ("match", {"qty": 50})
        ]
        # and the next change it selects is a delta from what it holds
        pub.send(
            publish("orders", {"id": 5, "px": 6.0, "qty": 50, "meta": {"src": "z", "note": "q"}})
        )
        await h.commit()
        await h.settle()
        assert [orjson.loads(b) for hd, b in c.new() if hd.get("sids") == "d"] == [
            {"id": 5, "meta": {"note": "q"}}
        ]


@scenario
async def test_a_historical_sow_and_subscribe_selects_snapshot_and_replay(tmp_path: Path) -> None:
    async with EngineHarness(tmp_path, sow=sow_topic("orders", "/id")) as h:
        c = await h.logon("c")
        c.send(subscribe("orders", "w"))
        await h.settle()
        pub = await h.logon("pub")
        pub.send(*(publish("orders", o) for o in ORDERS[:3]))
        await h.commit()
        await h.until(lambda: len(c.deliveries("w")) == 3)
        second = c.deliveries("w")[1][0]["bm"]
        c.send(
            ({"c": "sow_and_subscribe", "t": "orders", "sub_id": "h", "bm": second,
              "o": "select=[-/,+/id]"}, b""),
        )  # fmt: skip
        await h.until(lambda: len(c.deliveries("h")) == 1)
        assert sorted(b["id"] for _, b in sow_msgs(c, "h")) == [0, 1]  # type: ignore[index]
        assert all(b.keys() == {"id"} for _, b in sow_msgs(c, "h"))  # type: ignore[attr-defined]
        assert got(c, "h") == [{"id": 2}]
