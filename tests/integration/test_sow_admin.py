"""The SOW's REST admin surface against a real ``spool serve`` with users: ``/api/sow``,
one topic's keys page by page, ``POST /api/sow/{topic}/compact`` (auth, the event log),
and the refusals (unknown topic, transient topic, bad page size)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from spool.server.client import Client
from tests.support.roster import bearer, three_users
from tests.support.server import SpoolProcess, config_xml, sow_topic
from tests.support.wait import wait_until

ADMIN_TOKEN = "sow-admin-token-0123456789"
READER_TOKEN = "sow-reader-token-0123456789"
FEED_TOKEN = "sow-feed-token-0123456789"
ADMIN = bearer(ADMIN_TOKEN)
READER = bearer(READER_TOKEN)
USERS = three_users(ADMIN_TOKEN, READER_TOKEN, FEED_TOKEN)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SpoolProcess]:
    workdir = tmp_path_factory.mktemp("sow-admin")
    sow = (
        sow_topic("orders", "/id")
        + sow_topic("kv", durability="transient")
        + sow_topic("/desk/prices", "/sym")
    )
    xml = config_xml(workdir / "data", users=USERS, journal_size="4MB", sow=sow)
    proc = SpoolProcess(workdir, xml)
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture
def http(server: SpoolProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.http_url, timeout=30.0) as client:
        yield client


def publish(server: SpoolProcess, topic: str, docs: list[dict[str, Any]]) -> None:
    """Publish ``docs`` to ``topic`` as user ``feed`` and wait until they are persisted."""

    async def body() -> None:
        async with Client(server.ws_url, f"feed-{topic.replace('/', '-')}", user_id="feed",
                          password=FEED_TOKEN) as client:  # fmt: skip
            for doc in docs:
                client.publish(topic, doc)
            await client.flush()

    asyncio.run(body())


def admin_actions(http: httpx.Client, action: str) -> list[dict[str, Any]]:
    events = http.get(
        "/api/events", params={"category": "admin", "limit": 1000}, headers=ADMIN
    ).json()["events"]
    return [e for e in events if e["event"] == "action" and e["action"] == action]


def test_topics_list_their_counts_bytes_and_files(server: SpoolProcess, http: httpx.Client) -> None:
    publish(server, "orders", [{"id": i, "px": i} for i in range(30)])
    publish(server, "kv", [{"n": 1}, {"n": 2}])
    r = http.get("/api/sow", headers=READER)
    assert r.status_code == 200, r.text
    topics = {t["topic"]: t for t in r.json()["topics"]}
    assert {"orders", "kv"} <= set(topics)
    orders, kv = topics["orders"], topics["kv"]
    assert orders["records"] == 30 and orders["bytes"] > 0
    assert orders["durability"] == "persistent" and orders["key_paths"] == ["/id"]
    assert orders["file"].endswith(".sow")
    assert kv["records"] == 2 and kv["durability"] == "transient"
    assert kv["file"] is None and kv["file_bytes"] is None and kv["last_compaction"] is None
    # the file follows the log's durability: it catches up without anything asked
    wait_until(
        lambda: http.get("/api/sow/orders", headers=READER).json()["unwritten"] == 0,
        timeout=20,
    )
    assert http.get("/api/sow/orders", headers=READER).json()["file_bytes"] > 0


def test_keys_come_page_by_page(server: SpoolProcess, http: httpx.Client) -> None:
    publish(server, "orders", [{"id": i, "px": i} for i in range(30)])
    seen: list[str] = []
    after: str | None = None
    pages = 0
    while True:
        params: dict[str, Any] = {"limit": 7}
        if after is not None:
            params["after"] = after
        page = http.get("/api/sow/orders", params=params, headers=READER).json()
        assert page["topic"] == "orders" and page["records"] >= 30
        assert len(page["keys"]) <= 7
        seen += page["keys"]
        pages += 1
        after = page["next_after"]
        if after is None:
            break
    assert len(seen) == len(set(seen)) == page["records"]
    assert {str(i) for i in range(30)} <= set(seen)
    assert pages == -(-len(seen) // 7)


def test_a_topic_name_with_slashes(server: SpoolProcess, http: httpx.Client) -> None:
    publish(server, "/desk/prices", [{"sym": "AB", "px": 1}, {"sym": "CD", "px": 2}])
    for path in ("/api/sow//desk/prices", "/api/sow/%2Fdesk%2Fprices"):
        page = http.get(path, headers=READER).json()
        assert page["topic"] == "/desk/prices" and sorted(page["keys"]) == ["AB", "CD"]


@pytest.mark.parametrize(
    ("method", "path", "status", "detail"),
    [
        ("GET", "/api/sow/nope", 404, "no SOW topic named 'nope'"),
        ("POST", "/api/sow/nope/compact", 404, "no SOW topic named 'nope'"),
        ("GET", "/api/sow/orders?limit=0", 400, "limit must be between 1 and 10000"),
        ("GET", "/api/sow/orders?limit=x", 400, "limit must be an integer"),
        ("POST", "/api/sow/kv/compact", 409, "transient SOW topic"),
    ],
)
def test_refusals_say_why(
    http: httpx.Client, method: str, path: str, status: int, detail: str
) -> None:
    # reads as a user entitled to the topics (an admin is not, by itself), actions as
    # the admin
    r = http.request(method, path, headers=READER if method == "GET" else ADMIN)
    assert r.status_code == status, r.text
    assert detail in r.json()["detail"]


def test_compaction_is_an_admin_action_and_shrinks_the_file(
    server: SpoolProcess, http: httpx.Client
) -> None:
    # ten versions of each of 20 keys: the file holds every change until compacted
    publish(server, "orders", [{"id": i % 20, "v": i, "pad": "x" * 50} for i in range(200)])
    wait_until(
        lambda: http.get("/api/sow/orders", headers=READER).json()["unwritten"] == 0,
        timeout=20,
    )
    before = http.get("/api/sow/orders", headers=READER).json()
    assert http.post("/api/sow/orders/compact").status_code == 401
    refused = http.post("/api/sow/orders/compact", headers=READER)
    assert refused.status_code == 403, refused.text
    r = http.post("/api/sow/orders/compact", headers=ADMIN)
    assert r.status_code == 200, r.text
    result = r.json()
    assert result["ok"] and result["topic"] == "orders"
    assert result["records"] == before["records"]
    assert result["after_bytes"] < result["before_bytes"]
    after = http.get("/api/sow/orders", headers=READER).json()
    assert after["last_compaction"] == result["at"]
    assert after["file_bytes"] == result["after_bytes"]
    assert after["records"] == before["records"]
    logged = admin_actions(http, "sow.compact")
    assert any(
        e["user"] == "ops" and e["target"] == "orders" and e["status"] == 200 for e in logged
    )


def test_the_document_lists_the_sow_endpoints(http: httpx.Client) -> None:
    doc = http.get("/api/openapi.json", headers=READER).json()
    assert set(doc["paths"]["/api/sow"]) == {"get"}
    assert set(doc["paths"]["/api/sow/{topic}"]) == {"get"}
    compact = doc["paths"]["/api/sow/{topic}/compact"]["post"]
    assert {"403", "404", "409"} <= set(compact["responses"])
    params = {p["name"] for p in doc["paths"]["/api/sow/{topic}"]["get"]["parameters"]}
    assert params == {"topic", "after", "limit"}
