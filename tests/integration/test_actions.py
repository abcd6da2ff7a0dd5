"""Actions in a real `spool serve` process: on demand over REST, at start-up before any
client is served, at shutdown before clients are closed, the shutdown module, journals,
the history across a restart.

State is made through the real protocol (the Python client) and read back through the
REST API; the broker's own messages are received by real subscribers.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest

from spool.server.bookmarks import format_bookmark
from spool.server.client import SyncClient
from tests.support.replication import own_identity
from tests.support.server import SpoolProcess, config_xml

ADMIN_TOKEN = "actions-admin-token-0123456789"
READER_TOKEN = "actions-reader-token-0123456789"
FEED_TOKEN = "actions-feed-token-0123456789"
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
READER = {"Authorization": f"Bearer {READER_TOKEN}"}
USERS = (
    f"<User><Name>ops</Name><Token>{ADMIN_TOKEN}</Token><Admin>true</Admin></User>"
    f"<User><Name>viewer</Name><Token>{READER_TOKEN}</Token></User>"
    f"<User><Name>feed</Name><Token>{FEED_TOKEN}</Token><Read>.*</Read><Write>.*</Write></User>"
)
ACTIONS = """
<Action><Name>boot</Name>
  <On><Module>amps-action-on-startup</Module></On>
  <Do><Module>amps-action-do-publish-message</Module>
      <Options><Topic>status</Topic><Data>{"up":"{{AMPS_INSTANCE_NAME}}"}</Data></Options></Do>
</Action>
<Action><Name>announce</Name>
  <On><Module>amps-action-on-admin</Module><Options>
    <Parameter><Name>who</Name><Pattern>[a-z]+</Pattern><Description>who to greet</Description></Parameter>
  </Options></On>
  <Do><Module>amps-action-do-publish-message</Module>
      <Options><Topic>ops</Topic><Data>{"hello":"{{who}}","by":"{{AMPS_USER}}"}</Data></Options></Do>
</Action>
<Action><Name>compact</Name>
  <On><Module>amps-action-on-admin</Module></On>
  <Do><Module>amps-action-do-archive-journal</Module><Options><Count>3</Count></Options></Do>
  <Do><Module>amps-action-do-compress-journal</Module><Options><Count>2</Count></Options></Do>
</Action>
<Action><Name>nightly</Name>
  <On><Module>amps-action-on-schedule</Module><Options><Every>Daily 03:00</Every></Options></On>
  <Do><Module>amps-action-do-remove-journal</Module><Options><Age>30d</Age></Options></Do>
</Action>"""
LIFECYCLE = """
<Action><Name>bye</Name>
  <On><Module>amps-action-on-shutdown</Module></On>
  <Do><Module>amps-action-do-publish-message</Module>
      <Options><Topic>status</Topic><Data>{"down":"{{AMPS_INSTANCE_NAME}}"}</Data></Options></Do>
</Action>
<Action><Name>stop</Name>
  <On><Module>amps-action-on-admin</Module></On>
  <Do><Module>amps-action-do-shutdown</Module></Do>
</Action>"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SpoolProcess]:
    workdir = tmp_path_factory.mktemp("actions")
    xml = config_xml(workdir / "data", users=USERS, journal_size="1MB", actions=ACTIONS)
    proc = SpoolProcess(workdir, xml).start()
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture
def http(server: SpoolProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.http_url, timeout=30.0) as client:
        yield client


@contextlib.contextmanager
def feed(url: str, name: str) -> Iterator[SyncClient]:
    client = SyncClient(url, name, user_id="feed", password=FEED_TOKEN)
    try:
        client.connect()
        yield client
    finally:
        client.close()


def action(http: httpx.Client, name: str) -> dict[str, Any]:
    found = [
        a for a in http.get("/api/actions", headers=READER).json()["actions"] if a["name"] == name
    ]
    assert len(found) == 1
    return found[0]


