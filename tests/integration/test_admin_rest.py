"""The REST admin API against a real `spool serve` process (uvicorn on 127.0.0.1).

One broker with users (an admin, a reader) serves most tests of this module; state is
created through the real protocol with the Python client.
"""

from __future__ import annotations

import contextlib
import itertools
import re
import statistics
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from spool.server.client import SyncClient
from spool.server.config import AdminConfig, Config
from spool.server.stats.timeparse import format_time
from spool.web.admin import AdminApi
from spool.web.app import create_app
from tests.support.roster import bearer, three_users
from tests.support.server import SpoolProcess, config_xml
from tests.support.wait import wait_until

ADMIN_TOKEN = "admin-token-0123456789"
READER_TOKEN = "reader-token-0123456789"
FEED_TOKEN = "feed-token-0123456789"
ADMIN = bearer(ADMIN_TOKEN)
READER = bearer(READER_TOKEN)
USERS = three_users(ADMIN_TOKEN, READER_TOKEN, FEED_TOKEN)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SpoolProcess]:
    workdir = tmp_path_factory.mktemp("admin-rest")
    xml = config_xml(
        workdir / "data",
        users=USERS,
        admin_interval="1s",
        journal_size="1MB",
        topics=("orders", "^/audit/"),
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
def feed_client(server: SpoolProcess, name: str) -> Iterator[SyncClient]:
    """A connected protocol client logged on as user ``feed``."""
    client = SyncClient(server.ws_url, name, user_id="feed", password=FEED_TOKEN)
    try:
        client.connect()
        yield client
    finally:
        client.close()


def admin_events(http: httpx.Client, action: str) -> list[dict[str, Any]]:
    events = http.get(
        "/api/events", params={"category": "admin", "limit": 1000}, headers=ADMIN
    ).json()["events"]
    return [e for e in events if e["event"] == "action" and e["action"] == action]


def document_operations(http: httpx.Client) -> list[tuple[str, str]]:
    doc = http.get("/api/openapi.json", headers=READER).json()
    return [(method.upper(), path) for path, ops in doc["paths"].items() for method in ops]


def filled(path: str) -> str:
    return path.replace("{id}", "1").replace("{", "x").replace("}", "")


# -- reads ---------------------------------------------------------------------------------


def test_reads_answer_with_their_documented_shapes(http: httpx.Client) -> None:
    instance = http.get("/api/instance", headers=READER).json()
    assert instance["name"] == "spool-test" and instance["pid"] > 0 and instance["ready"]
    host = http.get("/api/host", headers=READER).json()
    assert {"cpu", "memory", "disks", "network", "process"} <= set(host)
    assert {"journal", "archive", "data", "stats"} == set(host["disks"])
    session = http.get("/api/session", headers=READER).json()
    assert session == {
        "user": "viewer",
        "admin": False,
        "via": "token",
        "auth_enabled": True,
        "csrf_token": None,
    }
    assert http.get("/api/clients", headers=READER).json() == {"clients": []}
    assert http.get("/api/subscriptions", headers=READER).json() == {"subscriptions": []}
    txlog = http.get("/api/transaction_log", headers=READER).json()
    assert {"journals", "totals", "flush_latency_ms"} <= set(txlog)
    assert http.get("/api/delayed", headers=READER).json() == {
        "pending": 0, "next_due": None, "next_due_us": None, "delivered": 0,
        "waiting": False, "topics": [],
    }  # fmt: skip
    assert http.get("/api/delayed/messages", headers=READER).status_code == 403
    assert http.get("/api/delayed/messages", headers=ADMIN).json() == {
        "messages": [], "next_after": None,
    }  # fmt: skip
    transports = http.get("/api/transports", headers=READER).json()["transports"]
    assert [t["name"] for t in transports] == ["websocket-json"] and transports[0]["enabled"]
    assert http.get("/api/actions", headers=READER).json() == {"actions": []}
    assert http.get("/api/events", headers=READER).json()["events"]
    assert http.get("/healthz").json() == {"status": "ok"}
    assert http.get("/readyz").json() == {"ready": True}


def test_metrics_exposition_from_loopback_without_credentials(
    server: SpoolProcess, http: httpx.Client
) -> None:
    with feed_client(server, "metrics-pub") as client:
        client.publish("orders", b'{"n":1}', persisted=True)
        client.flush()
        text = http.get("/metrics").text
    assert "spool_messages_in_total" in text
    assert 'spool_client_messages_in_total{client="metrics-pub"} 1.0' in text
    assert "spool_persisted_ack_latency_seconds_bucket" in text
    assert "process_resident_memory_bytes" in text


def test_clients_and_one_client(server: SpoolProcess, http: httpx.Client) -> None:
    with feed_client(server, "reader-one"):
        clients = http.get("/api/clients", headers=READER).json()["clients"]
        assert [c["name"] for c in clients] == ["reader-one"]
        assert clients[0]["user"] == "feed"
        one = http.get("/api/clients/reader-one", headers=READER).json()
        assert one["name"] == "reader-one" and one["remote_addr"].startswith("127.0.0.1")
    missing = http.get("/api/clients/ghost", headers=READER)
    assert missing.status_code == 404 and missing.json()["error"] == "not found"


# -- auth ----------------------------------------------------------------------------------


def test_every_api_read_needs_credentials(http: httpx.Client) -> None:
    for method, path in document_operations(http):
        if not path.startswith("/api/") or method != "GET":
            continue
        r = http.get(filled(path))
        assert r.status_code == 401, path
        assert r.json()["error"] == "unauthorized"
        assert r.headers["www-authenticate"].startswith("Bearer")
        bad = http.get(filled(path), headers={"Authorization": "Bearer not-a-token"})
        assert bad.status_code == 401, path
        basic = http.get(filled(path), headers={"Authorization": "Basic b3BzOm9wcw=="})
        assert basic.status_code == 401, path


def test_every_action_needs_an_admin(http: httpx.Client) -> None:
    actions = [p for m, p in document_operations(http) if m == "POST"]
    assert len(actions) >= 15
    for path in actions:
        assert http.post(filled(path)).status_code == 401, path
        r = http.post(filled(path), headers=READER)
        assert r.status_code == 403, path
        assert r.json() == {"error": "forbidden", "detail": "user 'viewer' is not an admin"}
    forbidden = [
        e
        for e in http.get(
            "/api/events", params={"category": "admin", "limit": 1000}, headers=ADMIN
        ).json()["events"]
        if e["event"] == "forbidden"
    ]
    assert forbidden and forbidden[-1]["user"] == "viewer"


def test_token_never_appears_in_the_event_log(http: httpx.Client) -> None:
    http.get("/api/instance", headers={"Authorization": "Bearer leaked-secret-value"})
    events = http.get("/api/events", params={"limit": 1000}, headers=ADMIN).text
    assert "leaked-secret-value" not in events
    assert ADMIN_TOKEN not in events


# -- errors --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "/api/clients/ghost/disconnect", None),
        ("POST", "/api/subscriptions/ghost/s1/pause", None),
        ("POST", "/api/subscriptions/ghost/s1/resume", None),
        ("POST", "/api/transports/ghost/enable", None),
        ("POST", "/api/transports/ghost/disable", None),
        ("POST", "/api/transaction_log/journals/999999/archive", None),
        ("POST", "/api/transaction_log/journals/999999/remove", None),
        ("POST", "/api/actions/nightly", None),
        ("GET", "/api/stats?metric=no/such/metric", None),
        ("GET", "/api/no/such/endpoint", None),
        ("POST", "/api/no/such/endpoint", None),
        # Starlette's path patterns stop at a newline: the JSON 404 must not
        ("POST", "/api/sow/a%0Ab/compact", None),
        ("GET", "/api/no%0Asuch", None),
    ],
)
def test_unknown_ids_are_404(http: httpx.Client, method: str, path: str, body: Any) -> None:
    r = http.request(method, path, headers=ADMIN, json=body)
    assert r.status_code == 404, r.text
    assert r.json()["error"] == "not found" and r.json()["detail"]


