"""Pub/sub over websockets against a real `spool serve` process."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from spool.server.client import Client, Disconnected, ReusedSequenceWarning
from spool.server.protocol import errors
from tests.support.server import SpoolProcess, config_xml


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SpoolProcess]:
    """One broker shared by the tests that need no special config."""
    work = tmp_path_factory.mktemp("foundation")
    proc = SpoolProcess(work, config_xml(work / "data", topics=("^orders", "^audit/")))
    proc.start()
    yield proc
    proc.stop()


def run(coro: Any) -> Any:
    return asyncio.run(coro)


async def raw_exchange(
    url: str, frames: list[bytes], expect: int = 1, timeout: float = 5.0
) -> list[dict[str, Any]]:
    """Send raw frames on a new connection; return the first ``expect`` headers received."""
    out: list[dict[str, Any]] = []
    async with connect(url, compression=None) as ws:
        for f in frames:
            await ws.send(f)
        while len(out) < expect:
            data = await asyncio.wait_for(ws.recv(), timeout)
            assert isinstance(data, bytes)
            from spool.server.protocol.frame import parse_frame

            out.extend(m.header for m in parse_frame(data).messages)
    return out


LOGON = b'{"c":"logon","cid":"L","client_name":"raw","a":"processed"}'


def test_publish_subscribe_round_trip(server: SpoolProcess) -> None:
    async def scenario() -> None:
        async with (
            Client(server.ws_url, "sub-1") as sub_client,
            Client(server.ws_url, "pub-1") as pub,
        ):
            sub = await sub_client.subscribe("orders")
            for i in range(10):
                pub.publish("orders", {"i": i})
            got = [orjson.loads((await sub.get(5)).data)["i"] for _ in range(10)]
            assert got == list(range(10))

    run(scenario())


def test_regex_topics_and_filters(server: SpoolProcess) -> None:
    async def scenario() -> None:
        async with Client(server.ws_url, "rx") as c, Client(server.ws_url, "rx-pub") as pub:
            rx = await c.subscribe("^audit/", sub_id="rx")
            flt = await c.subscribe("orders", filter="/qty > 5", sub_id="flt")
            pub.publish("audit/login", {"u": 1})
            pub.publish("other", {"u": 2})
            for q in (1, 10, 3, 7):
                pub.publish("orders", {"qty": q})
            m = await rx.get(5)
            assert m.topic == "audit/login"
            got = [orjson.loads((await flt.get(5)).data)["qty"] for _ in range(2)]
            assert got == [10, 7]
            await c.flush()
            assert rx.queue.empty()
            assert flt.queue.empty()

    run(scenario())


def test_one_message_several_subscriptions_one_delivery(server: SpoolProcess) -> None:
    async def scenario() -> None:
        async with Client(server.ws_url, "multi") as c, Client(server.ws_url, "m-pub") as pub:
            a = await c.subscribe("orders", sub_id="a")
            await c.subscribe("^ord", sub_id="b")
            pub.publish("orders", {"x": 1})
            msg = await a.get(5)
            assert sorted(msg.sub_ids) == ["a", "b"]

    run(scenario())


def test_logon_required(server: SpoolProcess) -> None:
    headers = run(raw_exchange(server.ws_url, [b'{"c":"subscribe","cid":"1","t":"x"}']))
    assert headers[0]["status"] == "failure"
    assert headers[0]["reason"] == "logon required"


def test_invalid_command_and_invalid_message(server: SpoolProcess) -> None:
    headers = run(
        raw_exchange(
            server.ws_url,
            [LOGON, b'{"c":"bogus","cid":"2"}', b'{"c":"publish","cid":"3","t":7}'],
            expect=3,
        )
    )
    assert headers[0]["status"] == "success"
    assert (headers[1]["cid"], headers[1]["reason"]) == ("2", "invalid command")
    assert (headers[2]["cid"], headers[2]["reason"]) == ("3", "invalid message")


def test_wrong_length_with_cid_gets_failure_ack_and_connection_survives(
    server: SpoolProcess,
) -> None:
    headers = run(
        raw_exchange(
            server.ws_url,
            [
                LOGON,
                b'{"c":"publish","cid":"9","t":"orders","l":50}short',
                b'{"c":"flush","cid":"10","a":"processed"}',
            ],
            expect=3,
        )
    )
    assert headers[1]["cid"] == "9"
    assert headers[1]["reason"] == "invalid message"
    assert headers[2]["cid"] == "10"
    assert headers[2]["status"] == "success"


@pytest.mark.parametrize("frame", [b"\x00\xffgarbage", b"not json at all", b'{"c":"pub'])
def test_garbage_frame_closes_with_1007(server: SpoolProcess, frame: bytes) -> None:
    async def scenario() -> tuple[int | None, str]:
        async with connect(server.ws_url, compression=None) as ws:
            await ws.send(LOGON)
            await ws.recv()
            await ws.send(frame)
            with pytest.raises(ConnectionClosed) as info:
                await asyncio.wait_for(ws.recv(), 5)
            rcvd = info.value.rcvd
            assert rcvd is not None
            return rcvd.code, rcvd.reason

    code, reason = run(scenario())
    assert code == 1007
    assert reason.startswith("invalid message")
    # the server is untouched: a new client still works
    test_publish_subscribe_round_trip(server)


def test_oversize_frame_is_refused(spool_server_factory: Any) -> None:
    proc = spool_server_factory(transport_extra="<MaxMessageSize>64KB</MaxMessageSize>")

    async def scenario() -> int | None:
        async with connect(proc.ws_url, compression=None, max_size=None) as ws:
            await ws.send(LOGON)
            await ws.recv()
            await ws.send(b'{"c":"publish","t":"orders"}' + b"x" * 100_000)
            with pytest.raises(ConnectionClosed) as info:
                await asyncio.wait_for(ws.recv(), 5)
            return info.value.rcvd.code if info.value.rcvd else None

    assert run(scenario()) == 1009

    # others unaffected
    async def again() -> None:
        async with Client(proc.ws_url, "after") as c:
            await c.publish_acked("orders", {"ok": True})

    run(again())


def test_failure_reasons_on_subscribe(server: SpoolProcess) -> None:
    async def scenario() -> None:
        async with Client(server.ws_url, "fails") as c:
            cases: list[tuple[dict[str, Any], type[errors.ProtocolFailure]]] = [
                (
                    {
                        "topic": "a(",
                    },
                    errors.BadRegexTopic,
                ),
                ({"topic": "orders", "filter": "/a = "}, errors.BadFilter),
                ({"topic": "orders", "filter": "NOSUCHFN(/a)"}, errors.BadFilter),
                ({"topic": "orders", "bookmark": "not-a-bookmark"}, errors.InvalidBookmark),
                ({"topic": "unrecorded", "bookmark": "0"}, errors.InvalidTopic),
                ({"topic": "orders", "options": "bogus_option"}, errors.InvalidOptions),
                (
                    {"topic": "orders", "bookmark": "0", "options": "live,rate=10"},
                    errors.InvalidOptions,
                ),
                (
                    {
                        "topic": "orders",
                        "bookmark": "123|456|",
                        "options": "bookmark_not_found=fail",
                    },
                    errors.BookmarkNotFound,
                ),
            ]
            for kwargs, exc in cases:
                with pytest.raises(exc):
                    await c.subscribe(**kwargs)
            await c.subscribe("orders", sub_id="dup")
            with pytest.raises(errors.SubIdInUse):
                await c.subscribe("orders", sub_id="dup")
            with pytest.raises(errors.SubIdNotFound):
                await c.unsubscribe("nope")
            with pytest.raises(errors.InvalidTopic):
                await c.publish_acked("orders.*", {})
            await c.unsubscribe("dup")
            await c.unsubscribe("all")

    run(scenario())


def test_duplicate_publish_is_not_stored_or_delivered(server: SpoolProcess) -> None:
    async def scenario() -> None:
        async with (
            Client(server.ws_url, "dedupe-sub") as s,
            Client(server.ws_url, "dedupe-pub") as p,
        ):
            sub = await s.subscribe("orders", sub_id="d")
            p.publish("orders", {"n": 1}, seq=1, persisted=True)
            p.publish("orders", {"n": 2}, seq=2, persisted=True)
            with pytest.warns(ReusedSequenceWarning, match="sequence 2 is not above 2"):
                p.publish("orders", {"n": 2}, seq=2, persisted=True)  # duplicate
            p.publish("orders", {"n": 3}, seq=3, persisted=True)
            await p.wait_persisted(3)
            with pytest.raises(errors.Duplicate):
                await p._command({"c": "publish", "t": "orders", "s": 1}, b"{}")
            got = [orjson.loads((await sub.get(5)).data)["n"] for _ in range(3)]
            assert got == [1, 2, 3]
            await s.flush()
            assert sub.queue.empty()

    run(scenario())


def test_name_in_use_same_user_drops_old(server: SpoolProcess) -> None:
    async def scenario() -> None:
        old = Client(server.ws_url, "same-name")
        await old.connect()
        new = Client(server.ws_url, "same-name")
        await new.connect()
        await asyncio.wait_for(old.closed.wait(), 5)
        assert old.close_reason == "name in use"
        await new.publish_acked("orders", {"still": "works"})
        await new.close()
        await old.close()

    run(scenario())


def test_1000_concurrent_subscribers_receive_every_message(server: SpoolProcess) -> None:
    n_subs, n_msgs = 1000, 20

    async def one(i: int, ready: asyncio.Barrier, done: asyncio.Event) -> list[int]:
        async with connect(server.ws_url, compression=None) as ws:
            await ws.send(b'{"c":"logon","cid":"l","client_name":"many-%d","a":"processed"}' % i)
            await ws.recv()
            await ws.send(b'{"c":"subscribe","cid":"s","t":"orders","sub_id":"s","a":"processed"}')
            await ws.recv()
            await ready.wait()
            got: list[int] = []
            from spool.server.protocol.frame import parse_frame

            while len(got) < n_msgs:
                frame = await asyncio.wait_for(ws.recv(), 30)
                assert isinstance(frame, bytes)
                for m in parse_frame(frame).messages:
                    if m.header.get("c") == "publish":
                        got.append(orjson.loads(m.body)["i"])
            return got

    async def scenario() -> None:
        ready = asyncio.Barrier(n_subs + 1)
        done = asyncio.Event()
        tasks = [asyncio.create_task(one(i, ready, done)) for i in range(n_subs)]
        await asyncio.wait_for(ready.wait(), 120)
        async with Client(server.ws_url, "burst") as pub:
            for i in range(n_msgs):
                pub.publish("orders", {"i": i})
            results = await asyncio.wait_for(asyncio.gather(*tasks), 120)
        assert all(r == list(range(n_msgs)) for r in results)

    run(scenario())


def test_slow_client_is_disconnected_while_others_keep_receiving(spool_server_factory: Any) -> None:
    proc = spool_server_factory(
        tuning="<SlowClientBufferLimit>1MB</SlowClientBufferLimit>",
        transport_extra="<MaxMessageSize>256KB</MaxMessageSize>",
        txlog=False,
    )

    async def scenario() -> None:
        # the slow one: a raw connection that subscribes and then never reads
        slow = await connect(proc.ws_url, compression=None, max_queue=1, max_size=2**24)
        await slow.send(b'{"c":"logon","cid":"l","client_name":"slow","a":"processed"}')
        await slow.recv()
        await slow.send(b'{"c":"subscribe","cid":"s","t":"feed","sub_id":"s","a":"processed"}')
        await slow.recv()
        # stop reading: pause the transport so the kernel buffers fill
        slow.transport.pause_reading()
        async with Client(proc.ws_url, "fast") as fast, Client(proc.ws_url, "firehose") as pub:
            sub = await fast.subscribe("feed")
            body = b'{"pad":"' + b"x" * 4000 + b'"}'
            received = 0
            for _ in range(400):
                for _ in range(50):
                    pub.publish("feed", body, auto_seq=False)
                for _ in range(50):
                    await sub.get(10)
                    received += 1
                r = await _admin_clients(proc)
                if "slow" not in r:
                    break
            assert "slow" not in await _admin_clients(proc)
            assert received >= 50
            # the fast one still receives after the slow one is gone
            pub.publish("feed", b'{"after":1}', auto_seq=False)
            while True:
                m = await sub.get(10)
                if m.data == b'{"after":1}':
                    break
        slow.transport.resume_reading()
        with pytest.raises(ConnectionClosed) as info:
            while True:
                await asyncio.wait_for(slow.recv(), 10)
        assert info.value.rcvd is not None
        assert info.value.rcvd.reason == "slow client"

    run(scenario())


async def _admin_clients(proc: SpoolProcess) -> set[str]:
    import httpx

    async with httpx.AsyncClient() as http:
        r = await http.get(proc.http_url + "/api/clients")
        r.raise_for_status()
        return {c["name"] for c in r.json()["clients"]}


def test_heartbeat_timeout_closes_silent_client(server: SpoolProcess) -> None:
    async def scenario() -> None:
        async with connect(server.ws_url, compression=None) as ws:
            await ws.send(b'{"c":"logon","cid":"l","client_name":"hb","hb":0.3,"a":"processed"}')
            ack = await ws.recv()
            assert b'"hb":0.3' in ack
            beats = 0
            with pytest.raises(ConnectionClosed) as info:
                while True:
                    frame = await asyncio.wait_for(ws.recv(), 5)
                    beats += frame.count(b'"c":"heartbeat"')
            assert info.value.rcvd is not None
            assert info.value.rcvd.reason == "heartbeat"
            assert beats >= 1

    run(scenario())


def test_graceful_shutdown_closes_clients_with_shutting_down(spool_server_factory: Any) -> None:
    proc = spool_server_factory()

    async def scenario() -> None:
        c = Client(proc.ws_url, "bye")
        await c.connect()
        seq = c.publish("orders", {"last": True}, persisted=True)
        await c.wait_persisted(seq)
        await asyncio.get_running_loop().run_in_executor(None, proc.stop)
        await asyncio.wait_for(c.closed.wait(), 10)
        assert c.close_reason == "shutting down"
        assert c.close_code == 1001

    run(scenario())
    assert "shutting down" in proc.log() or "stopping" in proc.log()


def test_persisted_acks_are_conflated(server: SpoolProcess) -> None:
    async def scenario() -> None:
        async with Client(server.ws_url, "conflate") as p:
            for i in range(500):
                p.publish("orders", {"i": i}, persisted=True)
            await p.wait_persisted(p.seq)
            assert p.persisted_seq == p.seq

    run(scenario())


def test_logon_ack_carries_last_persisted_sequence(server: SpoolProcess, tmp_path: Path) -> None:
    async def scenario() -> None:
        async with Client(server.ws_url, "resume-me") as p:
            for i in range(7):
                p.publish("orders", {"i": i}, persisted=True)
            await p.wait_persisted(7)
        again = Client(server.ws_url, "resume-me")
        info = await again.connect()
        assert info.last_seq == 7
        assert info.last_bookmark is not None and info.last_bookmark.endswith("|7|")
        await again.close()

    run(scenario())


def test_disconnect_is_reported(server: SpoolProcess) -> None:
    async def scenario() -> None:
        c = Client(server.ws_url, "gone")
        await c.connect()
        await c.close()
        with pytest.raises(Disconnected):
            c.publish("orders", {})

    run(scenario())