# -- start-up ---------------------------------------------------------------------------------


def test_the_on_startup_action_ran_before_any_client_was_served(
    server: SpoolProcess, http: httpx.Client
) -> None:
    boot = action(http, "boot")["last_run"]
    assert boot["outcome"] == "succeeded" and boot["trigger"] == "amps-action-on-startup"
    # the event log: the run is written before the instance says it serves
    events = http.get("/api/events", params={"limit": 1000}, headers=READER).json()["events"]
    order = [(e["category"], e["event"], e.get("action")) for e in events]
    assert order.index(("actions", "run", "boot")) < order.index(("instance", "started", None))
    # its message is the first record of the log: no client could publish before it
    with feed(server.ws_url, "early-reader") as client:
        sub = client.subscribe("status", bookmark="0")
        first = sub.get(10)
        assert orjson.loads(first.data) == {"up": "spool-test"}
        assert first.bookmark == format_bookmark(own_identity(server), 1)
    journals = http.get("/api/transaction_log", headers=READER).json()
    assert journals["totals"]["first_seq"] == 1


# -- on demand over REST ----------------------------------------------------------------------


def test_an_on_admin_action_runs_over_rest_and_its_message_is_delivered(
    server: SpoolProcess, http: httpx.Client
) -> None:
    with feed(server.ws_url, "listener") as client:
        sub = client.subscribe("ops")
        r = http.post("/api/actions/announce", json={"parameters": {"who": "alice"}}, headers=ADMIN)
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["ok"] is True
        run = body["run"]
        assert (run["outcome"], run["user"], run["parameters"]) == (
            "succeeded",
            "ops",
            {"who": "alice"},
        )
        assert run["steps"][0]["status"] == "ok" and run["id"] is not None
        message = sub.get(10)
        assert orjson.loads(message.data) == {"hello": "alice", "by": "ops"}
        assert message.bookmark == run["steps"][0]["variables"]["AMPS_PUBLISHED_BOOKMARK"]
    listed = action(http, "announce")
    assert listed["last_run"]["id"] == run["id"]
    assert listed["parameters"] == [{"name": "who", "default": None, "required": True,
                                     "pattern": "[a-z]+", "description": "who to greet"}]  # fmt: skip
    one = http.get("/api/actions/announce", headers=READER).json()
    assert one["history"][0]["id"] == run["id"]
    history = http.get("/api/action_runs", params={"action": "announce"}, headers=READER).json()
    assert history["runs"][0] == run
    # the admin API wrote who asked, and the run itself is in the event log
    events = http.get("/api/events", params={"limit": 1000}, headers=READER).json()["events"]
    asked = [e for e in events if e["category"] == "admin" and e["event"] == "action"
             and e["target"] == "announce"]  # fmt: skip
    assert asked[-1]["user"] == "ops" and asked[-1]["status"] == 200
    ran = [e for e in events if e["category"] == "actions" and e.get("action") == "announce"]
    assert ran[-1]["user"] == "ops" and ran[-1]["outcome"] == "succeeded"


@pytest.mark.parametrize(
    ("name", "body", "headers", "status", "detail"),
    [
        (
            "announce",
            {"parameters": {"who": "Alice"}},
            ADMIN,
            400,
            "parameter 'who' must match '[a-z]+'",
        ),
        ("announce", {"parameters": {}}, ADMIN, 400, "parameter 'who' is required"),
        ("announce", {"params": {"who": "a"}}, ADMIN, 400, "unknown field 'params'"),
        ("announce", {"parameters": "who=a"}, ADMIN, 400, "parameters must be a JSON object"),
        ("ghost", None, ADMIN, 404, "no action named 'ghost' is configured"),
        ("nightly", None, ADMIN, 409, "runs on amps-action-on-schedule, not on demand"),
        ("announce", {"parameters": {"who": "a"}}, READER, 403, ""),
        ("announce", {"parameters": {"who": "a"}}, {}, 401, ""),
    ],
)
def test_on_demand_runs_are_refused_with_a_reason(
    http: httpx.Client, name: str, body: Any, headers: dict[str, str], status: int, detail: str
) -> None:
    runs_before = action(http, "announce")["runs"]
    r = http.post(f"/api/actions/{name}", json=body, headers=headers)
    assert r.status_code == status, r.text
    assert detail in r.json()["detail"]
    assert action(http, "announce")["runs"] == runs_before