@pytest.mark.parametrize(
    ("path", "detail"),
    [
        ("/api/replication", "replication is not configured on this instance"),
        ("/api/queues", "queues are not configured on this instance"),
        ("/api/queues/work", "queues are not configured on this instance"),
        ("/api/sow", "the SOW is not configured on this instance"),
    ],
)
def test_absent_subsystems_say_so(http: httpx.Client, path: str, detail: str) -> None:
    r = http.get(path, headers=READER)
    assert r.status_code == 404
    assert r.json() == {"error": "not found", "detail": detail}
    for action in (
        "/api/replication/b/downgrade",
        "/api/queues/work/enable_proxied_transfer",
        "/api/sow/orders/compact",
    ):
        assert http.post(action, headers=ADMIN).status_code == 404


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("GET", "/api/stats", None),
        ("GET", "/api/stats?metric=instance/connections&t0=yesterday", None),
        (
            "GET",
            "/api/stats?metric=instance/connections&t0=20240102T000000Z&t1=20240101T000000Z",
            None,
        ),
        ("GET", "/api/stats?metric=instance/connections&step=fast", None),
        ("GET", "/api/stats?metric=instance/connections&step=1ms", None),
        ("GET", "/api/events?limit=0", None),
        ("GET", "/api/events?limit=ten", None),
        ("GET", "/api/delayed/messages?after=12", None),
        ("GET", "/api/delayed/messages?limit=1001", None),
        ("POST", "/api/transaction_log/journals/abc/archive", None),
        ("POST", "/api/stats/truncate", None),
        ("POST", "/api/stats/truncate", {"before": "x"}),
        ("POST", "/api/stats/truncate", {"before": 1, "older_than": "1d"}),
        ("POST", "/api/stats/truncate", {"older_than": "-1d"}),
        ("POST", "/api/stats/truncate", [1, 2]),
        ("POST", "/api/subscriptions/ghost/s1/resume", {"sub_ids": "s2"}),
    ],
)
def test_bad_parameters_are_400(http: httpx.Client, method: str, path: str, body: Any) -> None:
    r = http.request(method, path, headers=ADMIN, json=body)
    assert r.status_code == 400, r.text
    assert r.json()["error"] == "bad request"


