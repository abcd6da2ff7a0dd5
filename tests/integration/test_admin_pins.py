"""Retention pins over REST: take, move, list, release; a pin keeps its journals."""

from __future__ import annotations

import asyncio

import httpx

from spool.server.client import Client
from tests.conftest import ServerFactory


async def _publish(url: str, n: int) -> None:
    async with Client(url, "pins-pub") as c:
        last = 0
        for i in range(n):
            last = c.publish("t", b'{"pad":"%s"}' % (b"x" * 400) + str(i).encode(), persisted=True)
        await c.wait_persisted(last, timeout=60)


def test_pins_over_rest(spool_server_factory: ServerFactory) -> None:
    proc = spool_server_factory(journal_size="1MB")
    asyncio.run(_publish(proc.ws_url, 6000))
    with httpx.Client(base_url=proc.http_url, timeout=30) as http:
        assert http.get("/api/transaction_log/pins").json() == {"pins": []}
        taken = http.post("/api/transaction_log/pins", json={"owner": "q:1", "seq": 1})
        assert taken.status_code == 200
        assert taken.json() == {"ok": True, "owner": "q:1", "seq": 1, "first_seq": 1,
                                "durable_seq": 6000}  # fmt: skip
        journals = [j for j in http.get("/api/transaction_log").json()["journals"]
                    if j["state"] == "closed"]  # fmt: skip
        assert journals and journals[0]["pinned_by"] == "q:1"
        refused = http.post(f"/api/transaction_log/journals/{journals[0]['id']}/remove")
        assert refused.status_code == 409 and "q:1" in refused.json()["detail"]

        moved = http.post("/api/transaction_log/pins", json={"owner": "q:1", "seq": 6001})
        assert moved.json()["seq"] == 6001
        assert http.get("/api/transaction_log/pins").json()["pins"] == [
            {"owner": "q:1", "seq": 6001, "admin": True}
        ]
        removed = http.post(f"/api/transaction_log/journals/{journals[0]['id']}/remove")
        assert removed.status_code == 200, removed.text

        for bad in ({"owner": "", "seq": 1}, {"owner": "a/b", "seq": 1}, {"owner": "x", "seq": -1}, {"owner": "x"},
                    {"owner": "x", "seq": True}, [1]):  # fmt: skip
            assert http.post("/api/transaction_log/pins", json=bad).status_code == 400
        assert http.post("/api/transaction_log/pins/q:1/release").json() == {
            "ok": True, "owner": "q:1"
        }  # fmt: skip
        gone = http.post("/api/transaction_log/pins/q:1/release")
        assert gone.status_code == 404
        assert http.get("/api/transaction_log/pins").json() == {"pins": []}
        doc = http.get("/api/openapi.json").json()
        assert "/api/transaction_log/pins/{owner}/release" in doc["paths"]
