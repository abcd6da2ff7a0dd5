"""The per-client series of a real broker: kept while connected, gone after the retention,
never more than the limit (docs/admin-api.md "Per-client series"), as the History page's
listing (``GET /api/stats/metrics``) shows them."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import httpx
import pytest

from spool.server.client import SyncClient
from tests.support.server import SpoolProcess, config_xml
from tests.support.wait import wait_until

LIMIT = 20  # two clients' nine series each, not three


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SpoolProcess]:
    workdir = tmp_path_factory.mktemp("client-series")
    xml = config_xml(
        workdir / "data",
        txlog=False,
        admin_interval="1s",
        admin_extra=(
            f"<ClientStatsRetention>2s</ClientStatsRetention>"
            f"<ClientStatsLimit>{LIMIT}</ClientStatsLimit>"
        ),
    )
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


@contextlib.contextmanager
def connected(server: SpoolProcess, name: str) -> Iterator[SyncClient]:
    client = SyncClient(server.ws_url, name)
    try:
        client.connect()
        yield client
    finally:
        client.close()


#: how many per-client series each listing held
COUNTS: list[int] = []


def listed(http: httpx.Client) -> list[str]:
    metrics: list[str] = http.get("/api/stats/metrics").json()["metrics"]
    COUNTS.append(len([m for m in metrics if m.startswith(("clients/", "subscriptions/"))]))
    return metrics


def test_short_lived_clients_leave_the_listing_and_connected_ones_stay(
    server: SpoolProcess, http: httpx.Client
) -> None:
    COUNTS.clear()
    with connected(server, "keeper"):
        wait_until(lambda: "clients/keeper/msgs_in" in listed(http), message="keeper listed")
        for i in range(4):  # dashboard pages opened and closed, one after the other
            name = f"dashboard-query-{i:06}"
            with connected(server, name):
                wait_until(lambda n=name: f"clients/{n}/msgs_in" in listed(http), message=name)
        last = "clients/dashboard-query-000003/msgs_in"
        metrics = wait_until(
            lambda: m if last not in (m := listed(http)) else None,
            message="the last page's series gone after the retention",
        )
        assert not [m for m in metrics if m.startswith("clients/dashboard-query-")]
        assert {"clients/keeper/msgs_in", "clients/keeper/queue_depth"} <= set(metrics)
        assert {"instance/msgs_in", "instance/connections"} <= set(metrics)
        assert max(COUNTS) <= LIMIT
