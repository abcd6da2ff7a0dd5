"""SOW durability and history on the in-process engine: restarts, rebuilds from the log,
historical queries against a replay of the log (hypothesis oracle)."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spool.server.bookmarks import format_bookmark, format_time_bookmark, pub_hash
from tests.support.engine import EngineHarness, FakeClient
from tests.support.server import sow_topic
from tests.unit.sow.test_engine_sow import ORDERS, harness, pub, scenario

_queries = itertools.count()


async def query(h: EngineHarness, c: FakeClient, **header: Any) -> dict[str, Any]:
    """A sow query's records, key -> body."""
    c.new()
    cid = f"q{next(_queries)}"
    c.send(({"c": "sow", "t": "orders", "cid": cid, "a": "processed,completed", **header}, b""))
    await h.until(lambda: any(a.get("cid") == cid and (a["a"] == "completed"
                              or a.get("status") == "failure") for a in c.acks()))  # fmt: skip
    got = c.new()
    fails = [hd for hd, _ in got if hd.get("status") == "failure"]
    assert not fails, fails
    return {hd["k"]: orjson.loads(b) for hd, b in got if hd["c"] == "sow"}


def events(h: EngineHarness, name: str) -> list[dict[str, Any]]:
    return [e for e in h.broker.events.recent() if e["event"] == name]


@scenario
async def test_a_persistent_sow_survives_a_restart(tmp_path: Path) -> None:
    async with harness(tmp_path, sow=ORDERS()) as h:
        p = await h.logon("pub")
        p.send(*[pub("orders", {"id": i, "v": i}) for i in range(5)])
        p.send(({"c": "sow_delete", "t": "orders", "k": "2"}, b""))
        await h.commit()
        await h.broker.sow.flush()
    async with harness(tmp_path, sow=ORDERS()) as h:
        c = await h.logon("q")
        assert sorted(await query(h, c)) == ["0", "1", "3", "4"]
        recovered = {e["topic"]: e for e in events(h, "sow_recovered")}
        # the file held it all: nothing replayed from the log
        assert recovered["orders"]["replayed"] == 0 and recovered["orders"]["records"] == 4


@scenario
async def test_a_deleted_sow_file_is_rebuilt_from_the_log(tmp_path: Path) -> None:
    async with harness(tmp_path, sow=ORDERS()) as h:
        p = await h.logon("pub")
        p.send(*[pub("orders", {"id": i % 3, "v": i}) for i in range(7)])
        p.send(({"c": "delta_publish", "t": "orders"}, b'{"id":0,"d":true}'))
        await h.commit()
        store = h.broker.sow.topics.store("orders")
        assert store is not None
        path = store.path  # type: ignore[attr-defined]
        before = {r.key: r.body for r in store.records()}
    path.unlink()
    async with harness(tmp_path, sow=ORDERS()) as h:
        store = h.broker.sow.topics.store("orders")
        assert store is not None
        assert {r.key: r.body for r in store.records()} == before
        assert events(h, "sow_file_created")
        assert {e["topic"]: e["replayed"] for e in events(h, "sow_recovered")} == {"orders": 8}


@scenario
async def test_a_damaged_file_keeps_its_prefix_and_replays_the_rest(tmp_path: Path) -> None:
    async with harness(tmp_path, sow=ORDERS()) as h:
        p = await h.logon("pub")
        for i in range(6):
            p.send(pub("orders", {"id": i}))
            await h.commit()
            await h.broker.sow.flush()
        store = h.broker.sow.topics.store("orders")
        assert store is not None
        path = store.path  # type: ignore[attr-defined]
    data = bytearray(path.read_bytes())
    data[-10] ^= 0xFF  # inside the last change
    path.write_bytes(bytes(data))
    async with harness(tmp_path, sow=ORDERS()) as h:
        (repaired,) = events(h, "sow_file_repaired")
        assert repaired["damage"] == "crc mismatch" and repaired["records"] == 5
        store = h.broker.sow.topics.store("orders")
        assert store is not None and sorted(store.keys()) == [str(i) for i in range(6)]
        assert events(h, "sow_recovered")[0]["replayed"] == 1


