"""Queues against a real ``spool serve``: consumer processes SIGKILLed mid-lease, the
REST view, and a restart of the broker on its files (state recovered from the log)."""

from __future__ import annotations

import asyncio
import itertools
import signal
import subprocess
import sys
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from spool.server.client import Client, subscribe_queue
from tests.support.server import ROOT, SpoolProcess
from tests.support.wait import wait_until

ServerFactory = Callable[..., SpoolProcess]

QUEUE = (
    "<Queue><Name>work</Name><MessageType>json</MessageType>"
    "<UnderlyingTopic>work-in</UnderlyingTopic><LeasePeriod>30s</LeasePeriod>"
    "<MaxPerSubscriptionBacklog>4</MaxPerSubscriptionBacklog></Queue>"
)


def queue_server(factory: ServerFactory, **kw: Any) -> SpoolProcess:
    return factory(sow=QUEUE, journal_size="8MB", **kw)


def journal(path: Path) -> list[tuple[str, int, int, int]]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        kind, n, dc, pid = line.split()
        out.append((kind, int(n), int(dc), int(pid)))
    return out


def start_consumer(server: SpoolProcess, name: str, path: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.support.queue_consumer", server.ws_url, name, "work",
         str(path), "4"],
        cwd=ROOT,
    )  # fmt: skip


def api(server: SpoolProcess, path: str) -> Any:
    r = httpx.get(server.http_url + path, timeout=10)
    assert r.status_code == 200, r.text
    return r.json()


def test_exactly_once_processing_across_sigkilled_consumers(
    spool_server_factory: ServerFactory, tmp_path: Path
) -> None:
    """Consumers are SIGKILLed mid-lease, again and again. Every message is acked once;
    a message whose processing began without an ack comes again, with a delivery count
    above 1, to another consumer; nothing acked is delivered again."""
    server = queue_server(spool_server_factory)
    total = 400
    path = tmp_path / "journal.txt"
    procs: list[subprocess.Popen[bytes]] = []
    killed: set[int] = set()

    def start(i: int) -> subprocess.Popen[bytes]:
        p = start_consumer(server, f"worker-{i}", path)
        procs.append(p)
        wait_until(lambda: any(k == "R" and pid == p.pid for k, _, _, pid in journal(path)),
                   30, message="consumer subscribed")  # fmt: skip
        return p

    try:
        live = [start(i) for i in range(3)]

        async def publish() -> None:
            async with Client(server.ws_url, "pub") as pub:
                for n in range(total):
                    pub.publish("work-in", {"n": n})
                await pub.flush()

        asyncio.run(publish())
        # kill a consumer each time the consumers together began 60 more messages
        for round_ in range(4):
            target = 60 * (round_ + 1)
            wait_until(lambda t=target: sum(1 for r in journal(path) if r[0] == "P") >= t,
                       60, message=f"{target} messages begun")  # fmt: skip
            victim = live.pop(0)
            victim.send_signal(signal.SIGKILL)
            victim.wait()
            killed.add(victim.pid)
            live.append(start(10 + round_))
        wait_until(lambda: api(server, "/api/queues/work")["depth"] == 0, 120,
                   message="the queue drained")  # fmt: skip
        info = api(server, "/api/queues/work")
        assert info["removed"] == {"acked": total} and info["leased"] == 0
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
                p.wait()

    rows = journal(path)
    began: dict[int, list[tuple[int, int]]] = defaultdict(list)
    acked: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for kind, n, dc, pid in rows:
        if kind == "P":
            began[n].append((dc, pid))
        elif kind == "A":
            acked[n].append((dc, pid))
    assert set(began) == set(range(total))  # every message was processed
    for n in range(total):
        deliveries = began[n]
        # an ack is written once per message: a processing that finished is never repeated
        assert len(acked[n]) <= 1, (n, acked[n])
        assert [dc for dc, _ in deliveries] == sorted(dc for dc, _ in deliveries), n
        # every delivery but the last went to a consumer that was killed before acking,
        # and the next one carried a higher delivery count
        for (dc, pid), (next_dc, _) in itertools.pairwise(deliveries):
            assert pid in killed and next_dc > dc, (n, deliveries)
        if not acked[n]:  # killed between the broker's ack and its journal line
            assert deliveries[-1][1] in killed, (n, deliveries)
    # each victim held a full backlog of leases when it died (the queue never ran dry
    # before the last kill): those came again to others, with a delivery count above 1
    redelivered = {n for n in range(total) if any(dc > 1 for dc, _ in began[n])}
    assert len(redelivered) >= len(killed), redelivered


def test_rest_view_and_state_recovered_after_a_restart(
    spool_server_factory: ServerFactory,
) -> None:
    server = queue_server(spool_server_factory)

    async def first() -> None:
        async with Client(server.ws_url, "pub") as pub, Client(server.ws_url, "c") as c:
            for n in range(10):
                pub.publish("work-in", {"n": n})
            await pub.flush()
            sub = await subscribe_queue(c, "work", max_backlog=4)
            got = [await sub.get(10) for _ in range(4)]
            assert [m.json()["n"] for m in got] == [0, 1, 2, 3]
            info = api(server, "/api/queues/work")
            assert (info["depth"], info["leased"], info["backlog"]) == (10, 4, 6)
            assert info["proxied_transfer"] is False and info["kind"] == "Queue"
            assert [lease["deliveries"] for lease in info["leases"]] == [1, 1, 1, 1]
            for m in got[:3]:
                m.ack()
            await sub.settled()
            assert sum(a.header["records_deleted"] for a in sub.acks) == 3
            await c.flush()

    asyncio.run(first())
    assert api(server, "/api/queues")["queues"][0]["depth"] == 7
    r = httpx.post(server.http_url + "/api/queues/work/enable_proxied_transfer", timeout=10)
    assert r.status_code == 409 and "not replicated" in r.json()["detail"]
    assert httpx.get(server.http_url + "/api/queues/nope", timeout=10).status_code == 404
    server.stop()
    server.start()

    async def second() -> None:
        assert api(server, "/api/queues/work")["depth"] == 7
        async with Client(server.ws_url, "c2") as c:
            sub = await subscribe_queue(c, "work", max_backlog=4)
            seen = []
            async for m in sub.auto_ack():
                seen.append(m.json()["n"])
                if len(seen) == 7:
                    m.ack()
                    break
            await sub.settled()
            assert sorted(seen) == [3, 4, 5, 6, 7, 8, 9]

    asyncio.run(second())
    wait_until(lambda: api(server, "/api/queues/work")["depth"] == 0, 20, message="drained")