def test_body_that_is_not_json_is_400(http: httpx.Client) -> None:
    r = http.post(
        "/api/stats/truncate",
        headers={**ADMIN, "Content-Type": "application/json"},
        content=b"{not json",
    )
    assert r.status_code == 400 and "not JSON" in r.json()["detail"]
    big = http.post("/api/stats/truncate", headers=ADMIN, content=b" " * (65 * 1024))
    assert big.status_code == 413


def test_wrong_methods_are_405(http: httpx.Client) -> None:
    r = http.post("/api/instance", headers=ADMIN)
    assert r.status_code == 405 and r.headers["allow"] == "GET"
    assert r.json()["error"] == "method not allowed"
    r = http.get("/api/clients/x/disconnect", headers=ADMIN)
    assert r.status_code == 405 and r.headers["allow"] == "POST"
    assert http.delete("/api/clients/x", headers=ADMIN).status_code == 405


# -- actions -------------------------------------------------------------------------------


def test_disconnect_is_done_and_logged(server: SpoolProcess, http: httpx.Client) -> None:
    with feed_client(server, "to-kick"):
        r = http.post("/api/clients/to-kick/disconnect", headers=ADMIN)
        assert r.status_code == 200 and r.json() == {"ok": True, "client": "to-kick"}
        wait_until(
            lambda: http.get("/api/clients/to-kick", headers=ADMIN).status_code == 404,
            timeout=15,
            interval=0.05,
            message="client gone",
        )
    logged = admin_events(http, "clients.disconnect")
    ok = [e for e in logged if e["target"] == "to-kick" and e["status"] == 200]
    assert ok and ok[-1]["user"] == "ops" and ok[-1]["level"] == "info"
    assert any(e["target"] == "ghost" and e["status"] == 404 for e in logged)