@scenario
async def test_a_transient_store_of_a_recorded_topic_is_rebuilt_at_start(tmp_path: Path) -> None:
    cfg = sow_topic("orders", "/id", durability="transient", expiration="1h")
    async with harness(tmp_path, sow=cfg) as h:
        p = await h.logon("pub")
        p.send(*[pub("orders", {"id": i}) for i in range(3)], pub("orders", {"id": 9}, e=7200))
        await h.commit()
    async with harness(tmp_path, sow=cfg) as h:
        store = h.broker.sow.topics.store("orders")
        assert store is not None and sorted(store.keys()) == ["0", "1", "2", "9"]
        assert not list((tmp_path / "data" / "sow").glob("*.sow"))
        # lifetimes survive: the topic's from the record time, the message's own from e
        rec0, rec9 = store.get("0"), store.get("9")
        assert rec0 is not None and rec9 is not None
        assert rec0.expires_us == rec0.timestamp_us + 3600 * 10**6
        assert rec9.expires_us == rec9.timestamp_us + 7200 * 10**6


# -- historical queries -------------------------------------------------------------------

ops = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.integers(0, 5), st.integers(0, 99)),
        st.tuples(st.just("delta"), st.integers(0, 5), st.integers(0, 99)),
        st.tuples(st.just("delete"), st.integers(0, 5), st.just(0)),
        st.tuples(st.just("tick"), st.just(0), st.just(0)),
    ),
    min_size=1,
    max_size=30,
)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops, st.data())
def test_a_historical_query_equals_a_replay_of_the_log(
    tmp_path_factory: Any, script: list[tuple[str, int, int]], data: st.DataObject
) -> None:
    """Random updates, deltas and deletions; at every point the oracle (a dict replayed
    from the script) is remembered; then ``sow`` with the bookmark of a point, or the
    moment after a tick, must give exactly that state."""

    async def body() -> None:
        tmp = tmp_path_factory.mktemp("hist")
        async with harness(tmp, sow=ORDERS(durability="transient")) as h:
            p = await h.logon("pub")
            oracle: dict[str, dict[str, int]] = {}
            points: list[tuple[str, dict[str, dict[str, int]]]] = []
            seq = 0
            for op, k, v in script:
                key = str(k)
                if op == "tick":
                    await h.clock.advance(1)
                    # state as of a moment: what was recorded before it
                    points.append((format_time_bookmark(int(h.clock.time() * 1e6)),
                                   {kk: dict(vv) for kk, vv in oracle.items()}))  # fmt: skip
                    await h.clock.advance(1)
                    continue
                if op == "delete":
                    p.send(({"c": "sow_delete", "t": "orders", "k": key}, b""))
                    oracle.pop(key, None)
                    await h.settle()
                    continue
                seq += 1
                if op == "put":
                    p.send(pub("orders", {"id": k, "v": v}, s=seq))
                    oracle[key] = {"id": k, "v": v}
                else:
                    p.send(({"c": "delta_publish", "t": "orders", "s": seq},
                            orjson.dumps({"id": k, "w": v})))  # fmt: skip
                    oracle[key] = {**oracle.get(key, {}), "id": k, "w": v}
                await h.settle()
                points.append((format_bookmark(pub_hash("pub"), seq),
                               {kk: dict(vv) for kk, vv in oracle.items()}))  # fmt: skip
            await h.commit()
            c = await h.logon("q")
            chosen = data.draw(st.lists(st.sampled_from(points), max_size=4)) if points else []
            for bm, state in chosen:
                assert await query(h, c, bm=bm) == state, bm
            assert await query(h, c) == oracle  # and now

    asyncio.run(body())


