"""State of the World against a real ``spool serve``: every command over real websockets
with the Python client, restarts of a persistent SOW, rebuilds from the transaction log,
historical queries, and the atomicity of ``sow_and_subscribe`` under concurrent publishing.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import orjson
import pytest
from websockets.asyncio.client import connect

from spool.server.client import Client, Message, Subscription
from spool.server.protocol.errors import InvalidTopic
from tests.support.server import SpoolProcess, sow_topic

T = TypeVar("T")
ServerFactory = Callable[..., SpoolProcess]


def run(coro: Awaitable[T]) -> T:
    return asyncio.run(coro)  # type: ignore[arg-type]


def sow_server(factory: ServerFactory, name: str = "sow", **kw: Any) -> SpoolProcess:
    sow = kw.pop("sow", sow_topic("orders", "/id") + sow_topic("kv", durability="transient"))
    return factory(name=name, sow=sow, journal_size="8MB", **kw)


async def until(cond: Callable[[], bool], timeout: float = 20.0) -> None:
    """Poll a condition on this loop (never a fixed sleep)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not cond():
        if asyncio.get_running_loop().time() > deadline:
            raise TimeoutError("condition not reached")
        await asyncio.sleep(0.01)


async def take(sub: Subscription, n: int, timeout: float = 20.0) -> list[Message]:
    return [await sub.get(timeout) for _ in range(n)]


def docs(result: list[Message]) -> dict[str, Any]:
    return {m.key or "": orjson.loads(m.data) for m in result}


def test_query_shapes_and_deletes(spool_server_factory: ServerFactory) -> None:
    server = sow_server(spool_server_factory)

    async def body() -> None:
        async with Client(server.ws_url, "pub") as pub, Client(server.ws_url, "q") as q:
            for i in range(20):
                pub.publish("orders", {"id": i, "px": i % 5, "name": f"n{i:02d}"})
            await pub.flush()
            everything = await q.sow("orders")
            assert (everything.matches, everything.returned, len(everything.records)) == (
                20,
                20,
                20,
            )
            shaped = await q.sow("orders", filter="/px >= 3", orderby="/px DESC, /name",
                                 top_n=5, batch_size=2)  # fmt: skip
            assert [orjson.loads(m.data)["name"] for m in shaped.records] == [
                "n04", "n09", "n14", "n19", "n03",
            ]  # fmt: skip
            assert (shaped.matches, shaped.returned) == (8, 5)
            by_keys = await q.sow("orders", keys=["3", "17", "99"])
            assert [m.key for m in by_keys.records] == ["3", "17"]
            assert await q.sow_delete("orders", filter="/px = 0") == 4
            assert await q.sow_delete("orders", keys=["1", "2"]) == 2
            assert await q.sow_delete("orders", data={"id": 3, "px": 3}) == 1
            assert len((await q.sow("orders")).records) == 13
            with pytest.raises(InvalidTopic):
                await q.sow("not-a-sow-topic")

    run(body())


def test_sow_and_subscribe_oof_and_deltas(spool_server_factory: ServerFactory) -> None:
    server = sow_server(spool_server_factory)

    async def body() -> None:
        async with Client(server.ws_url, "pub") as pub, Client(server.ws_url, "c") as c:
            pub.publish("orders", {"id": 1, "q": 10, "px": {"bid": 1, "ask": 2}})
            pub.publish("orders", {"id": 2, "q": 1})
            await pub.flush()
            sub = await c.sow_and_subscribe("orders", filter="/q > 5", options="oof")
            deltas = await c.sow_and_subscribe("orders", delta=True)
            (snap,) = await take(sub, 1)
            assert (snap.command, snap.key) == ("sow", "1")
            assert len(await take(deltas, 2)) == 2
            await asyncio.wait_for(sub.snapshot_done.wait(), 10)
            pub.delta_publish("orders", {"id": 1, "px": {"ask": 3}})
            pub.publish("orders", {"id": 2, "q": 9})
            pub.publish("orders", {"id": 1, "q": 0, "px": {"bid": 1, "ask": 3}})
            got = await take(sub, 3)
            assert [(m.command, m.key, m.reason) for m in got] == [
                ("publish", "1", None), ("publish", "2", None), ("oof", "1", "match"),
            ]  # fmt: skip
            assert orjson.loads(got[0].data) == {"id": 1, "q": 10, "px": {"bid": 1, "ask": 3}}
            changed = await take(deltas, 3)
            assert [orjson.loads(m.data) for m in changed] == [
                {"px": {"ask": 3}, "id": 1},
                {"q": 9, "id": 2},
                {"q": 0, "id": 1},
            ]
            assert await c.sow_delete("orders", keys=["2"]) == 1
            (gone,) = await take(sub, 1)
            assert (gone.command, gone.key, gone.reason) == ("oof", "2", "deleted")
            # a lifetime on the real clock: the notice comes when it runs out
            pub.publish("orders", {"id": 5, "q": 50}, expiration=1)
            (live,) = await take(sub, 1)
            assert live.key == "5"
            (expired,) = await take(sub, 1, timeout=10)
            assert (expired.command, expired.key, expired.reason) == ("oof", "5", "expired")

    run(body())


