"""``GET /api/topics`` over a real ``spool serve``: the kinds, the counts after publishing,
the rates from the statistics database, the destinations (as the fabric route says), and
the entitlement filter (a user sees only the topics they may read)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from spool.server.client.sync import SyncClient
from tests.support.replication import Cluster, destination
from tests.support.roster import bearer
from tests.support.server import SpoolProcess, config_xml, sow_topic
from tests.support.wait import wait_until

OPS_TOKEN = "ops-token-0123456789abc"
ALICE_TOKEN = "alice-token-0123456789"
USERS = (
    f"<User><Name>ops</Name><Token>{OPS_TOKEN}</Token><Admin>true</Admin>"
    "<Read>.*</Read><Write>.*</Write></User>"
    f"<User><Name>alice</Name><Token>{ALICE_TOKEN}</Token>"
    "<Read>^public\\.</Read><Write>^public\\.</Write></User>"
)
QUEUE = (
    "<Queue><Name>public.work</Name><MessageType>json</MessageType>"
    "<LeasePeriod>30s</LeasePeriod></Queue>"
)
OPS = bearer(OPS_TOKEN)
ALICE = bearer(ALICE_TOKEN)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SpoolProcess]:
    work = tmp_path_factory.mktemp("topics-api")
    sow = sow_topic("public.sow", "/id") + sow_topic("secret.sow", "/id") + QUEUE
    proc = SpoolProcess(work, config_xml(work / "data", users=USERS, sow=sow))
    proc.start()
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def published(server: SpoolProcess) -> None:
    """What every test reads: 3 plain messages, 2 SOW records (one replaced), 2 queue
    messages, and a secret topic of each kind."""
    client = SyncClient(server.ws_url, "topics-feed", user_id="ops", password=OPS_TOKEN)
    client.connect()
    try:
        for i in range(3):
            client.publish("public.plain", {"n": i})
        for doc in ({"id": 1, "v": 1}, {"id": 2, "v": 1}, {"id": 1, "v": 2}):
            client.publish("public.sow", doc)
        for i in range(2):
            client.publish("public.work", {"job": i})
        client.publish("secret.plain", {"n": 0})
        client.publish("secret.sow", {"id": "SECRET"})
        client.flush()
    finally:
        client.close()


def topics(server: SpoolProcess, headers: dict[str, str]) -> dict[str, dict[str, Any]]:
    answer = httpx.get(f"{server.http_url}/api/topics", headers=headers, timeout=10)
    assert answer.status_code == 200, answer.text
    return {row["topic"]: row for row in answer.json()["topics"]}


@pytest.mark.usefixtures("published")
def test_each_topic_has_its_kind_counts_and_no_destinations(server: SpoolProcess) -> None:
    rows = topics(server, OPS)
    assert list(rows) == sorted(rows)
    assert {"public.plain", "public.sow", "public.work", "secret.plain", "secret.sow"} <= set(rows)
    plain, sow, queue = rows["public.plain"], rows["public.sow"], rows["public.work"]
    assert (plain["kind"], plain["messages"]) == ("plain", 3)
    assert (plain["sow_records"], plain["queue_depth"]) == (None, None)
    assert plain["bytes"] == sum(len(f'{{"n":{i}}}') for i in range(3))
    assert (sow["kind"], sow["messages"], sow["sow_records"]) == ("sow", 3, 2)
    assert (queue["kind"], queue["messages"], queue["queue_depth"]) == ("queue", 2, 2)
    for row in rows.values():
        assert row["destinations"] == []
        assert isinstance(row["messages_per_second"], float)


@pytest.mark.usefixtures("published")
def test_a_configured_sow_topic_is_listed_before_its_first_publish(
    server: SpoolProcess,
) -> None:
    # the configured exact names have a store from the start (GET /api/sow)
    sow = httpx.get(f"{server.http_url}/api/sow", headers=OPS, timeout=10).json()["topics"]
    assert {t["topic"] for t in sow} <= set(topics(server, OPS))


@pytest.mark.usefixtures("published")
def test_a_user_sees_only_the_topics_they_may_read(server: SpoolProcess) -> None:
    seen = topics(server, ALICE)
    assert {"public.plain", "public.sow", "public.work"} <= set(seen)
    assert all(name.startswith("public.") for name in seen), sorted(seen)
    answer = httpx.get(f"{server.http_url}/api/topics", headers=ALICE, timeout=10)
    assert "secret" not in answer.text.lower()


def test_the_rate_is_the_newest_stored_sample(server: SpoolProcess) -> None:
    client = SyncClient(server.ws_url, "topics-rate", user_id="ops", password=OPS_TOKEN)
    client.connect()
    try:

        def publishing_shows_a_rate() -> bool:
            client.publish("public.rate", {"x": 1})
            row = topics(server, OPS).get("public.rate")
            return row is not None and row["messages_per_second"] > 0 < row["bytes_per_second"]

        wait_until(publishing_shows_a_rate, 30, interval=0.1, message="a rate for public.rate")
    finally:
        client.close()


def test_without_credentials_the_list_is_refused(server: SpoolProcess) -> None:
    assert httpx.get(f"{server.http_url}/api/topics", timeout=10).status_code == 401


def test_destinations_are_the_links_the_fabric_route_takes(tmp_path: Path) -> None:
    # b is configured (async: a's flush does not wait for it), not started: the route is
    # decided by a's configuration
    cluster = Cluster(tmp_path, ["a", "b"])
    orders_to_b = destination("b", [cluster.address("b")], sync=False, topics=(("orders.*", None),))
    cluster.add("a", destinations=[orders_to_b])
    cluster.start("a")
    try:
        client = SyncClient(cluster.procs["a"].ws_url, "feed")
        client.connect()
        for topic in ("orders.eu", "audit"):
            client.publish(topic, {"x": 1})
        client.flush()
        client.close()
        rows = {r["topic"]: r for r in cluster.api("a", "/api/topics")["topics"]}
        assert rows["orders.eu"]["destinations"] == ["b"]
        assert rows["audit"]["destinations"] == []
        for topic, row in rows.items():
            trace = cluster.api("a", f"/api/fabric/route?topic={topic}")
            direct = sorted(r["instance"] for r in trace["reached"] if r["hops"] == 1)
            assert row["destinations"] == direct
    finally:
        cluster.stop()
