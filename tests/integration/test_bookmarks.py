"""Bookmark subscriptions against a real broker process."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import httpx
import orjson
import pytest
from websockets.asyncio.client import connect

from spool.server.bookmarks import format_bookmark, pub_hash
from spool.server.client import Client, Message
from spool.server.protocol import errors
from spool.server.protocol.frame import parse_frame
from tests.support.server import SpoolProcess, config_xml
from tests.support.wait import async_wait_until


def run(coro: Any) -> Any:
    return asyncio.run(coro)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SpoolProcess]:
    work = tmp_path_factory.mktemp("bookmarks")
    proc = SpoolProcess(work, config_xml(work / "data", topics=("^bm-", "^cut$", "^pr$")))
    proc.start()
    yield proc
    proc.stop()


async def _publish(
    url: str, name: str, topic: str, values: list[int], field: str = "n"
) -> list[str]:
    """Publish values with persisted acks; return their bookmarks."""
    async with Client(url, name) as c:
        first = c.seq + 1
        for v in values:
            c.publish(topic, {field: v}, persisted=True)
        await c.wait_persisted(c.seq)
        return [format_bookmark(pub_hash(name), s) for s in range(first, c.seq + 1)]


async def _collect(sub: Any, n: int, timeout: float = 10.0) -> list[Message]:
    return [await sub.get(timeout) for _ in range(n)]


def _ns(msgs: list[Message]) -> list[int]:
    return [orjson.loads(m.data)["n"] for m in msgs]


def test_every_start_point_and_range_form(server: SpoolProcess) -> None:
    topic = "bm-forms"

    async def scenario() -> None:
        bms = await _publish(server.ws_url, "forms-pub", topic, list(range(10)))
        async with Client(server.ws_url, "forms-sub") as c:

            async def replay(
                bm: str, *, count: int, options: str | None = None, completed: bool = False
            ) -> list[int]:
                sub = await c.subscribe(topic, bookmark=bm, options=options, completed=completed)
                got = _ns(await _collect(sub, count))
                if completed:
                    await asyncio.wait_for(sub.completed.wait(), 10)
                await c.unsubscribe(sub.sub_id)
                return got

            # EPOCH: everything, with bookmarks on each message
            sub = await c.subscribe(topic, bookmark="0", completed=True)
            msgs = await _collect(sub, 10)
            assert _ns(msgs) == list(range(10))
            assert [m.bookmark for m in msgs] == bms
            await asyncio.wait_for(sub.completed.wait(), 10)  # at the cut-over
            await c.unsubscribe(sub.sub_id)
            # a bookmark: resume after it
            assert await replay(bms[4], count=5) == [5, 6, 7, 8, 9]
            # a list: start after the oldest one found (unknown ones ignored)
            assert await replay(f"{bms[7]},{bms[2]},99|99|", count=7) == list(range(3, 10))
            # ranges, inclusive and exclusive at each end
            assert await replay(f"[{bms[2]}:{bms[5]}]", count=4, completed=True) == [2, 3, 4, 5]
            assert await replay(f"({bms[2]}:{bms[5]}]", count=3, completed=True) == [3, 4, 5]
            assert await replay(f"[{bms[2]}:{bms[5]})", count=3, completed=True) == [2, 3, 4]
            assert await replay(f"({bms[2]}:{bms[5]})", count=2, completed=True) == [3, 4]
            # lists at either end of a range
            assert await replay(
                f"[{bms[6]},{bms[3]}:{bms[8]},{bms[7]}]", count=6, completed=True
            ) == [3, 4, 5, 6, 7, 8]
            # timestamps: before the log = EPOCH
            assert await replay("20000101T000000Z", count=10) == list(range(10))
            # NOW: only new messages
            now_sub = await c.subscribe(topic, bookmark="0|1|")
            await _publish(server.ws_url, "forms-pub", topic, [100])
            assert _ns(await _collect(now_sub, 1)) == [100]
            await c.unsubscribe(now_sub.sub_id)
            # unknown bookmark: NOW by default, EPOCH or failure on request
            unk = await c.subscribe(topic, bookmark="12345|1|")
            await _publish(server.ws_url, "forms-pub", topic, [101])
            assert _ns(await _collect(unk, 1)) == [101]
            await c.unsubscribe(unk.sub_id)
            got = await replay("12345|1|", count=12, options="bookmark_not_found=epoch")
            assert got == [*range(10), 100, 101]
            with pytest.raises(errors.BookmarkNotFound):
                await c.subscribe(topic, bookmark="12345|1|", options="bookmark_not_found=fail")

    run(scenario())


def test_time_range_with_future_end_completes_when_the_time_comes(server: SpoolProcess) -> None:
    topic = "bm-time"

    async def scenario() -> None:
        await _publish(server.ws_url, "time-pub", topic, [1, 2])
        end = datetime.fromtimestamp(datetime.now(UTC).timestamp() + 2, UTC)
        end_text = end.strftime("%Y%m%dT%H%M%SZ")
        async with Client(server.ws_url, "time-sub") as c:
            sub = await c.subscribe(topic, bookmark=f"[0:{end_text}]", completed=True)
            assert _ns(await _collect(sub, 2)) == [1, 2]
            await _publish(server.ws_url, "time-pub", topic, [3])
            assert _ns(await _collect(sub, 1)) == [3]
            # the completed ack arrives once the end time passes, with no message
            await asyncio.wait_for(sub.completed.wait(), 15)
            assert datetime.now(UTC) >= end.replace(microsecond=0)
            await _publish(server.ws_url, "time-pub", topic, [4])
            await c.flush()
            with pytest.raises(TimeoutError):
                await sub.get(0.5)

    run(scenario())


def test_options_top_n_timestamp_and_filter(server: SpoolProcess) -> None:
    topic = "bm-opts"

    async def scenario() -> None:
        await _publish(server.ws_url, "opts-pub", topic, list(range(20)))
        async with Client(server.ws_url, "opts-sub") as c:
            sub = await c.subscribe(
                topic, bookmark="0", options="top_n=5,timestamp", completed=True
            )
            msgs = await _collect(sub, 5)
            assert _ns(msgs) == [0, 1, 2, 3, 4]
            assert all(m.timestamp and m.timestamp.endswith("Z") for m in msgs)
            await asyncio.wait_for(sub.completed.wait(), 10)
            flt = await c.subscribe(topic, bookmark="0", filter="/n % 5 = 0")
            assert _ns(await _collect(flt, 4)) == [0, 5, 10, 15]
            # message functions see the replayed record's metadata
            ts = await c.subscribe(
                topic,
                bookmark="0",
                filter="TIMESTAMP() IS NOT NULL AND BOOKMARK() IS NOT NULL AND TOPIC() = 'bm-opts'",
            )
            assert _ns(await _collect(ts, 20)) == list(range(20))

    run(scenario())


@pytest.mark.slow
def test_cut_over_ten_subscribers_no_gap_no_duplicate(server: SpoolProcess) -> None:
    """10 subscribers start at EPOCH at random moments while 200,000 messages are published."""
    topic = "cut"
    total = 200_000
    rng = random.Random(7)
    starts = sorted(rng.randrange(1_000, total - 20_000) for _ in range(10))

    async def subscriber(i: int, started: asyncio.Event) -> list[int]:
        async with Client(server.ws_url, f"cut-sub-{i}", queue_size=100_000) as c:
            sub = await c.subscribe(topic, bookmark="0")
            started.set()
            got: list[int] = []
            while len(got) < total:
                m = await sub.get(60)
                got.append(int(m.data[5:-1]))
            return got

    async def scenario() -> None:
        tasks: list[asyncio.Task[list[int]]] = []
        async with Client(server.ws_url, "cut-pub") as pub:
            next_start = 0
            for n in range(total):
                pub.publish(topic, b'{"n":%d}' % n, persisted=True)
                if n % 1000 == 999:
                    await pub.wait_persisted(pub.seq)
                while next_start < len(starts) and n >= starts[next_start]:
                    ev = asyncio.Event()
                    tasks.append(asyncio.create_task(subscriber(next_start, ev)))
                    await ev.wait()
                    next_start += 1
            await pub.wait_persisted(pub.seq)
        results = await asyncio.wait_for(asyncio.gather(*tasks), 300)
        for r in results:
            assert r == list(range(total))

    run(scenario())


def test_pause_resume_together_interleaves_in_log_order(server: SpoolProcess) -> None:
    """Three paused subscriptions resumed in one command share one cursor: on the wire their
    messages arrive interleaved exactly in log order (read raw, in arrival order)."""

    async def scenario() -> None:
        async with Client(server.ws_url, "pr-pub") as pub:
            for n in range(30):
                pub.publish("pr", {"n": n, "k": n % 3})
            await pub.flush()
        async with connect(server.ws_url, compression=None) as ws:
            await ws.send(b'{"c":"logon","cid":"l","client_name":"pr-sub","a":"processed"}')
            await ws.recv()
            for k in range(3):
                header = {
                    "c": "subscribe",
                    "cid": f"s{k}",
                    "t": "pr",
                    "sub_id": f"p{k}",
                    "bm": "0",
                    "f": f"/k = {k}",
                    "o": "pause",
                    "a": "processed",
                }
                await ws.send(orjson.dumps(header))
            await ws.send(
                b'{"c":"subscribe","cid":"r","t":"pr","sub_id":"p0,p1,p2",'
                b'"o":"resume","a":"processed"}'
            )
            arrivals: list[tuple[str, int]] = []
            # one deadline for the whole replay, not per frame: the cursor scans the
            # module's shared log from EPOCH (earlier tests filled it), and on a loaded
            # machine a stretch without a matching record can take longer than a frame
            async with asyncio.timeout(120):
                while len(arrivals) < 30:
                    frame = await ws.recv()
                    assert isinstance(frame, bytes)
                    for m in parse_frame(frame).messages:
                        if m.header.get("c") == "publish":
                            arrivals.append((m.header["sids"], orjson.loads(m.body)["n"]))
                        else:
                            assert m.header.get("status") == "success", m.header
        assert [n for _, n in arrivals] == list(range(30))
        assert [sid for sid, _ in arrivals] == [f"p{n % 3}" for n in range(30)]

    run(scenario())


def test_pause_and_resume_over_rest(server: SpoolProcess) -> None:
    async def scenario() -> None:
        await _publish(server.ws_url, "rest-pub", "bm-rest", list(range(5)))
        async with Client(server.ws_url, "rest-sub") as c, httpx.AsyncClient() as http:
            sub = await c.subscribe("bm-rest", bookmark="0", sub_id="r1", options="pause")
            await c.flush()
            assert sub.queue.empty()
            r = await http.get(server.http_url + "/api/subscriptions")
            states = {(s["client"], s["sub_id"]): s["state"] for s in r.json()["subscriptions"]}
            assert states[("rest-sub", "r1")] == "paused"
            r = await http.post(server.http_url + "/api/subscriptions/rest-sub/r1/resume")
            assert r.status_code == 200, r.text
            assert _ns(await _collect(sub, 5)) == list(range(5))

            async def state() -> str:
                r = await http.get(server.http_url + "/api/subscriptions")
                return {(s["client"], s["sub_id"]): s["state"] for s in r.json()["subscriptions"]}[
                    ("rest-sub", "r1")
                ]

            async def is_live() -> bool:
                return await state() == "live"

            # caught up again after the resume: live
            await async_wait_until(is_live, timeout=10, message="state live after resume")
            r = await http.post(server.http_url + "/api/subscriptions/rest-sub/r1/pause")
            assert r.status_code == 200
            r = await http.get(server.http_url + "/api/subscriptions")
            states = {(s["client"], s["sub_id"]): s["state"] for s in r.json()["subscriptions"]}
            assert states[("rest-sub", "r1")] == "paused"

    run(scenario())


def test_periodic_position_ack_for_sparse_subscriber(spool_server_factory: Any) -> None:
    proc = spool_server_factory(tuning="<PersistedAckInterval>200ms</PersistedAckInterval>")

    async def scenario() -> None:
        async with Client(proc.ws_url, "sparse") as c:
            sub = await c.subscribe("orders", bookmark="0", filter="/never = 1")
            bms = await _publish(proc.ws_url, "sparse-pub", "orders", [1, 2, 3])
            await async_wait_until(
                lambda: sub.position_bookmark == bms[-1],
                timeout=10,
                message="a position ack at the last durable bookmark",
            )
            assert sub.queue.empty()

    run(scenario())


def test_bookmark_subscription_on_unrecorded_topic_fails(server: SpoolProcess) -> None:
    async def scenario() -> None:
        async with Client(server.ws_url, "unrec") as c:
            with pytest.raises(errors.InvalidTopic):
                await c.subscribe("not-recorded", bookmark="0")

    run(scenario())


def test_live_option_delivers_before_persistence_default_after(spool_server_factory: Any) -> None:
    # a long group-commit window makes the difference observable
    proc = spool_server_factory(flush_interval="100ms")

    async def scenario() -> None:
        async with Client(proc.ws_url, "durability") as c:
            # the first group commit runs at once; the next one waits for the window
            await c.wait_persisted(c.publish("warm-up", {}, persisted=True))
            live = await c.subscribe("orders", bookmark="0|1|", options="live", sub_id="lv")
            durable = await c.subscribe("orders", bookmark="0|1|", sub_id="dr")
            seq = c.publish("orders", {"x": 1}, persisted=True)
            await live.get(5)
            assert c.persisted_seq < seq, "live delivery came before the persisted ack"
            await durable.get(5)
            assert c.persisted_seq >= seq, "default delivery waits for persistence"

    run(scenario())


def test_correlation_id_survives_live_and_replay(server: SpoolProcess) -> None:
    async def scenario() -> None:
        async with Client(server.ws_url, "corr") as c:
            live = await c.subscribe("bm-corr", sub_id="lv")
            c.publish("bm-corr", {"n": 1}, correlation_id="order-42", persisted=True)
            c.publish("bm-corr", {"n": 2}, persisted=True)
            await c.wait_persisted(c.seq)
            got_live = [(await live.get(5)).correlation_id for _ in range(2)]
            replay = await c.subscribe("bm-corr", bookmark="0", sub_id="rp")
            got_replay = [(await replay.get(5)).correlation_id for _ in range(2)]
            assert got_live == got_replay == ["order-42", None]

    run(scenario())


def test_replay_lookups_that_read_files_keep_command_order(spool_server_factory: Any) -> None:
    """After a restart every bookmark and time lives only in the journal files: planning
    reads them in a worker thread, and the commands that follow in the same frame still
    run after the subscribe, in order."""
    proc = spool_server_factory()

    async def scenario() -> None:
        bms = await _publish(proc.ws_url, "old-pub", "orders", list(range(1, 301)))
        proc.stop()
        proc.start()
        start_bm = bms[99]  # resume after n = 100
        frame = b"".join(
            orjson.dumps(h)
            for h in (
                {"c": "subscribe", "t": "orders", "sub_id": "a", "bm": start_bm,
                 "a": "processed", "cid": "s1", "l": 0},
                {"c": "subscribe", "t": "orders", "sub_id": "b",
                 "bm": f"[{bms[9]}:{bms[19]}]", "a": "processed,completed", "cid": "s2", "l": 0},
                {"c": "unsubscribe", "sub_id": "a", "a": "processed", "cid": "u1", "l": 0},
            )
        )  # fmt: skip
        async with connect(proc.ws_url, compression=None) as ws:
            await ws.send(orjson.dumps({"c": "logon", "cid": "L", "client_name": "late", "l": 0}))
            await ws.send(frame)
            acks: list[dict[str, Any]] = []
            b_ns: list[int] = []
            a_ns: list[int] = []

            async def until_done() -> None:
                while (
                    not any(h.get("a") == "completed" for h in acks)
                    or len([h for h in acks if h.get("a") == "processed"]) < 3
                ):
                    data = await ws.recv()
                    assert isinstance(data, bytes)
                    for m in parse_frame(data).messages:
                        h = m.header
                        if (
                            h.get("c") == "ack"
                            and h.get("a") != "persisted"
                            and h.get("cid") != "L"
                        ):
                            acks.append(h)
                        elif h.get("c") == "publish":
                            (b_ns if h["sids"] == "b" else a_ns).append(orjson.loads(m.body)["n"])

            await asyncio.wait_for(until_done(), 15)
        processed = [(h["cid"], h["status"]) for h in acks if h.get("a") == "processed"]
        assert processed == [("s1", "success"), ("s2", "success"), ("u1", "success")]
        assert b_ns == list(range(10, 21))
        # whatever "a" delivered before its unsubscribe starts right after its bookmark
        assert a_ns == list(range(101, 101 + len(a_ns)))

    run(scenario())
