"""Damage in a finished journal, as an operator sees it: the scrub finds it on its own
after a restart (and on demand) and fences it, the admin API names the range, the
dashboard's banner and ``/healthz`` say the instance is degraded, ``/metrics`` counts it,
the event log says it was damaged and fenced, and a replay from EPOCH fails at the range with a clear error."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx

from spool.server.client import Client
from tests.support.damage import flip_byte, journals
from tests.support.wait import wait_until


def test_a_flipped_byte_in_a_finished_journal_is_found_and_shown(spool_server_factory: Any) -> None:
    proc = spool_server_factory(name="a", journal_size="1MB")

    async def publish() -> None:
        async with Client(proc.ws_url, "pub") as client:
            for s in range(1, 8001):
                client.publish("orders", b'{"n":%d,"pad":"%s"}' % (s, b"x" * 200), seq=s)
            await client.flush()

    asyncio.run(publish())
    proc.stop()
    first = journals(proc.workdir / "data" / "journal", "spool-test")[0]
    hit = flip_byte(first, 500_000)
    proc.start()
    http = httpx.Client(base_url=proc.http_url, timeout=10)
    try:
        # the first scrub starts once the instance is ready; it reads every journal back
        info = wait_until(
            lambda: (r := http.get("/api/transaction_log").json())["fences"] and r, 60,
            message="the scrub to fence the damage",
        )  # fmt: skip
        (fence,) = info["fences"]
        assert (fence["first_seq"], fence["last_seq"]) == (hit.seq, hit.seq)
        assert fence["found_by"] == "scrub" and fence["reason"] == "crc mismatch"
        assert fence["path"] == str(first) and fence["exact"]
        assert fence["publishers"] == [
            {"pub_hash": hit.pub_hash, "first_pub_seq": hit.pub_seq, "last_pub_seq": hit.pub_seq}
        ]
        assert info["damage"] == []  # found, and fenced
        # the first pass may still be reading the journals after the damaged one
        scrub = wait_until(
            lambda: not (r := http.get("/api/transaction_log").json()["scrub"])["running"] and r,
            60, message="the first scrub pass to end",
        )  # fmt: skip
        before = scrub["passes"]
        assert before >= 1
        assert scrub["damage_found"] == 1 and scrub["rate"] == 64 << 20
        # on demand: an admin action; the journal was written anew, nothing more is found
        r = http.post("/api/transaction_log/scrub")
        assert r.status_code == 200 and r.json()["ok"] and r.json()["started"]
        wait_until(
            lambda: http.get("/api/transaction_log").json()["scrub"]["passes"] > before, 60
        )  # fmt: skip
        assert len(http.get("/api/transaction_log").json()["fences"]) == 1
        health = http.get("/healthz").json()
        assert health == {
            "status": "degraded",
            "reasons": [{"id": "txlog-damaged", "title": "Damaged journal records"}],
        }
        alerts = http.get("/api/instance").json()["alerts"]
        assert [a["id"] for a in alerts] == ["txlog-damaged"]
        assert f"seqs {hit.seq}..{hit.seq}" in alerts[0]["message"]
        metrics = http.get("/metrics").text
        assert "spool_txlog_fenced_ranges 1.0" in metrics
        assert "spool_txlog_fenced_records 1.0" in metrics
        assert "spool_txlog_scrub_passes_total" in metrics
        events = http.get("/api/events", params={"category": "txlog", "limit": 1000}).json()
        said = {e["event"]: e for e in events["events"]}
        assert said["journal_damaged"]["level"] == "error"
        assert said["journal_fenced"]["first_seq"] == hit.seq
        # a replay from EPOCH stops at the range, naming it
        error = asyncio.run(_replay_error(proc.ws_url))
        assert f"records {hit.seq}..{hit.seq}" in error and "fenced" in error
    finally:
        http.close()


async def _replay_error(url: str) -> str:
    async with Client(url, "replayer") as client:
        await client.subscribe("orders", bookmark="0")
        deadline = time.monotonic() + 60  # a guard against a hang, not a measure
        while not client.failures:
            assert time.monotonic() < deadline, "the replay did not fail"
            await asyncio.sleep(0.02)
        return str(client.failures[0])