@scenario
async def test_historical_edges(tmp_path: Path) -> None:
    async with harness(tmp_path, sow=ORDERS()) as h:
        p = await h.logon("pub")
        p.send(pub("orders", {"id": 1}))
        await h.commit()
        c = await h.logon("q")
        assert await query(h, c, bm="0") == {}  # EPOCH: nothing yet
        assert await query(h, c, bm="0|1|") == {"1": {"id": 1}}  # NOW
        c.send(({"c": "sow", "t": "orders", "cid": "u", "bm": "123|9|"}, b""))
        c.send(({"c": "sow", "t": "orders", "cid": "f", "bm": "29990101T000000Z"}, b""))
        await h.settle()
        reasons = {a["cid"]: a["reason"] for a in c.acks() if a.get("status") == "failure"}
        assert reasons == {"u": "bookmark not found", "f": "invalid bookmark"}


@scenario
async def test_sow_and_subscribe_with_a_bookmark_continues_from_the_log(tmp_path: Path) -> None:
    async with harness(tmp_path, sow=ORDERS()) as h:
        p = await h.logon("pub")
        p.send(pub("orders", {"id": 1, "v": 1}, s=1), pub("orders", {"id": 2, "v": 1}, s=2))
        p.send(pub("orders", {"id": 1, "v": 2}, s=3), pub("orders", {"id": 3, "v": 1}, s=4))
        await h.commit()
        c = await h.logon("c")
        bm = format_bookmark(pub_hash("pub"), 2)
        c.send(({"c": "sow_and_subscribe", "t": "orders", "sub_id": "s", "bm": bm,
                 "a": "processed"}, b""))  # fmt: skip
        await h.until(lambda: len(c.deliveries("s")) == 2)
        p.send(pub("orders", {"id": 2, "v": 9}, s=5))
        await h.commit()
        await h.until(lambda: len(c.deliveries("s")) == 3)
        got = [(hd["c"], orjson.loads(b)) for hd, b in c.received()
               if hd["c"] in ("sow", "publish")]  # fmt: skip
        assert got == [
            ("sow", {"id": 1, "v": 1}),  # the state as of bookmark 2
            ("sow", {"id": 2, "v": 1}),
            ("publish", {"id": 1, "v": 2}),  # then the log after it, then live
            ("publish", {"id": 3, "v": 1}),
            ("publish", {"id": 2, "v": 9}),
        ]
        kinds = [hd["c"] for hd, _ in c.received() if hd["c"] != "ack"]
        assert kinds.index("group_end") < kinds.index("publish")


@scenario
async def test_the_sow_holds_only_the_journals_its_file_still_needs(tmp_path: Path) -> None:
    async with harness(tmp_path, sow=ORDERS()) as h:
        p = await h.logon("pub")
        p.send(*[pub("orders", {"id": i}) for i in range(5)])
        await h.commit()
        await h.broker.sow.flush()
        txlog = h.broker.txlog
        assert txlog is not None
        (pin,) = [p for p in txlog.pins() if p.owner == "sow:orders"]
        assert pin.seq == 6  # everything up to seq 5 is in the file
    async with harness(tmp_path, sow=ORDERS()) as h:
        txlog = h.broker.txlog
        assert txlog is not None
        (pin,) = [p for p in txlog.pins() if p.owner == "sow:orders"]
        assert pin.seq == 6  # after a restart too, not the whole log


@scenario
async def test_without_a_transaction_log_the_file_is_the_only_copy(tmp_path: Path) -> None:
    async with harness(tmp_path, sow=ORDERS(), txlog=False) as h:
        p = await h.logon("pub")
        p.send(*[pub("orders", {"id": i % 3, "v": i}) for i in range(9)])
        p.send(({"c": "sow_delete", "t": "orders", "k": "0"}, b""))
        await h.settle()
        await h.until(lambda: h.broker.sow.topics.store("orders").unwritten == 0)  # type: ignore[union-attr]
        c = await h.logon("q")
        c.send(({"c": "sow", "t": "orders", "bm": "0"}, b""))
        await h.settle()
        assert c.acks()[0]["reason"] == "invalid topic"  # no log: no history
    async with harness(tmp_path, sow=ORDERS(), txlog=False) as h:
        store = h.broker.sow.topics.store("orders")
        assert store is not None
        assert {r.key: r.body for r in store.records()} == {
            "1": b'{"id":1,"v":7}',
            "2": b'{"id":2,"v":8}',
        }
        assert all(r.seq == 0 and r.bookmark == "" for r in store.records())
