"""Every acked message survives SIGKILL, exactly once, in order.

A publisher requests persisted acks for 200,000 messages while the broker process is
killed with SIGKILL at random moments (seeded) at least five times. After each restart the
publisher resends everything after the last *acked* sequence, so messages that were stored
but not yet acked are sent again and must be de-duplicated by the broker. At the end the
journal is read back with the transaction-log reader and checked.
"""

from __future__ import annotations

import asyncio
import random
import threading
from pathlib import Path

import pytest

from spool.server.bookmarks import pub_hash
from spool.server.client import Client, Disconnected
from tests.conftest import ServerFactory
from tests.support.server import read_records

pytestmark = [pytest.mark.faults, pytest.mark.slow]

TOTAL = 200_000
KILLS = 5
BATCH = 2_000


def test_sigkill_loses_no_acked_message_and_stores_each_once(
    spool_server_factory: ServerFactory,
) -> None:
    rng = random.Random(20261122)
    proc = spool_server_factory(name="a", journal_size="8MB")
    acked = 0
    kills = 0
    acked_at_kill: list[int] = []
    lock = threading.Lock()

    # kill at seeded random points of the publisher's progress, so every kill lands
    # while messages are in flight however fast this machine publishes
    kill_points = sorted(rng.sample(range(TOTAL // 20, TOTAL * 9 // 10), KILLS))

    def killer(stop: threading.Event) -> None:
        nonlocal kills
        for point in kill_points:
            while acked < point:
                if stop.wait(0.005):
                    return
            # a little later still, so some messages are appended but not yet acked
            if stop.wait(rng.uniform(0.0, 0.05)):
                return
            with lock:
                acked_at_kill.append(acked)
                proc.kill()
                kills += 1
                proc.start()

    async def publish_until_done() -> None:
        nonlocal acked
        while acked < TOTAL:
            with lock:
                url = proc.ws_url
            client = Client(url, "crash-publisher", reused_seq="allow")  # resends
            try:
                info = await client.connect(timeout=5)
                assert info.last_seq >= acked  # nothing acked was lost
                nxt = acked + 1
                while nxt <= TOTAL:
                    end = min(TOTAL, nxt + BATCH - 1)
                    for s in range(nxt, end + 1):
                        client.publish("orders", b'{"n":%d}' % s, seq=s, persisted=True)
                    await client.wait_persisted(end, timeout=10)
                    acked = max(acked, client.persisted_seq)
                    nxt = end + 1
            except (Disconnected, OSError, TimeoutError):
                acked = max(acked, client.persisted_seq)
                await asyncio.sleep(0.05)
            finally:
                acked = max(acked, client.persisted_seq)
                await client.close()

    stop = threading.Event()
    t = threading.Thread(target=killer, args=(stop,), daemon=True)
    t.start()
    try:
        asyncio.run(publish_until_done())
    finally:
        stop.set()
        t.join(30)
        proc.stop()
    assert kills >= KILLS
    # the kills landed while the publisher was still working
    assert sum(1 for a in acked_at_kill if a < TOTAL) >= KILLS, acked_at_kill
    records = asyncio.run(read_records(proc.config_path))
    mine = [(s, body) for h, s, body in records if h == pub_hash("crash-publisher")]
    seqs = [s for s, _ in mine]
    assert seqs == list(range(1, TOTAL + 1)), "each message exactly once, in publisher order"
    assert all(body == b'{"n":%d}' % s for s, body in mine)


def test_torn_tail_after_sigkill_is_truncated_and_server_serves(
    tmp_path: Path, spool_server_factory: ServerFactory
) -> None:
    proc = spool_server_factory(name="b")

    async def publish(n: int, start: int) -> None:
        async with Client(proc.ws_url, "torn") as c:
            for s in range(start, start + n):
                c.publish("orders", b'{"n":%d}' % s, seq=s, persisted=True)
            await c.wait_persisted(start + n - 1)

    asyncio.run(publish(100, 1))
    proc.kill()
    journals = sorted((tmp_path / "b" / "data" / "journal").glob("*.journal"))
    assert journals
    active = max(journals, key=lambda p: p.stat().st_mtime)
    data = active.read_bytes().rstrip(b"\x00")
    # cut the last record in half (a torn write)
    with active.open("r+b") as f:
        f.truncate(len(data) - 7)
    proc.start()

    async def check() -> int:
        async with Client(proc.ws_url, "torn") as c:
            assert c.logon is not None
            return c.logon.last_seq

    last = asyncio.run(check())
    assert last == 99  # the torn record is gone, everything before it kept
    asyncio.run(publish(5, 100))
    proc.stop()
    records = asyncio.run(read_records(proc.config_path))
    assert [s for h, s, _ in records if h == pub_hash("torn")] == list(range(1, 105))
    assert "truncat" in proc.log()
