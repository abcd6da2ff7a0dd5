"""SOW scenarios on the in-process engine (virtual clock): publish, query, keys, deltas."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from spool.server.protocol.frame import parse_frame
from spool.server.txlog.format.record import RecordKind
from tests.support.engine import EngineHarness, scenario
from tests.support.server import sow_topic

Msg = tuple[dict[str, Any], bytes]


def pub(topic: str, doc: Any, **header: Any) -> Msg:
    return {"c": "publish", "t": topic, **header}, orjson.dumps(doc)


def of(msgs: list[Msg], c: str) -> list[Msg]:
    return [(h, b) for h, b in msgs if h.get("c") == c]


def ORDERS(**kw: Any) -> str:
    return sow_topic("orders", "/id", **kw)


def harness(tmp_path: Path, sow: str, **kw: Any) -> EngineHarness:
    """An engine with small journals and none preallocated (scenarios write little, and
    a hypothesis test makes dozens of instances)."""
    return EngineHarness(
        tmp_path, sow=sow, journal_size="1MB",
        txlog_extra="<PreallocatedJournalFiles>1</PreallocatedJournalFiles>", **kw,
    )  # fmt: skip


@scenario
async def test_a_query_returns_the_latest_record_per_key(tmp_path: Path) -> None:
    async with harness(tmp_path, sow=ORDERS()) as h:
        p = await h.logon("pub")
        p.send(pub("orders", {"id": 1, "q": 1}), pub("orders", {"id": 2, "q": 2}),
               pub("orders", {"id": 1, "q": 3}))  # fmt: skip
        await h.settle()
        c = await h.logon("q")
        c.send(({"c": "sow", "t": "orders", "cid": "q1", "a": "processed,stats,completed"}, b""))
        await h.settle()
        got = c.new()
        kinds = [h_["c"] if h_["c"] != "ack" else h_["a"] for h_, _ in got]
        assert kinds == [
            "processed",
            "group_begin",
            "sow",
            "sow",
            "group_end",
            "stats",
            "completed",
        ]
        records = of(got, "sow")
        assert [(hd["k"], orjson.loads(b)) for hd, b in records] == [
            ("1", {"id": 1, "q": 3}),
            ("2", {"id": 2, "q": 2}),
        ]
        assert all(hd["qid"] == "q1" and hd["t"] == "orders" and hd["bm"] for hd, _ in records)
        stats = c.acks("stats")[0]
        assert (stats["matches"], stats["records_returned"]) == (2, 2)


@scenario
async def test_a_message_without_its_key_is_refused_alone(tmp_path: Path) -> None:
    async with harness(tmp_path, sow=ORDERS()) as h:
        p = await h.logon("pub")
        # the first publish to a topic leaves the run scanner; the frame after it is one
        # run of five, from which the stage refuses two: the answers keep command order
        p.send(pub("orders", {"id": 0}, a="processed", cid="first"))
        await h.settle()
        p.send(
            pub("orders", {"id": 1}, a="processed", cid="a"),
            pub("orders", {"x": 1}, a="processed", cid="b"),
            pub("orders", {"id": 3}, a="processed", cid="c"),
            pub("orders", {"id": 4}, a="processed", cid="d"),
            pub("orders", {"y": 1}, a="processed", cid="e"),
        )
        await h.settle()
        acks = [(a["cid"], a["status"], a.get("reason")) for a in p.acks("processed")]
        assert acks == [("first", "success", None), ("a", "success", None),
                        ("b", "failure", "invalid message"), ("c", "success", None),
                        ("d", "success", None), ("e", "failure", "invalid message")]  # fmt: skip
        assert "no value at /id" in p.acks("processed")[2]["detail"]
        store = h.broker.sow.topics.store("orders")
        assert store is not None and sorted(store.keys()) == ["0", "1", "3", "4"]
        assert h.last_seq == 4  # the refused ones were not logged


@scenario
async def test_filter_orderby_top_n_and_bs_frames(tmp_path: Path) -> None:
    async with harness(tmp_path, sow=ORDERS()) as h:
        p = await h.logon("pub")
        p.send(*[pub("orders", {"id": i, "px": i % 4, "s": f"n{i}"}) for i in range(10)])
        await h.settle()
        c = await h.logon("q")
        frames_before = len(c.transport.frames)
        c.send(({"c": "sow", "t": "orders", "cid": "q", "a": "stats", "f": "/px > 0",
                 "orderby": "/px DESC, /s", "top_n": 5, "bs": 2}, b""))  # fmt: skip
        await h.settle()
        got = [orjson.loads(b) for _, b in of(c.new(), "sow")]
        assert [(d["px"], d["s"]) for d in got] == [(3, "n3"), (3, "n7"), (2, "n2"), (2, "n6"),
                                                   (1, "n1")]  # fmt: skip
        stats = c.acks("stats")[0]
        assert (stats["matches"], stats["records_returned"]) == (7, 5)

        per_frame = [
            sum(1 for m in parse_frame(f).messages if m.header.get("c") == "sow")
            for f in c.transport.frames[frames_before:]
        ]
        assert max(per_frame) == 2 and sum(per_frame) == 5


@scenario
async def test_a_query_by_keys_and_no_sowkey(tmp_path: Path) -> None:
    async with harness(tmp_path, sow=ORDERS()) as h:
        p = await h.logon("pub")
        p.send(*[pub("orders", {"id": i}) for i in range(5)])
        await h.settle()
        c = await h.logon("q")
        c.send(({"c": "sow", "t": "orders", "cid": "q", "k": "3,1,9", "o": "no_sowkey"}, b""))
        await h.settle()
        records = of(c.new(), "sow")
        assert [orjson.loads(b)["id"] for _, b in records] == [3, 1]
        assert all("k" not in hd for hd, _ in records)


@scenario
async def test_delta_publish_merges_nested_fields_and_logs_the_merged_record(
    tmp_path: Path,
) -> None:
    async with harness(tmp_path, sow=ORDERS()) as h:
        s = await h.logon("sub")
        s.send(({"c": "subscribe", "t": "orders", "sub_id": "s"}, b""))
        p = await h.logon("pub")
        p.send(pub("orders", {"id": 1, "px": {"bid": 10, "ask": 11}, "tags": ["a"]}))
        p.send(({"c": "delta_publish", "t": "orders", "cid": "d", "a": "processed"},
                orjson.dumps({"id": 1, "px": {"ask": 12}, "qty": 5})))  # fmt: skip
        await h.settle()
        merged = {"id": 1, "px": {"bid": 10, "ask": 12}, "tags": ["a"], "qty": 5}
        assert p.acks("processed")[0]["status"] == "success"
        got = [(hd["k"], orjson.loads(b)) for hd, b in s.deliveries("s")]
        assert got[-1] == ("1", merged)
        store = h.broker.sow.topics.store("orders")
        assert store is not None and orjson.loads(store.get("1").body) == merged  # type: ignore[union-attr]
        await h.commit()
        txlog = h.broker.txlog
        assert txlog is not None
        recs = await txlog.read_batch(1)

        assert [r.kind for r in recs] == [RecordKind.PUBLISH, RecordKind.DELTA_PUBLISH]
        # the body gives the key again when the log is read: it is not logged
        assert orjson.loads(recs[1].body) == merged and recs[1].sow_key == ""


@scenario
async def test_a_delta_of_a_new_key_is_stored_as_it_is(tmp_path: Path) -> None:
    async with harness(tmp_path, sow=ORDERS()) as h:
        p = await h.logon("pub")
        p.send(({"c": "delta_publish", "t": "orders"}, b'{"id":7,"a":1}'))
        await h.settle()
        store = h.broker.sow.topics.store("orders")
        assert store is not None and store.get("7").body == b'{"id":7,"a":1}'  # type: ignore[union-attr]


@scenario
async def test_keys_from_the_k_header_or_a_digest(tmp_path: Path) -> None:
    async with harness(tmp_path, sow=sow_topic("kv")) as h:
        p = await h.logon("pub")
        p.send(({"c": "publish", "t": "kv", "k": "alpha"}, b"1"),
               ({"c": "publish", "t": "kv", "k": "alpha"}, b"2"),
               ({"c": "publish", "t": "kv"}, b"same"),
               ({"c": "publish", "t": "kv"}, b"same"))  # fmt: skip
        await h.settle()
        store = h.broker.sow.topics.store("kv")
        assert store is not None and len(store) == 2
        assert store.get("alpha").body == b"2"  # type: ignore[union-attr]
        p.send(({"c": "publish", "t": "kv", "k": "beta", "e": 30}, b"3"))
        await h.commit()
        txlog = h.broker.txlog
        assert txlog is not None
        # a key from k (or a digest) is logged, and a lifetime after it
        fields = [r.sow_key for r in await txlog.read_batch(1)]
        assert fields[:2] == ["alpha", "alpha"] and len(fields[2]) == 32
        assert fields[4] == "beta\x1e30"


@scenario
async def test_sow_commands_on_topics_without_a_sow_are_refused(tmp_path: Path) -> None:
    async with harness(tmp_path, sow=ORDERS()) as h:
        c = await h.logon("c")
        script: list[tuple[dict[str, Any], str]] = [
            ({"c": "sow", "t": "plain"}, "invalid topic"),
            ({"c": "sow_and_subscribe", "t": "plain", "sub_id": "x"}, "invalid topic"),
            ({"c": "sow_delete", "t": "plain", "f": "1=1"}, "invalid topic"),
            ({"c": "delta_publish", "t": "plain"}, "invalid topic"),
            ({"c": "delta_subscribe", "t": "plain", "sub_id": "y"}, "invalid topic"),
            ({"c": "subscribe", "t": "plain", "sub_id": "z", "o": "oof"}, "invalid options"),
            ({"c": "subscribe", "t": "plain", "sub_id": "w", "o": "no_sowkey"}, "invalid options"),
            ({"c": "publish", "t": "plain", "e": 5}, "invalid message"),
            ({"c": "sow", "t": "orders", "o": "rate=10"}, "invalid options"),
            ({"c": "sow", "t": "orders", "orderby": "id"}, "invalid message"),
            ({"c": "sow", "t": "orders", "bs": 20000}, "invalid message"),
            ({"c": "sow", "t": "orders", "f": "/a = "}, "bad filter"),
            ({"c": "sow", "t": "orders", "bm": "0|1|,5|5|"}, "invalid bookmark"),
            ({"c": "subscribe", "t": "orders", "sub_id": "r", "o": "rate=5"}, "invalid options"),
            (
                {"c": "subscribe", "t": "orders", "sub_id": "b", "o": "bookmark_not_found=fail"},
                "invalid options",
            ),
            (
                {"c": "sow", "t": "orders", "bm": "0", "o": "bookmark_not_found=fail"},
                "invalid options",
            ),
            (
                {"c": "sow_and_subscribe", "t": "orders", "sub_id": "p", "o": "pause"},
                "invalid options",
            ),
            (
                {"c": "sow_and_delta_subscribe", "t": "orders", "sub_id": "q", "bm": "0"},
                "invalid options",
            ),
            ({"c": "sow", "t": "orders", "max_msgs": 5}, "invalid message"),
            ({"c": "sow", "t": "orders", "top_n": 3, "o": "top_n=4"}, "invalid message"),
            ({"c": "sow", "t": "^ord", "k": "1"}, "invalid message"),
            ({"c": "sow_delete", "t": "orders"}, "invalid message"),
            ({"c": "sow_delete", "t": "orders", "f": "1=1", "k": "a"}, "invalid message"),
        ]
        for i, (header, _) in enumerate(script):
            c.send(
                (
                    {**header, "cid": str(i), "a": "processed"},
                    b"{}" if header["c"] == "delta_publish" else b"",
                )
            )
            await h.settle()
        fails = {a["cid"]: a.get("reason") for a in c.acks("processed") if a["status"] == "failure"}
        assert fails == {str(i): reason for i, (_, reason) in enumerate(script)}


@scenario
async def test_sow_delete_by_filter_keys_and_message(tmp_path: Path) -> None:
    async with harness(tmp_path, sow=ORDERS()) as h:
        p = await h.logon("pub")
        p.send(*[pub("orders", {"id": i, "g": i % 3}) for i in range(9)])
        await h.settle()
        c = await h.logon("d")
        c.send(
            (
                {
                    "c": "sow_delete",
                    "t": "orders",
                    "f": "/g = 0",
                    "cid": "f",
                    "a": "processed,stats",
                },
                b"",
            )
        )
        await h.settle()
        c.send(({"c": "sow_delete", "t": "orders", "k": "1,2,99", "cid": "k", "a": "stats"}, b""))
        c.send(({"c": "sow_delete", "t": "orders", "cid": "m", "a": "stats"}, b'{"id":4,"g":1}'))
        await h.settle()
        stats = {a["cid"]: (a["matches"], a["records_deleted"]) for a in c.acks("stats")}
        assert stats == {"f": (3, 3), "k": (2, 2), "m": (1, 1)}
        store = h.broker.sow.topics.store("orders")
        assert store is not None and sorted(store.keys()) == ["5", "7", "8"]
        await h.commit()
        txlog = h.broker.txlog
        assert txlog is not None

        deletes = [r.sow_key for r in await txlog.read_batch(1, max_count=100)
                   if r.kind == RecordKind.SOW_DELETE]  # fmt: skip
        assert sorted(deletes) == ["0", "1", "2", "3", "4", "6"]
