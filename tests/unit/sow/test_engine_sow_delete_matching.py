"""SOW deletes without a session (what an action does) on the in-process engine: the same
delete as a client's ``sow_delete``, proven by doing both on twin brokers and comparing
what is left, what subscribers are told and what the logs hold; refusals with clear
errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from spool.server.protocol.errors import BadFilter, InvalidMessage, InvalidTopic
from spool.server.txlog.format.record import RecordKind
from tests.support.engine import EngineHarness, FakeClient, scenario
from tests.support.fabric import A, B, drive, fabric_of, linked, xml
from tests.support.replication import destination
from tests.support.server import sow_topic
from tests.unit.sow.test_engine_sow import harness, pub
from tests.unit.sow.test_engine_sow_live import view

ORDERS = sow_topic("orders", "/id", durability="transient")
EMPTY = sow_topic("empty", "/id", durability="transient")


async def filled(h: EngineHarness) -> FakeClient:
    """Nine orders (``g`` = id mod 3) and a subscriber holding those with ``g`` < 2, which
    hears ``oof`` when one of them goes."""
    p = await h.logon("pub")
    p.send(*[pub("orders", {"id": i, "g": i % 3}) for i in range(9)])
    await h.settle()
    c = await h.logon("c")
    c.send(({"c": "sow_and_subscribe", "t": "orders", "sub_id": "s", "f": "/g < 2",
             "o": "oof"}, b""))  # fmt: skip
    await h.settle()
    assert len([m for m in view(c) if m[0] == "sow"]) == 6
    return c


async def logged(h: EngineHarness) -> list[tuple[Any, ...]]:
    """Every record of the log, the instance's own identity written ``own`` (each
    instance has its own), once everything appended is durable."""
    await h.commit()
    txlog = h.broker.txlog
    assert txlog is not None
    own = txlog.own_pub_hash
    return [
        (r.seq, r.kind, r.topic, r.sow_key, "own" if r.pub_hash == own else r.pub_hash,
         r.pub_seq, r.body)
        for r in await txlog.read_batch(1, max_count=1000)
    ]  # fmt: skip


async def twins(
    tmp_path: Path, header: dict[str, Any], kwargs: dict[str, Any], gone: list[str]
) -> None:
    """Broker ``a`` deletes by a client's ``sow_delete`` with ``header``, broker ``b`` by
    :meth:`Operations.delete_sow` with ``kwargs``, from the same state: the same count,
    records left, SOW counts, ``oof`` notices and log records."""
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    async with harness(tmp_path / "a", sow=ORDERS) as a, harness(tmp_path / "b", sow=ORDERS) as b:
        ca, cb = await filled(a), await filled(b)
        d = await a.logon("d")
        d.send(({"c": "sow_delete", "t": "orders", "cid": "x", "a": "processed,stats",
                 **header}, b""))  # fmt: skip
        await a.settle()
        deleted = await b.broker.operations.delete_sow("orders", by="test", **kwargs)
        await b.settle()
        (stats,) = d.acks("stats")
        assert stats["records_deleted"] == deleted > 0
        assert [x["status"] for x in d.acks("processed")] == ["success"]
        stores = [h.broker.sow.topics.store("orders") for h in (a, b)]
        assert stores[0] is not None and stores[1] is not None
        left = [
            [(r.key, r.body, r.seq, r.pub_hash, r.pub_seq) for r in s.records()] for s in stores
        ]
        assert left[0] == left[1]
        assert len(stores[0]) == 9 - deleted
        assert a.broker.operations.sow_topic("orders") == b.broker.operations.sow_topic("orders")
        told = view(ca)
        assert told and all(kind == "oof" for kind, _, _ in told)
        assert told == view(cb)
        log_a, log_b = await logged(a), await logged(b)
        assert log_a == log_b
        deletes = [(r[3], r[4]) for r in log_a if r[1] == RecordKind.SOW_DELETE]
        assert sorted(deletes) == [(key, "own") for key in gone]


@scenario
async def test_a_delete_by_filter_is_the_client_command_s_delete(tmp_path: Path) -> None:
    await twins(tmp_path, {"f": "/g = 0"}, {"filter": "/g = 0"}, ["0", "3", "6"])


@scenario
async def test_a_delete_by_keys_is_the_client_command_s_delete(tmp_path: Path) -> None:
    # 1 is held by the subscriber (oof), 2 is not, 99 does not exist
    await twins(tmp_path, {"k": "1,2,99"}, {"keys": ["1", "2", "99"]}, ["1", "2"])


@scenario
async def test_a_topic_the_log_does_not_record_is_deleted_without_log_records(
    tmp_path: Path,
) -> None:
    async with harness(tmp_path, sow=ORDERS, topics=("other",)) as h:
        c = await filled(h)
        before = h.last_seq
        ops = h.broker.operations
        assert await ops.delete_sow("orders", keys=["0", " 1 ", "1", "2"], by="test") == 3
        await h.settle()
        assert view(c) == [("oof", "0", "deleted"), ("oof", "1", "deleted")]
        store = h.broker.sow.topics.store("orders")
        assert store is not None and sorted(store.keys()) == ["3", "4", "5", "6", "7", "8"]
        assert h.last_seq == before
        # nothing matches, or the topic has no record yet: nothing to do
        assert await ops.delete_sow("orders", filter="/g = 7", by="test") == 0


@scenario
async def test_refusals_name_what_is_wrong(tmp_path: Path) -> None:
    async with harness(tmp_path, sow=ORDERS + EMPTY, topics=("orders", "plain")) as h:
        await filled(h)
        ops = h.broker.operations
        cases: list[tuple[dict[str, Any], type[Exception], str]] = [
            ({"topic": "plain", "keys": ["1"]}, InvalidTopic, "'plain' is not a SOW topic"),
            ({"topic": "nowhere", "filter": "1=1"}, InvalidTopic, "'nowhere' is not a SOW topic"),
            ({"topic": "^ord", "keys": ["1"]}, InvalidTopic, "one SOW topic by name"),
            ({"topic": "orders", "filter": "/g = "}, BadFilter, ""),
            ({"topic": "orders"}, InvalidMessage, "exactly one of a filter or keys"),
            ({"topic": "orders", "filter": "1=1", "keys": ["1"]}, InvalidMessage, "exactly one"),
            ({"topic": "orders", "keys": [" ", ""]}, InvalidMessage, "names no key"),
        ]
        for kwargs, error, text in cases:
            with pytest.raises(error) as caught:
                await ops.delete_sow(by="test", **kwargs)
            assert text in str(caught.value), kwargs
        store = h.broker.sow.topics.store("orders")
        assert store is not None and len(store) == 9
        # a SOW topic without a record yet deletes nothing
        assert await ops.delete_sow("empty", keys=["1"], by="test") == 0


@scenario
async def test_a_delete_without_a_session_replicates(tmp_path: Path) -> None:
    """The removals are logged under the instance's identity, so replication sends them: the
    destination removes the records and tells its own subscribers."""
    sow = sow_topic("orders", "/id")
    configs = {
        "a": xml(tmp_path, "a", destination("b", [B]), sow=sow),
        "b": xml(tmp_path, "b", destination("a", [A]), sow=sow),
    }
    async with fabric_of(tmp_path, configs) as (_fabric, clock, h):
        a, b = h["a"], h["b"]
        await linked(clock, h)
        watcher = await b.logon("watcher")
        watcher.send(({"c": "sow_and_subscribe", "t": "orders", "sub_id": "w", "o": "oof"}, b""))
        p = await a.logon("pub")
        p.send(*[pub("orders", {"id": i, "g": i % 3}) for i in range(6)])

        def keys(x: EngineHarness) -> list[str]:
            store = x.broker.sow.topics.store("orders")
            return sorted(store.keys()) if store is not None else []

        await drive(clock, lambda: keys(b) == ["0", "1", "2", "3", "4", "5"])
        assert await a.broker.operations.delete_sow("orders", filter="/g = 0", by="test") == 2
        await drive(clock, lambda: keys(b) == ["1", "2", "4", "5"])

        def oofs() -> list[tuple[str, str]]:
            return sorted(
                (hd["k"], hd["reason"]) for hd, _ in watcher.received() if hd["c"] == "oof"
            )

        await drive(clock, lambda: oofs() == [("0", "deleted"), ("3", "deleted")])
        txlog, source = b.broker.txlog, a.broker.txlog
        assert txlog is not None and source is not None
        await drive(clock, lambda: txlog.durable_seq == txlog.last_seq)
        gone = [r for r in await txlog.read_batch(1, max_count=1000)
                if r.kind == RecordKind.SOW_DELETE]  # fmt: skip
        assert sorted((r.sow_key, r.pub_hash, r.pub_seq, r.path) for r in gone) == [
            ("0", source.own_pub_hash, 1, ("a",)), ("3", source.own_pub_hash, 2, ("a",)),
        ]  # fmt: skip