def test_transport_disable_refuses_new_connections_then_enable(
    server: SpoolProcess, http: httpx.Client
) -> None:
    try:
        r = http.post("/api/transports/websocket-json/disable", headers=ADMIN)
        assert r.json() == {"ok": True, "transport": "websocket-json", "enabled": False}
        state = http.get("/api/transports", headers=ADMIN).json()["transports"][0]
        assert state["enabled"] is False
        with pytest.raises(Exception), feed_client(server, "while-disabled"):  # noqa: B017
            pass  # refused at the handshake or the logon
    finally:
        assert http.post("/api/transports/websocket-json/enable", headers=ADMIN).json()["enabled"]
    with feed_client(server, "after-enable"):
        pass
    targets = {(e["action"], e["target"]) for e in admin_events(http, "transports.disable")}
    assert ("transports.disable", "websocket-json") in targets


def test_pause_and_resume_bookmark_subscriptions(server: SpoolProcess, http: httpx.Client) -> None:
    with feed_client(server, "pause-pub") as pub:
        for i in range(20):
            pub.publish("orders", f'{{"i":{i}}}', persisted=True)
        pub.flush()
    with feed_client(server, "replayer") as sub:
        s1 = sub.subscribe("orders", bookmark="0", sub_id="r1")
        sub.subscribe("orders", bookmark="0", sub_id="r2")
        s1.get(timeout=10)
        r = http.post("/api/subscriptions/replayer/r1/pause", headers=ADMIN)
        assert r.json() == {"ok": True, "client": "replayer", "sub_ids": ["r1"]}
        http.post("/api/subscriptions/replayer/r2/pause", headers=ADMIN).raise_for_status()

        def states() -> dict[str, str]:
            subs = http.get(
                "/api/subscriptions", params={"client": "replayer"}, headers=ADMIN
            ).json()["subscriptions"]
            return {s["sub_id"]: s["state"] for s in subs}

        assert states() == {"r1": "paused", "r2": "paused"}
        missing = http.post("/api/subscriptions/replayer/nope/pause", headers=ADMIN)
        assert missing.status_code == 404
        r = http.post(
            "/api/subscriptions/replayer/r1/resume", headers=ADMIN, json={"sub_ids": ["r2", "r1"]}
        )
        assert r.json() == {"ok": True, "client": "replayer", "sub_ids": ["r1", "r2"]}
        assert "paused" not in states().values()
    logged = admin_events(http, "subscriptions.resume")
    assert any(e["target"] == "replayer/r1" and e["status"] == 200 for e in logged)


def test_events_of_one_client(server: SpoolProcess, http: httpx.Client) -> None:
    with feed_client(server, "events-pub") as pub:
        pub.publish("orders", '{"i":0}', persisted=True)
        pub.flush()
    with feed_client(server, "events-other") as other, feed_client(server, "events-one") as one:
        one.subscribe("orders", bookmark="0", sub_id="e1")
        other.subscribe("orders", bookmark="0", sub_id="e2")
        http.post("/api/subscriptions/events-one/e1/pause", headers=ADMIN).raise_for_status()
        http.post("/api/subscriptions/events-other/e2/pause", headers=ADMIN).raise_for_status()

    def of(client: str, **params: Any) -> list[dict[str, Any]]:
        answer = http.get("/api/events", params={"client": client, **params}, headers=READER)
        answer.raise_for_status()
        return list(answer.json()["events"])

    wait_until(
        lambda: [e["event"] for e in of("events-one")] == ["logon", "paused", "disconnected"],
        timeout=15,
        interval=0.05,
        message="the client's pause and disconnect, and nothing else",
    )
    assert {e["client"] for e in of("events-other")} == {"events-other"}
    assert [e["event"] for e in of("events-one", limit=1)] == ["disconnected"]
    admin = of("events-one", category="admin")
    assert admin == [], "admin actions name their target, not a client field"
    assert of("nobody-by-this-name") == []


