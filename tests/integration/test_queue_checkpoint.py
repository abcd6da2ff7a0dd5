"""The queue checkpoint against a real ``spool serve``: SIGKILL with a checkpoint older
than the acks since (it is only ever too early: nothing acked comes back, nothing
unacked is lost), and a graceful stop while the log refuses writes (the stop does not
wait for ever on the last checkpoint; the one before stands)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path
from typing import Any

import httpx
import orjson

from spool.server.client import Client, subscribe_queue
from spool.server.protocol.errors import TxlogFull
from tests.support.server import SpoolProcess, config_xml
from tests.support.wait import wait_until

QUEUE = (
    "<Queue><Name>work</Name><MessageType>json</MessageType>"
    "<UnderlyingTopic>work-in</UnderlyingTopic><LeasePeriod>30s</LeasePeriod>"
    "<MaxPerSubscriptionBacklog>500</MaxPerSubscriptionBacklog></Queue>"
)


def _server(tmp_path: Path, control: Path | None = None) -> SpoolProcess:
    retry = "<WriteRetryInterval>200ms</WriteRetryInterval>"
    xml = config_xml(tmp_path / "data", sow=QUEUE, txlog_extra=retry)
    return SpoolProcess(tmp_path / "run", xml, control=control)


def _checkpoint(tmp_path: Path) -> dict[str, Any] | None:
    found = next(iter(tmp_path.rglob("*.queues.ack")), None)
    if found is None:
        return None
    data: dict[str, Any] = orjson.loads(found.read_bytes())
    return data


async def _publish(server: SpoolProcess, numbers: range) -> None:
    async with Client(server.ws_url, "pub") as pub:
        for n in numbers:
            pub.publish("work-in", {"n": n})
        await pub.flush()


async def _consume(
    server: SpoolProcess, ack: set[int], total: int, durable: bool = True
) -> list[int]:
    """Take ``total`` messages, ack those in ``ack`` (``durable``: and wait until the acks
    are in the log on disk); returns every ``n`` received."""
    got: list[int] = []
    async with Client(server.ws_url, f"worker-{time.monotonic_ns()}") as c:
        sub = await subscribe_queue(c, "work", max_backlog=500)
        while len(got) < total:
            msg = await sub.get(30)
            n = orjson.loads(msg.data)["n"]
            got.append(n)
            if n in ack:
                msg.ack()
        await sub.settled()
        if durable:
            await c.flush()
    return got


def test_sigkill_with_a_stale_checkpoint_loses_nothing_and_returns_no_ack(
    tmp_path: Path,
) -> None:
    server = _server(tmp_path).start()
    try:
        asyncio.run(_publish(server, range(200)))
        asyncio.run(_consume(server, set(range(150)), 200))
        # the periodic checkpoint moves past the acked ones
        wait_until(lambda: (c := _checkpoint(tmp_path)) and c["queues"]["work"]["seq"] > 150
                           and c, 30, interval=0.2, message="a checkpoint past the acks")  # fmt: skip
        # more traffic after it, and a crash before the next checkpoint
        asyncio.run(_publish(server, range(200, 220)))
        asyncio.run(_consume(server, set(range(200, 210)), 70))
        server.kill()
        server.start()
        left = sorted(asyncio.run(_consume(server, set(), 60)))
        assert left == list(range(150, 200)) + list(range(210, 220))
        depth = httpx.get(f"{server.http_url}/api/queues/work", timeout=10).json()["depth"]
        assert depth == 60
    finally:
        server.stop()


def test_a_stop_while_the_log_refuses_writes_keeps_the_checkpoint_before_it(
    tmp_path: Path,
) -> None:
    """Acks taken while the log stops writing (the first ones accepted and never written,
    the next refused) take messages out of the queue in memory only. The stop does not
    wait for ever for a checkpoint past them (the log never becomes durable there): the
    one before stands, and the restart delivers those messages again."""
    control = tmp_path / "faults"
    server = _server(tmp_path, control).start()
    try:
        asyncio.run(_publish(server, range(20)))
        asyncio.run(_consume(server, set(range(10)), 20))
        wait_until(lambda: (c := _checkpoint(tmp_path)) and c["queues"]["work"]["seq"] > 10,
                   30, interval=0.2, message="a checkpoint past the acked ones")  # fmt: skip
        before = _checkpoint(tmp_path)
        # lossy: the failed fsync drops the pages it covered (as Linux may), so the acks
        # accepted before the failure are not in the file at the restart either
        control.write_text("fsync EIO\nlossy\n")
        with contextlib.suppress(TxlogFull):
            asyncio.run(_consume(server, set(range(10, 20)), 10, durable=False))
        depth = httpx.get(f"{server.http_url}/api/queues/work", timeout=10).json()["depth"]
        assert depth == 0  # gone in memory
        started = time.monotonic()
        server.stop(timeout=60)
        assert time.monotonic() - started < 45
        assert _checkpoint(tmp_path) == before
        text = "".join(p.read_text() for p in (tmp_path / "data").glob("*.events.log"))
        assert "queue_checkpoint_failed" in text
        control.write_text("")
        server.start()
        assert sorted(asyncio.run(_consume(server, set(), 10))) == list(range(10, 20))
    finally:
        server.stop()


def test_messages_whose_acks_the_log_refused_come_back_after_a_restart(
    tmp_path: Path,
) -> None:
    """Acks refused during a write outage leave the queue in memory only; once the log
    writes again, the checkpoint (the final one of the stop included) must not pass
    those messages: the restart delivers them again (at least once, never lost)."""
    control = tmp_path / "faults"
    server = _server(tmp_path, control).start()
    try:
        asyncio.run(_publish(server, range(20)))
        asyncio.run(_consume(server, set(range(10)), 20))
        control.write_text("fsync EIO\n")

        async def start_the_outage() -> None:
            async with Client(server.ws_url, "other") as pub:
                pub.publish("elsewhere", {"n": -1})
                with contextlib.suppress(TxlogFull):
                    await pub.flush()

        asyncio.run(start_the_outage())
        with contextlib.suppress(TxlogFull):
            asyncio.run(_consume(server, set(range(10, 20)), 10, durable=False))
        text = "".join(p.read_text() for p in (tmp_path / "data").glob("*.events.log"))
        assert "queue_ack_unlogged" in text
        control.write_text("")
        wait_until(lambda: not httpx.get(f"{server.http_url}/api/instance", timeout=10)
                   .json()["alerts"], 30, interval=0.2, message="the outage over")  # fmt: skip
        server.stop()
        server.start()
        assert sorted(asyncio.run(_consume(server, set(), 10))) == list(range(10, 20))
    finally:
        server.stop()
