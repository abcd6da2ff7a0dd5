"""Damage in a finished journal, as an operator sees it: the scrub finds it on its own
after a restart (and on demand), the admin API names the range, the dashboard's banner and
``/healthz`` say the instance is degraded, ``/metrics`` counts it."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from server.client import Client
from tests.support.damage import flip_byte, journals, records_of
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
            lambda: (r := http.get("/api/transaction_log").json())["damage"] and r, 60,
            message="the scrub to report the damage",
        )  # fmt: skip
        (damage,) = info["damage"]
        assert (damage["first_seq"], damage["last_seq"]) == (hit.seq, hit.seq)
        assert damage["found_by"] == "scrub" and damage["reason"] == "crc mismatch"
        assert damage["path"] == str(first)
        scrub = info["scrub"]
        assert scrub["damage_found"] == 1 and scrub["rate"] == 64 << 20
        # on demand: an admin action; the range is reported once however often it is found
        r = http.post("/api/transaction_log/scrub")
        assert r.status_code == 200 and r.json()["ok"]
        wait_until(lambda: http.get("/api/transaction_log").json()["scrub"]["passes"] >= 2, 60)
        assert len(http.get("/api/transaction_log").json()["damage"]) == 1
        health = http.get("/healthz").json()
        assert health == {
            "status": "degraded",
            "reasons": [{"id": "txlog-damaged", "title": "Damaged journal records"}],
        }
        alerts = http.get("/api/instance").json()["alerts"]
        assert [a["id"] for a in alerts] == ["txlog-damaged"]
        assert f"seqs {hit.seq}..{hit.seq}" in alerts[0]["message"]
        metrics = http.get("/metrics").text
        assert "spool_txlog_damaged_ranges 1.0" in metrics
        assert "spool_txlog_scrub_passes_total" in metrics
        assert all(r.pub_seq for r in records_of(first)[:3])
    finally:
        http.close()
