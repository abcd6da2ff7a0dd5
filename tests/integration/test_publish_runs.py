"""Batched publishing: a frame of many commands behaves exactly like one command per frame.

The broker handles runs of plain publishes in a frame together (the hot path of
``Broker.publish_run``). The oracle here is the same broker taking the same commands one
per frame: the subscriber must see the same messages in the same order, and the
publisher the same acks (processed/received in order, failures with the same reasons,
the same highest persisted sequence), for a script that mixes plain publishes with every
case the run hands to the general path.

A flush is acked once what came before it is also persisted (docs/protocol.md "Flush"),
so where its ack falls among the acks of later commands depends on when the log's write
completes: the flushes are compared apart, each acked once, successfully, and after every
ack of the commands before it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from websockets.asyncio.client import ClientConnection, connect

from spool.server.protocol.frame import parse_frame
from tests.support.server import SpoolProcess, config_xml
from tests.support.wait import async_wait_until


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SpoolProcess]:
    work = tmp_path_factory.mktemp("runs")
    proc = SpoolProcess(work, config_xml(work / "data", topics=("^orders",)))
    proc.start()
    yield proc
    proc.stop()


def _script(p: str) -> list[bytes]:
    """Commands of one publisher; ``p`` keeps each variant's topics apart."""

    def pub(topic: str, body: dict[str, Any], **h: Any) -> bytes:
        b = orjson.dumps(body)
        return orjson.dumps({"c": "publish", "t": topic, **h, "l": len(b)}) + b

    a, b, free = f"orders/{p}/a", f"orders/{p}/b", f"free/{p}/x"
    out = [
        pub(a, {"n": 1}, s=1),  # first publish to a topic
        pub(a, {"n": 2}, s=2, a="processed", cid="c2"),
        pub(a, {"n": 3}, s=3),
        pub(a, {"n": 3}, s=3, a="processed,persisted", cid="c4"),  # duplicate
        pub(a, {"n": 4}, s=4, a="received", cid="c5"),
        orjson.dumps({"c": "flush", "cid": "f1", "a": "processed", "l": 0}),  # not a publish
        pub(b, {"n": 5}, s=5),  # another topic in the middle
        pub(b, {"n": 6}, s=6, a="persisted"),
        pub(a, {"n": 7}, s=7, zz=1),  # a field the run does not know
        pub(a, {"n": 0}, s="bad", cid="c10"),  # invalid: a failure ack
        pub(a, {"n": 8}),  # server-assigned sequence
        pub(a, {"n": 9}, s=9, x="corr-9"),  # correlation id
        pub(free, {"n": 10}, s=10, a="persisted,processed", cid="c13"),  # not recorded
        pub(free, {"n": 11}, s=11),
        orjson.dumps({"c": "publish", "t": a, "s": 12, "a": "bogus", "cid": "c15", "l": 2})
        + b"{}",  # unknown ack kind: invalid message
    ]
    out += [pub(a, {"n": n}, s=n, a="processed", cid=f"k{n}") for n in range(13, 40)]
    out += [pub(a, {"n": n}, s=n) for n in range(40, 300)]
    out.append(orjson.dumps({"c": "flush", "cid": "end", "a": "processed", "l": 0}))
    return out


async def _recv_headers(ws: ClientConnection, out: list[tuple[dict[str, Any], bytes]]) -> None:
    async for data in ws:
        assert isinstance(data, bytes)
        out.extend((m.header, m.body) for m in parse_frame(data).messages)


async def _logon(ws: ClientConnection, name: str) -> None:
    await ws.send(orjson.dumps({"c": "logon", "cid": "L", "client_name": name, "a": "processed"}))
    ack = parse_frame(await ws.recv()).messages[0].header  # type: ignore[arg-type]
    assert ack["status"] == "success", ack


async def _variant(url: str, p: str, batched: bool) -> tuple[list[Any], list[Any], int]:
    """Run the script; return (deliveries, non-persisted acks, highest persisted s)."""
    async with connect(url, compression=None) as sub, connect(url, compression=None) as pub:
        await _logon(sub, f"sub-{p}")
        await sub.send(
            orjson.dumps(
                {
                    "c": "subscribe",
                    "cid": "S",
                    "t": f"^(orders|free)/{p}/",
                    "sub_id": "s",
                    "a": "processed",
                }
            )
        )
        ack = parse_frame(await sub.recv()).messages[0].header  # type: ignore[arg-type]
        assert ack["status"] == "success", ack
        await _logon(pub, f"pub-{p}")
        got: list[tuple[dict[str, Any], bytes]] = []
        acks: list[tuple[dict[str, Any], bytes]] = []
        readers = [
            asyncio.ensure_future(_recv_headers(sub, got)),
            asyncio.ensure_future(_recv_headers(pub, acks)),
        ]
        script = _script(p)
        if batched:
            await pub.send(b"".join(script))
        else:
            for frame in script:
                await pub.send(frame)
        expected = 298  # n = 1..299 once, without the invalid n = 12

        try:
            await async_wait_until(
                lambda: len(got) >= expected and any(h.get("cid") == "end" for h, _ in acks),
                timeout=15,
                message="every delivery and the last ack",
            )
        except TimeoutError:
            pytest.fail(f"{p}: {len(got)} delivered, acks {[h for h, _ in acks][-8:]}")
        for r in readers:
            r.cancel()
    deliveries = [
        (h["t"].replace(f"/{p}", ""), h.get("sids"), h.get("bm", "").split("|")[1:], h.get("x"),
         orjson.loads(b)["n"])
        for h, b in got
    ]  # fmt: skip
    plain_acks = [
        (h["a"], h.get("cid"), h["status"], h.get("reason"), h.get("s"))
        for h, _ in acks
        if h.get("a") != "persisted"
    ]
    _check_flushes(plain_acks)
    top = max(h["s"] for h, _ in acks if h.get("a") == "persisted" and "s" in h)
    return deliveries, [a for a in plain_acks if a[1] not in _FLUSHES], top


#: the script's flushes, each with the commands before it that are answered
_FLUSHES = {
    "f1": ("c2", "c4", "c5"),
    "end": ("c2", "c4", "c5", "c10", "c13", "c15", *(f"k{n}" for n in range(13, 40))),
}


def _check_flushes(acks: list[tuple[Any, ...]]) -> None:
    """Each flush is acked once, successfully, after every ack of the commands before it."""
    cids = [a[1] for a in acks]
    for flush, before in _FLUSHES.items():
        assert cids.count(flush) == 1, (flush, acks)
        at = cids.index(flush)
        assert acks[at][2] == "success", acks[at]
        assert all(cid in cids[:at] for cid in before), (flush, acks)


def test_a_batched_frame_behaves_like_one_command_per_frame(server: SpoolProcess) -> None:
    async def scenario() -> None:
        one = await _variant(server.ws_url, "one", batched=False)
        many = await _variant(server.ws_url, "many", batched=True)
        assert many[0] == one[0]
        assert many[1] == one[1]
        assert many[2] == one[2] == 10
        # and the oracle itself is what the script says
        ns = [d[4] for d in one[0]]
        assert sorted(ns) == [n for n in range(1, 300) if n != 12]
        assert [d[3] for d in one[0] if d[3]] == ["corr-9"]
        reasons = {a[1]: a[3] for a in one[1] if a[2] == "failure"}
        assert reasons == {"c4": "duplicate", "c10": "invalid message", "c15": "invalid message"}

    asyncio.run(scenario())
