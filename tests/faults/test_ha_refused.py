"""The Python HA client against a real broker process whose disk fills up and frees while
the client keeps publishing: what the broker refused (``txlog full``) is kept in the
client's file store and sent again, so the log holds every message exactly once, in order
(tests/support/faulty_serve.py fails the journal's writes with ENOSPC while its control
file says so)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from spool.server.bookmarks import pub_hash
from spool.server.client import (
    DefaultServerChooser,
    ExponentialDelayStrategy,
    FilePublishStore,
    HAClient,
)
from spool.server.protocol.errors import TxlogFull
from tests.support.server import SpoolProcess, config_xml, read_records
from tests.support.wait import async_wait_until

pytestmark = [pytest.mark.faults]

RETRY = "<WriteRetryInterval>200ms</WriteRetryInterval>"


def _outage(proc: SpoolProcess) -> object:
    r = httpx.get(proc.http_url + "/api/transaction_log", timeout=10)
    r.raise_for_status()
    return r.json()["write_outage"]


def test_a_disk_that_fills_and_frees_under_an_ha_publisher_loses_and_reorders_nothing(
    tmp_path: Path,
) -> None:
    control = tmp_path / "faults"
    proc = SpoolProcess(
        tmp_path / "run", config_xml(tmp_path / "data", txlog_extra=RETRY), control=control
    ).start()
    try:
        total = asyncio.run(_publish_through_a_full_disk(proc, control, tmp_path / "pub.store"))
        proc.stop()
        mine = [(s, b) for h, s, b in asyncio.run(read_records(proc.config_path))
                if h == pub_hash("ha-refused")]  # fmt: skip
        assert mine == [(n, b'{"n":%d}' % n) for n in range(1, total + 1)]
    finally:
        proc.stop()


async def _publish_through_a_full_disk(proc: SpoolProcess, control: Path, store: Path) -> int:
    errors: list[BaseException] = []
    client = HAClient(
        "ha-refused", publish_store=FilePublishStore(store),
        chooser=DefaultServerChooser([proc.ws_url]),
        delay=ExponentialDelayStrategy(initial=0.05, maximum=0.5), connect_timeout=5,
    )  # fmt: skip
    client.exception_listener = errors.append
    n = 0

    def burst(count: int) -> None:
        nonlocal n
        for _ in range(count):
            n += 1
            assert client.publish("orders", b'{"n":%d}' % n) == n

    await client.connect_and_logon()
    try:
        burst(50)
        await client.publish_flush(timeout=10)
        # the disk fills: once the broker knows, a burst is refused (each one reported)
        control.write_text("write ENOSPC\n")
        while _outage(proc) is None:
            burst(5)
            await asyncio.sleep(0.02)
        burst(20)
        await async_wait_until(
            lambda: sum(isinstance(e, TxlogFull) for e in errors) >= 20,
            timeout=10, message="the refusals",
        )  # fmt: skip
        # the disk frees while publishes keep coming: some reach the broker after its log
        # took writes again and before the client sent the refused ones again
        control.unlink()
        while _outage(proc) is not None:
            burst(5)
            await asyncio.sleep(0.02)
        for _ in range(20):
            burst(5)
            await asyncio.sleep(0.01)
        await client.publish_flush(timeout=20)
        assert client.publish_store.unpersisted_count() == 0
        return n
    finally:
        await client.close()