def test_pausing_a_live_bookmark_subscription_is_refused_like_the_protocol_refuses_it(
    server: SpoolProcess, http: httpx.Client
) -> None:
    with feed_client(server, "live-replayer") as sub:
        sub.subscribe("orders", bookmark="0", sub_id="fast", options="live")
        r = http.post("/api/subscriptions/live-replayer/fast/pause", headers=ADMIN)
        assert r.status_code == 409
        assert "live" in r.json()["detail"]
        r = http.post("/api/subscriptions/live-replayer/fast/resume", headers=ADMIN)
        assert r.status_code == 409
        subs = http.get(
            "/api/subscriptions", params={"client": "live-replayer"}, headers=ADMIN
        ).json()["subscriptions"]
        assert [s["state"] for s in subs] != ["paused"]


def test_journal_actions(server: SpoolProcess, http: httpx.Client) -> None:
    body = "x" * 1000
    with feed_client(server, "journal-filler") as pub:
        for i in range(2600):  # > 2 journals of 1 MB
            pub.publish("orders", f'{{"i":{i},"pad":"{body}"}}', persisted=True)
        pub.flush()
    journals = wait_until(
        lambda: (
            (j := http.get("/api/transaction_log", headers=ADMIN).json()["journals"])
            and len(j) >= 3
            and j
        ),
        timeout=15,
        interval=0.05,
        message="three journals",
    )
    oldest = journals[0]["id"]  # journals are listed oldest first (id = base sequence)
    active = next(j["id"] for j in journals if j["state"] == "active")
    r = http.post(f"/api/transaction_log/journals/{oldest}/archive", headers=ADMIN)
    assert r.status_code == 200, r.text
    assert r.json()["ok"] and r.json()["action"] == "archive"
    r = http.post(f"/api/transaction_log/journals/{active}/remove", headers=ADMIN)
    assert r.status_code == 409 and r.json()["error"] == "conflict"
    with feed_client(server, "pinner") as sub:
        sub.subscribe("orders", bookmark="0", sub_id="pin", options="pause")
        r = http.post(f"/api/transaction_log/journals/{oldest}/remove", headers=ADMIN)
        assert r.status_code == 409, r.text
        assert "needed" in r.json()["detail"]
    assert any(e["status"] == 409 for e in admin_events(http, "transaction_log.journals.remove"))


# -- statistics ----------------------------------------------------------------------------


def test_stats_series_window_step_and_truncate(server: SpoolProcess, http: httpx.Client) -> None:
    with feed_client(server, "stats-pub") as pub:
        pub.publish("orders", b"{}", persisted=True)
        pub.flush()
        metrics = wait_until(
            lambda: (
                "clients/stats-pub/msgs_in"
                in (m := http.get("/api/stats/metrics", headers=READER).json())["metrics"]
                and m
            ),
            timeout=15,
            interval=0.05,
            message="per-client metric sampled",
        )
    assert metrics["interval"] == 1.0
    assert "host/cpu_percent" in metrics["metrics"]
    wait_until(
        lambda: (
            len(
                http.get(
                    "/api/stats", params={"metric": "instance/connections"}, headers=READER
                ).json()["points"]
            )
            >= 3
        ),
        timeout=15,
        interval=0.05,
        message="3 samples",
    )
    series = http.get(
        "/api/stats", params={"metric": "instance/connections"}, headers=READER
    ).json()
    assert series["metric"] == "instance/connections" and series["step"] is None
    ts = [p[0] for p in series["points"]]
    assert ts == sorted(ts)
    t0, t1 = format_time(ts[0]), format_time(ts[-1])
    window = http.get(
        "/api/stats", headers=READER, params={"metric": "instance/connections", "t0": t0, "t1": t1}
    ).json()
    assert window["points"][0][0] == ts[0]  # inclusive at both ends (ms-rounded bounds)
    assert window["points"][-1][0] <= ts[-1]
    coarse = http.get(
        "/api/stats",
        headers=READER,
        params={"metric": "instance/connections", "t0": t0, "t1": t1, "step": "1h"},
    ).json()
    assert coarse["step"] == 3600.0 and len(coarse["points"]) == 1
    r = http.post("/api/stats/truncate", headers=ADMIN, json={"older_than": "1d"})
    assert r.status_code == 200 and r.json()["deleted_samples"] == 0
    r = http.post("/api/stats/truncate", headers=ADMIN, json={"before": ts[-1] + 0.001})
    assert r.json()["deleted_samples"] >= len(ts)
    assert admin_events(http, "stats.truncate")[-1]["user"] == "ops"


