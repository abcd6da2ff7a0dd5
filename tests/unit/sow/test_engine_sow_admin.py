"""The SOW's admin surface through Operations, entitlements, and what a plain SOW
subscription holds, on the in-process engine."""

from __future__ import annotations

from pathlib import Path

import pytest

from spool.server.auth import UserAuthenticator
from spool.server.config import UserConfig
from spool.server.protocol.errors import InvalidTopic
from spool.server.sow import SowTopicNotFound
from tests.support.server import sow_topic
from tests.unit.sow.test_engine_sow import ORDERS, harness, pub, scenario
from tests.unit.sow.test_engine_sow_live import view

USERS = (
    "<User><Name>w</Name><Token>tok-writer-0123456789</Token><Read>.*</Read><Write>.*</Write>"
    "</User><User><Name>r</Name><Token>tok-reader-0123456789</Token><Read>^md\\.a$</Read>"
    "</User>"
)


@scenario
async def test_operations_list_topics_keys_and_compact(tmp_path: Path) -> None:
    async with harness(tmp_path, sow=ORDERS() + sow_topic("kv", durability="transient")) as h:
        p = await h.logon("pub")
        for i in range(5):  # five writes of the file: it holds 15 changes of 3 records
            p.send(*[pub("orders", {"id": k, "v": i}) for k in range(3)])
            await h.commit()
            await h.broker.sow.flush()
        p.send(({"c": "publish", "t": "kv", "k": "a"}, b"1"))
        await h.commit()
        ops = h.broker.operations
        infos = {i["topic"]: i for i in ops.sow_topics()}
        assert set(infos) == {"kv", "orders"}
        orders = infos["orders"]
        assert (orders["records"], orders["durability"], orders["recorded"]) == (
            3,
            "persistent",
            True,
        )
        assert orders["key_paths"] == ["/id"] and orders["file"] and orders["file_seq"] == 15
        assert orders["last_compaction"] is None and orders["unwritten"] == 0
        assert infos["kv"]["file"] is None and infos["kv"]["records"] == 1
        page = ops.sow_keys("orders", limit=2)
        assert page["keys"] == ["0", "1"] and page["next_after"] == "1" and page["records"] == 3
        assert ops.sow_keys("orders", after="1")["keys"] == ["2"]
        before = orders["file_bytes"]
        assert before is not None
        done = await ops.compact_sow("orders")
        assert done["records"] == 3 and done["after_bytes"] < before
        assert ops.sow_topic("orders")["last_compaction"] == done["at"]
        assert any(e["event"] == "sow_compact" for e in h.broker.events.recent())
        with pytest.raises(SowTopicNotFound):
            ops.sow_topic("nope")
        with pytest.raises(InvalidTopic):
            await ops.compact_sow("kv")


@scenario
async def test_regex_queries_read_only_entitled_topics_and_revocation_sends_oof(
    tmp_path: Path,
) -> None:
    async with harness(tmp_path, sow=sow_topic("^md\\.", "/s", durability="transient"),
                       users=USERS) as h:  # fmt: skip
        w = await h.logon("w", user_id="w", pw="tok-writer-0123456789")
        w.send(pub("md.a", {"s": "A"}), pub("md.b", {"s": "B"}))
        await h.settle()
        r = await h.logon("r", user_id="r", pw="tok-reader-0123456789")
        r.send(({"c": "sow_and_subscribe", "t": "^md\\.", "sub_id": "s", "o": "oof"}, b""))
        await h.settle()
        assert [(c, k) for c, k, _ in view(r) if c == "sow"] == [("sow", "A")]
        w.send(pub("md.b", {"s": "B", "x": 1}), pub("md.a", {"s": "A", "x": 1}))
        await h.settle()
        assert [(c, k) for c, k, _ in view(r)] == [("publish", "A")]
        # the reader's entitlements change (a new Users): what it holds goes out of focus
        users = (UserConfig(name="r", token="tok-reader-0123456789", read=("^none$",)),)
        h.broker.sow.delivery._auth = UserAuthenticator(users)
        assert h.broker.sow.revoke_entitlements() == 1
        await h.settle()
        assert view(r) == [("oof", "A", "entitlement")]
        w.send(pub("md.a", {"s": "A", "x": 2}))
        await h.settle()
        assert view(r) == []


@scenario
async def test_a_plain_oof_subscription_holds_only_what_it_received(tmp_path: Path) -> None:
    async with harness(tmp_path, sow=ORDERS()) as h:
        p = await h.logon("pub")
        p.send(pub("orders", {"id": 1, "q": 9}))
        await h.settle()
        c = await h.logon("c")
        c.send(({"c": "subscribe", "t": "orders", "sub_id": "s", "f": "/q > 5", "o": "oof"}, b""))
        await h.settle()
        # record 1 was stored before: this subscription never received it
        p.send(pub("orders", {"id": 1, "q": 0}))
        await h.settle()
        assert view(c) == []
        p.send(pub("orders", {"id": 1, "q": 8}), pub("orders", {"id": 1, "q": 1}))
        await h.settle()
        assert view(c) == [("publish", "1", {"id": 1, "q": 8}), ("oof", "1", "match")]


@scenario
async def test_held_back_updates_over_the_buffer_limit_disconnect_a_slow_client(
    tmp_path: Path,
) -> None:
    async with harness(
        tmp_path,
        sow=ORDERS(),
        tuning="<SlowClientBufferLimit>64KB</SlowClientBufferLimit>",
        transport_extra="<MaxMessageSize>64KB</MaxMessageSize>",
    ) as h:
        p = await h.logon("pub")
        c = await h.logon("c")
        c.send(({"c": "sow_and_subscribe", "t": "orders", "sub_id": "s"}, b""))
        # before its (empty) snapshot is sent, 100 KB of updates arrive for it
        p.send(*[pub("orders", {"id": i, "pad": "x" * 1000}) for i in range(100)])
        await h.settle()
        assert c.closed and c.transport.close_reason == "slow client"
        assert len(h.broker.sow.delivery) == 0
        assert any(e["event"] == "slow_client" for e in h.broker.events.recent())
