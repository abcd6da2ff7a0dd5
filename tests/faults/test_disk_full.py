"""A full disk and a failing disk are survived, with real processes.

The journal lives on a small tmpfs (``mount -t tmpfs -o size=...``, which fails with
``ENOSPC`` at exactly its size; root only, as CI runs), or the broker runs under
tests/support/faulty_serve.py, whose file seam fails ``fsync`` with ``EIO`` while a control
file says so. What must hold:

- ``flush`` and persisted-ack waiters get ``txlog full`` with the cause at once;
- a bookmark replay keeps delivering every durable record and is not failed;
- every dashboard page shows a banner (cause, since when), ``/api`` says the same;
- once the disk takes writes again the broker writes what it had accepted, acks it,
  takes publishes again (the refused one first: the publisher sends it again), and all of
  it is there after a restart;
- a broker starts on a disk without room for its preallocated journals, and says so.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx
import pytest

from spool.server.client import Client
from spool.server.protocol import errors
from spool.web.dashboard import PAGES
from tests.support.disk import fill, tmpfs
from tests.support.server import SpoolProcess, config_xml
from tests.support.wait import async_wait_until, wait_until

pytestmark = [pytest.mark.faults, pytest.mark.slow]

RETRY = "<WriteRetryInterval>200ms</WriteRetryInterval>"  # retries within 3.2 s at most
BODY = b'{"pad":"' + b"x" * 2000 + b'"}'


def api(proc: SpoolProcess, path: str) -> dict[str, object]:
    r = httpx.get(proc.http_url + path, timeout=10)
    r.raise_for_status()
    data = r.json()
    assert isinstance(data, dict)
    return data


def events(proc: SpoolProcess, name: str) -> list[str]:
    return [line for line in proc.log().splitlines() if f'"event":"{name}"' in line]


def banners_on_every_page(proc: SpoolProcess, alert_id: str) -> list[str]:
    """The dashboard pages that show the banner of ``alert_id``."""
    return [
        page.path
        for page in PAGES
        if f'data-alert="{alert_id}"' in httpx.get(proc.http_url + page.path, timeout=10).text
    ]


class Publisher:
    """Publishes 2 KB messages with persisted acks and keeps count."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.published = 0

    async def until_refused(self, limit: int = 20_000) -> errors.ProtocolFailure:
        """Publish in batches of 20 until the broker says ``txlog full``."""
        for _ in range(limit // 20):
            for _ in range(20):
                self.published = self.client.publish("orders", BODY, persisted=True)
            try:
                await self.client.wait_persisted(self.published, timeout=30)
            except errors.TxlogFull as exc:
                return exc
        raise AssertionError("the disk never filled up")


def test_a_full_disk_refuses_promptly_keeps_replays_and_resumes_when_room_is_made(
    tmp_path: Path,
) -> None:
    disk = tmp_path / "disk"
    with tmpfs(disk, "12m"):
        data = disk / "data"
        xml = config_xml(data, journal_size="1MB", txlog_extra=RETRY)
        proc = SpoolProcess(tmp_path / "run", xml).start()
        filler = fill(disk, leave=3 << 20)
        try:
            asyncio.run(_full_disk_scenario(proc, filler))
            proc.stop()
            # everything acknowledged is there after a restart, in order
            proc.start()
            total = asyncio.run(_replay_all(proc))
            assert total == _Seen.persisted
        finally:
            proc.stop()


class _Seen:
    persisted = 0


async def _full_disk_scenario(proc: SpoolProcess, filler: Path) -> None:
    # "pub" sends a refused publish again, with its own sequence, on purpose
    async with (
        Client(proc.ws_url, "pub", reused_seq="allow") as c,
        Client(proc.ws_url, "reader") as r,
    ):
        sub = await r.subscribe("orders", bookmark="0")
        pub = Publisher(c)
        refused = await pub.until_refused()
        assert "No space left on device" in refused.detail and "since" in refused.detail
        durable = c.persisted_seq
        assert durable > 100
        # a flush is answered at once, not after the client's 30 s
        t0 = time.monotonic()
        with pytest.raises(errors.TxlogFull):
            await c.flush(timeout=30)
        assert time.monotonic() - t0 < 5
        with pytest.raises(errors.TxlogFull):
            await c.publish_acked("orders", BODY)
        refused = c.seq  # refused, not kept: "pub" sends it again once the disk has room
        # the dashboard and the API say so, with the cause and since when
        outage = api(proc, "/api/transaction_log")["write_outage"]
        assert isinstance(outage, dict) and "No space left" in str(outage["error"])
        alerts = {a["id"]: a for a in api(proc, "/api/instance")["alerts"]}  # type: ignore[attr-defined]
        # the refusal, and (the disk being full) the preallocation shortfall before it
        assert set(alerts) == {"txlog-refusing-writes", "txlog-preallocation"}
        assert alerts["txlog-refusing-writes"]["since"] == outage["since"]
        assert banners_on_every_page(proc, "txlog-refusing-writes") == [p.path for p in PAGES]
        metrics = httpx.get(proc.http_url + "/metrics", timeout=10).text
        assert "spool_txlog_refusing_writes 1.0" in metrics
        assert len(events(proc, "flush_failed")) == 1
        # the replay delivered every durable record and was not failed
        got = 0
        while got < durable:
            message = await sub.get(10)
            assert not isinstance(message, Exception), message
            got += 1
        # room is made: the log retries by itself (at most 16 x 200 ms later)
        filler.unlink()
        # what was pending is written and acknowledged after all (wait_persisted keeps
        # answering with the failure until a persisted ack covers the sequence)
        await async_wait_until(
            lambda: c.persisted_seq >= pub.published, timeout=10, message="the pending acks"
        )
        await async_wait_until(
            lambda: api(proc, "/api/transaction_log")["write_outage"] is None,
            timeout=10, message="writes resumed",
        )  # fmt: skip
        assert banners_on_every_page(proc, "txlog-refusing-writes") == []
        assert len(events(proc, "writes_resumed")) == 1
        # publishes are taken again, from the refused one on (the broker keeps the
        # publisher's order: nothing after a refused sequence is written before it)
        c.publish("orders", BODY, seq=refused, persisted=True)
        for _ in range(10):
            pub.published = c.publish("orders", BODY, persisted=True)
        await c.wait_persisted(pub.published, timeout=10)
        await c.flush(timeout=10)
        totals = api(proc, "/api/transaction_log")["totals"]
        stored = totals["last_seq"]  # type: ignore[index]
        assert stored == totals["durable_seq"] == pub.published
        while got < stored:
            await sub.get(10)
            got += 1
        _Seen.persisted = stored


async def _replay_all(proc: SpoolProcess) -> int:
    async with Client(proc.ws_url, "reader") as r:
        sub = await r.subscribe("orders", bookmark="0", completed=True)
        await asyncio.wait_for(sub.completed.wait(), 30)
        n = 0
        while not sub.queue.empty():
            message = await sub.get(1)
            assert message.data == BODY
            n += 1
        return n


def test_a_broker_starts_on_a_disk_without_room_for_its_preallocated_journals(
    tmp_path: Path,
) -> None:
    """Start-up must not exit (code 3) when 2 x 64 MB of preallocation do not fit."""
    disk = tmp_path / "disk"
    with tmpfs(disk, "8m"):
        fill(disk, leave=4 << 20)
        data = disk / "data"
        proc = SpoolProcess(tmp_path / "run", config_xml(data, txlog_extra=RETRY)).start()
        try:
            [alert] = api(proc, "/api/instance")["alerts"]  # type: ignore[misc]
            assert alert["id"] == "txlog-preallocation" and alert["level"] == "warning"
            assert banners_on_every_page(proc, "txlog-preallocation") == [p.path for p in PAGES]
            assert len(events(proc, "preallocation_failed")) == 1
            info = api(proc, "/api/transaction_log")
            assert info["preallocation"] == {
                **info["preallocation"],  # type: ignore[dict-item]
                "wanted": 2,
                "ready": 0,
            }

            async def publish() -> int:
                async with Client(proc.ws_url, "pub") as c:
                    last = 0
                    for _ in range(300):
                        last = c.publish("orders", BODY, persisted=True)
                    await c.wait_persisted(last, timeout=30)
                    return c.persisted_seq

            assert asyncio.run(publish()) == 300  # reads and writes work: it grows as written
        finally:
            proc.stop()


def test_an_fsync_eio_is_never_acked_and_the_records_are_rewritten_when_it_passes(
    tmp_path: Path,
) -> None:
    """Through the file seam of a real process: while fsync fails with EIO (and, as Linux
    may, drops the pages it covered), nothing is acknowledged; the retry rewrites the
    records from memory and they survive a restart."""
    control = tmp_path / "faults"
    proc = SpoolProcess(
        tmp_path / "run", config_xml(tmp_path / "data", txlog_extra=RETRY), control=control
    ).start()
    try:

        async def scenario() -> None:
            async with Client(proc.ws_url, "pub") as c:
                last = 0
                for i in range(20):
                    last = c.publish("orders", b'{"n":%d}' % i, persisted=True)
                await c.wait_persisted(last, timeout=10)
                control.write_text("fsync EIO\nlossy\n")
                for i in range(20, 30):
                    last = c.publish("orders", b'{"n":%d}' % i, persisted=True)
                t0 = time.monotonic()
                with pytest.raises(errors.TxlogFull) as refused:
                    await c.wait_persisted(last, timeout=30)
                assert time.monotonic() - t0 < 5
                assert "fsync failed" in refused.value.detail
                assert c.persisted_seq == 20  # none of 21..30 acknowledged
                outage = api(proc, "/api/transaction_log")["write_outage"]
                assert isinstance(outage, dict) and outage["operation"] == "fsync"
                assert outage["pending_records"] == 10
                control.unlink()
                await async_wait_until(
                    lambda: c.persisted_seq >= last, timeout=10, message="the rewrite"
                )

        asyncio.run(scenario())
        wait_until(lambda: events(proc, "writes_resumed"), message="writes_resumed logged")
        proc.stop()
        proc.control = None  # the next start runs the real seam
        proc.start()

        async def replay() -> list[bytes]:
            async with Client(proc.ws_url, "reader") as r:
                sub = await r.subscribe("orders", bookmark="0", completed=True)
                await asyncio.wait_for(sub.completed.wait(), 30)
                out = []
                while not sub.queue.empty():
                    out.append((await sub.get(1)).data)
                return out

        assert asyncio.run(replay()) == [b'{"n":%d}' % i for i in range(30)]
    finally:
        proc.stop()