@pytest.mark.slow
def test_acceptance_stats_hold_samples_at_the_interval_under_load(
    tmp_path: Path,
) -> None:
    """After load, the stats database holds samples at the configured interval and
    /api/stats returns them for a t0/t1 window (1 s interval, 12 s of load)."""
    proc = SpoolProcess(
        tmp_path,
        config_xml(tmp_path / "data", users=USERS, admin_interval="1s", topics=("orders",)),
    )
    proc.start()
    try:
        started = time.time()
        with feed_client(proc, "load") as pub:
            sent = 0
            while time.time() - started < 12.0:
                for _ in range(200):
                    pub.publish("orders", b'{"qty":1}', persisted=True)
                    sent += 1
                pub.flush()
        ended = time.time()
        with httpx.Client(base_url=proc.http_url, headers=ADMIN, timeout=30) as http:
            wait_until(
                lambda: (
                    len(
                        http.get(
                            "/api/stats",
                            params={
                                "metric": "instance/msgs_in_rate",
                                "t0": format_time(started),
                                "t1": format_time(ended + 2),
                            },
                        ).json()["points"]
                    )
                    >= 10
                ),
                timeout=15,
                interval=0.05,
                message="10 samples",
            )
            series = http.get(
                "/api/stats",
                params={
                    "metric": "instance/msgs_in_rate",
                    "t0": format_time(started),
                    "t1": format_time(ended),
                },
            ).json()
        points = series["points"]
        assert all(started - 0.001 <= ts <= ended + 0.001 for ts, _ in points)
        spacing = [b[0] - a[0] for a, b in itertools.pairwise(points)]
        assert 0.8 <= statistics.median(spacing) <= 1.3
        busy = [v for _, v in points if v > 0]
        assert len(busy) >= len(points) - 2  # the load ran the whole window
        # the rates integrate to about what was sent (first/last interval are partial)
        assert sum(busy) * statistics.median(spacing) == pytest.approx(sent, rel=0.35)
    finally:
        proc.stop()


# -- OpenAPI ------------------------------------------------------------------------------


def test_openapi_document_lists_exactly_the_api_routes(tmp_path: Path) -> None:
    config = Config(
        name="doc",
        group="doc",
        data_directory=tmp_path,
        admin=AdminConfig(stats_file=tmp_path / "stats.db"),
        transports=(),
        transaction_log=None,
    )
    app = create_app(config, console_log=False)
    routed: set[tuple[str, str]] = set()
    for route in app.routes:
        path = getattr(route, "path", "")
        endpoint = getattr(route, "endpoint", None)
        methods = getattr(endpoint, "endpoints", None)
        if path.startswith(("/api", "/healthz", "/readyz", "/metrics")) and methods:
            # documented without Starlette's convertors: {topic:path} -> {topic}
            routed |= {(m, re.sub(r"{(\w+):\w+}", r"{\1}", path)) for m in methods}
    api = AdminApi(app.state.broker.operations, app.state.broker.actions)
    document = api.openapi_document()
    documented = {(m.upper(), p) for p, ops in document["paths"].items() for m in ops}
    assert routed == documented
    assert document["openapi"] == "3.1.0"
    for path, ops in document["paths"].items():
        for op in ops.values():
            assert {"401"} <= set(op["responses"]) or path in ("/healthz", "/readyz", "/metrics")
    app.state.broker.events.close()