def test_journal_actions_over_rest_and_the_plan_of_the_transaction_log(
    server: SpoolProcess, http: httpx.Client
) -> None:
    with feed(server.ws_url, "filler") as client:
        pad = "z" * 200_000
        while len(http.get("/api/transaction_log", headers=READER).json()["journals"]) < 8:
            for _ in range(5):
                client.publish("orders", {"pad": pad})
            client.flush()
    before = http.get("/api/transaction_log", headers=READER).json()["journals"]
    live = [j for j in before if j["state"] not in ("preallocated",)]
    # the schedule's policy is on every closed journal's plan, with its next run
    closed = [j for j in live if j["state"] == "closed"]
    plan = closed[0]["next_actions"]
    # the scheduled policy first (with the time of the run that will act), then the
    # on-demand one, which runs when someone asks
    assert [(p["action"], p["operation"]) for p in plan] == [
        ("nightly", "remove"), ("compact", "archive"), ("compact", "compress"),
    ]  # fmt: skip
    assert plan[0]["at"] is not None and plan[0]["due"] is not None
    assert plan[1]["at"] is None and plan[1]["when"] == "when run on demand"
    r = http.post("/api/actions/compact", headers=ADMIN)
    assert r.status_code == 200, r.text
    run = r.json()["run"]
    archive, compress = run["steps"]
    assert archive["status"] == "ok" and archive["journals"] == [j["id"] for j in live[:-3]]
    assert compress["journals"] == [j["id"] for j in live[:-2]]
    after = {
        j["id"]: j for j in http.get("/api/transaction_log", headers=READER).json()["journals"]
    }
    for j in live[:-3]:
        assert (after[j["id"]]["state"], after[j["id"]]["compression"]) == ("archived", "zstd")
    assert run["files"] and all("archive" in f for f in archive["files"])


# -- shutdown ---------------------------------------------------------------------------------


def test_the_shutdown_module_stops_the_process_after_the_on_shutdown_action(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    workdir = tmp_path_factory.mktemp("lifecycle")
    xml = config_xml(workdir / "data", users=USERS, actions=LIFECYCLE)
    proc = SpoolProcess(workdir, xml).start()
    try:
        with feed(proc.ws_url, "watcher") as client:
            sub = client.subscribe("status")
            r = httpx.post(f"{proc.http_url}/api/actions/stop", headers=ADMIN, timeout=30)
            assert r.status_code == 200, r.text
            assert r.json()["run"]["steps"][0]["message"] == "shutdown requested"
            # the on-shutdown action publishes while clients are still connected
            bye = sub.get(15)
            assert orjson.loads(bye.data) == {"down": "spool-test"}
        assert proc.proc is not None
        assert proc.proc.wait(30) == 0  # a graceful exit, as after SIGTERM
    finally:
        proc.kill()
    # the runs were stored: after a restart the API shows them as the last runs
    proc = SpoolProcess(workdir, xml).start()
    try:
        with httpx.Client(base_url=proc.http_url, timeout=30) as http:
            stop = action(http, "stop")["last_run"]
            bye_run = action(http, "bye")["last_run"]
            assert stop["outcome"] == "succeeded" and stop["user"] == "ops"
            assert (
                bye_run["trigger"] == "amps-action-on-shutdown"
                and bye_run["outcome"] == "succeeded"
            )
            assert action(http, "stop")["runs"] == 0  # none in this process
    finally:
        proc.stop()