def test_keys_from_k_and_conflation(spool_server_factory: ServerFactory) -> None:
    server = sow_server(spool_server_factory)

    async def body() -> None:
        async with Client(server.ws_url, "pub") as pub, Client(server.ws_url, "c") as c:
            sub = await c.subscribe("kv", options="conflation=300ms")
            for v in range(50):
                pub.publish("kv", {"v": v}, sow_key="hot")
            await pub.flush()
            (m,) = await take(sub, 1)
            assert (m.key, orjson.loads(m.data)) == ("hot", {"v": 49})
            assert sub.queue.empty()

    run(body())


def test_restart_with_a_persistent_sow_and_a_rebuild_from_the_log(
    spool_server_factory: ServerFactory, tmp_path: Path
) -> None:
    server = sow_server(spool_server_factory)

    async def fill() -> dict[str, Any]:
        async with Client(server.ws_url, "pub") as pub:
            for i in range(300):
                pub.publish("orders", {"id": i % 50, "v": i})
            pub.delta_publish("orders", {"id": 7, "extra": True})
            await pub.flush()
            await pub.sow_delete("orders", keys=["3"])
            return docs((await pub.sow("orders")).records)

    async def read() -> dict[str, Any]:
        async with Client(server.ws_url, "reader") as c:
            return docs((await c.sow("orders")).records)

    before = run(fill())
    assert len(before) == 49 and before["7"]["extra"] is True
    server.stop()
    server.start()
    assert run(read()) == before  # from the file
    server.stop()
    files = list((tmp_path / "sow" / "data" / "sow").glob("*.sow"))
    assert len(files) == 1
    files[0].unlink()
    server.start()
    assert run(read()) == before  # rebuilt from the transaction log, and said so
    events = [orjson.loads(line) for p in (tmp_path / "sow" / "data").glob("*.events.log*")
              for line in p.read_text().splitlines() if line.strip()]  # fmt: skip
    assert any(e["event"] == "sow_file_created" for e in events)
    assert any(e["event"] == "sow_recovered" and e["replayed"] > 0 for e in events)


def test_sigkill_loses_nothing_that_was_acked_persisted(
    spool_server_factory: ServerFactory,
) -> None:
    server = sow_server(spool_server_factory)

    async def fill() -> dict[str, Any]:
        async with Client(server.ws_url, "pub") as pub:
            last = 0
            for i in range(2000):
                last = pub.publish("orders", {"id": i % 100, "v": i}, persisted=True)
            await pub.wait_persisted(last)
            return docs((await pub.sow("orders")).records)

    async def read() -> dict[str, Any]:
        async with Client(server.ws_url, "reader") as c:
            return docs((await c.sow("orders")).records)

    before = run(fill())
    server.kill()
    server.start()
    assert run(read()) == before


def test_historical_queries_and_sow_and_subscribe_from_a_bookmark(
    spool_server_factory: ServerFactory,
) -> None:
    server = sow_server(spool_server_factory)

    async def body() -> None:
        async with Client(server.ws_url, "pub") as pub, Client(server.ws_url, "c") as c:
            for i in range(10):
                pub.publish("orders", {"id": i % 3, "v": i})
            await pub.flush()
            bm = (await pub.sow("orders", keys=["0"])).records[0].bookmark
            assert bm is not None  # the bookmark of v=9 (the last update of key 0)
            for i in range(10, 15):
                pub.publish("orders", {"id": i % 3, "v": i})
            await pub.flush()
            then = docs((await c.sow("orders", bookmark=bm)).records)
            assert then == {"0": {"id": 0, "v": 9}, "1": {"id": 1, "v": 7}, "2": {"id": 2, "v": 8}}
            sub = await c.sow_and_subscribe("orders", bookmark=bm)
            snapshot = await take(sub, 3)
            assert docs(snapshot) == then
            replayed = await take(sub, 5)
            assert [orjson.loads(m.data)["v"] for m in replayed] == [10, 11, 12, 13, 14]
            assert all(m.command == "publish" for m in replayed)

    run(body())


def lean_messages(frame: bytes) -> list[tuple[dict[str, Any], bytes]]:
    """The messages of one broker frame, for subscribers that must keep up with a million
    deliveries: the protocol's parser (server/protocol/frame.py) costs tens of
    microseconds per message in Python; the broker's headers here hold no ``}`` inside a
    value, so a header ends at the first one (the bench subscribers are lean the same way)."""
    out: list[tuple[dict[str, Any], bytes]] = []
    pos = 0
    n = len(frame)
    while pos < n:
        end = frame.index(b"}", pos) + 1
        header = orjson.loads(frame[pos:end])
        length = header.get("l", n - end)
        out.append((header, frame[end : end + length]))
        pos = end + length
    return out


@pytest.mark.slow
def test_sow_and_subscribe_is_atomic_under_concurrent_publishing(
    spool_server_factory: ServerFactory,
) -> None:
    """20 clients ``sow_and_subscribe`` at different moments while 100,000 updates over
    1,000 keys are published; each update carries its key's version. Every client must
    see, per key, its snapshot version and then every later version exactly once, in
    order, and end with exactly the final SOW."""
    keys, updates, clients = 1000, 100_000, 20
    server = sow_server(
        spool_server_factory, sow=sow_topic("prices", "/k", durability="transient"),
        tuning="<SlowClientBufferLimit>512MB</SlowClientBufferLimit>",
    )  # fmt: skip
    rng = random.Random(20240607)
    order = [rng.randrange(keys) for _ in range(updates)]
    starts = sorted(rng.sample(range(0, updates, 1000), clients))

    async def subscriber(i: int, final: asyncio.Future[dict[int, int]]) -> int:
        """A raw websocket client; returns how many messages it checked."""
        async with connect(server.ws_url, max_size=None, compression=None) as ws:
            await ws.send(orjson.dumps({"c": "logon", "cid": "l", "client_name": f"s{i}",
                                        "a": "processed", "l": 0}))  # fmt: skip
            await ws.send(orjson.dumps({"c": "sow_and_subscribe", "t": "prices", "sub_id": "s",
                                        "bs": 500, "cid": "q", "a": "processed", "l": 0}))  # fmt: skip
            view: dict[int, int] = {}
            in_snapshot = True
            checked = 0
            while not (final.done() and view == final.result()):
                try:
                    frame = await asyncio.wait_for(ws.recv(decode=False), 0.5)
                except TimeoutError:
                    continue  # a lost update never converges: the test times out
                for header, body in lean_messages(frame):
                    c = header["c"]
                    if c == "ack":
                        assert header["status"] == "success", header
                        continue
                    if c == "group_end":
                        in_snapshot = False
                    if c not in ("sow", "publish"):
                        continue
                    doc = orjson.loads(body)
                    k, v = doc["k"], doc["v"]
                    assert header["k"] == str(k)
                    if c == "sow":
                        assert in_snapshot and k not in view, (i, k)
                    else:
                        assert not in_snapshot, (i, k)  # held back until the group's end
                        assert v == view.get(k, 0) + 1, (
                            i,
                            k,
                            view.get(k),
                            v,
                        )  # none lost or doubled
                    view[k] = v
                    checked += 1
            return checked

    async def body() -> None:
        final_state: asyncio.Future[dict[int, int]] = asyncio.get_running_loop().create_future()
        versions = [0] * keys
        tasks: list[asyncio.Task[int]] = []
        async with Client(server.ws_url, "publisher") as pub:
            next_start = 0
            for n, k in enumerate(order):
                while next_start < clients and n == starts[next_start]:
                    tasks.append(asyncio.create_task(subscriber(next_start, final_state)))
                    next_start += 1
                    await pub.flush()
                versions[k] += 1
                pub.publish("prices", {"k": k, "v": versions[k], "pad": "x" * 40})
                if n % 500 == 499:
                    await asyncio.sleep(0)  # let subscribers start and read meanwhile
            await pub.flush()
            final = {k: v for k, v in enumerate(versions) if v}
            sow = {orjson.loads(m.data)["k"]: orjson.loads(m.data)["v"]
                   for m in (await pub.sow("prices")).records}  # fmt: skip
            assert sow == final
            # every client reaches the final state (updates in flight are still arriving)
            final_state.set_result(final)
            checked = await asyncio.wait_for(asyncio.gather(*tasks), 600)
        assert sum(checked) > updates  # the subscribers really saw the stream

    run(body())


def test_refusals_on_a_real_server(spool_server_factory: ServerFactory) -> None:
    server = spool_server_factory(name="nosow", xml=None)

    async def body() -> None:
        async with Client(server.ws_url, "c") as c:
            with pytest.raises(InvalidTopic):
                await c.sow("orders")
            with pytest.raises(InvalidTopic):
                await c.sow_and_subscribe("orders")
            with pytest.raises(InvalidTopic):
                await c.sow_delete("orders", keys=["1"])
            with pytest.raises(InvalidTopic):
                await c.delta_subscribe("orders")

    run(body())
