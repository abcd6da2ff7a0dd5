"""What the actions endpoints answer for a message-driven action, against the schemas the
OpenAPI document gives them, on a real server: the live tally, the webhook counters'
absence, a history window, and the refused run on demand."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import jsonschema_rs
import pytest

from spool.server.client.sync import SyncClient
from tests.support.server import SpoolProcess, config_xml
from tests.support.wait import wait_until

ACTIONS = """
<Action><Name>big-orders</Name>
  <On><Module>amps-action-on-publish-message</Module><Options>
    <Topic>orders</Topic><Filter>/qty &gt;= 10</Filter></Options></On>
  <Do><Module>amps-action-do-publish-message</Module>
      <Options><Topic>big</Topic><Data>{{AMPS_DATA}}</Data></Options></Do>
</Action>"""
MATCHING, OTHERS = 4, 3


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SpoolProcess]:
    workdir = tmp_path_factory.mktemp("actions-schema")
    xml = config_xml(
        workdir / "data", journal_size="1MB", actions=ACTIONS,
        tuning="<ActionHistoryInterval>10s</ActionHistoryInterval>",
    )  # fmt: skip
    proc = SpoolProcess(workdir, xml).start()
    with SyncClient(proc.ws_url, "orders-feed") as feed:
        for qty in [10 + i for i in range(MATCHING)] + [1] * OTHERS:
            feed.publish("orders", {"qty": qty}, persisted=True)
        feed.flush()
    try:
        yield proc
    finally:
        proc.stop()


def get(server: SpoolProcess, path: str) -> httpx.Response:
    return httpx.get(f"{server.http_url}{path}", timeout=10)


def conforms(server: SpoolProcess, method: str, path: str, body: Any) -> None:
    """``body`` matches the 200 schema the document gives ``method path``."""
    document = get(server, "/api/openapi.json").json()
    schema = document["paths"][path][method]["responses"]["200"]["content"]
    root = {**schema["application/json"]["schema"], "components": document["components"]}
    errors = [e.message for e in jsonschema_rs.validator_for(root).iter_errors(body)]
    assert not errors, errors


def test_the_tally_and_a_window_are_answered_as_documented(server: SpoolProcess) -> None:
    (action,) = wait_until(
        lambda: (
            (a := get(server, "/api/actions").json()["actions"])[0]["events"]["runs"] == MATCHING
            and a
        ),
        message="every matching message run",
    )
    assert action["event_driven"] and not action["on_admin"] and action["webhooks"] is None
    events = action["events"]
    assert (events["offered"], events["matched"], events["succeeded"], events["derived"]) == (
        MATCHING + OTHERS, MATCHING, MATCHING, MATCHING,
    )  # fmt: skip
    assert events["dropped"] == events["loop_cut"] == events["failed"] == 0
    conforms(server, "get", "/api/actions", {"actions": [action]})

    # the first window closes after ActionHistoryInterval: one run in the history
    runs = wait_until(
        lambda: get(server, "/api/action_runs").json()["runs"], timeout=30,
        message="the first history window",
    )  # fmt: skip
    window = runs[0]
    assert window["events"]["offered"] == MATCHING + OTHERS
    assert window["detail"] == f"{MATCHING + OTHERS} events: {MATCHING} runs, {MATCHING} succeeded"
    conforms(server, "get", "/api/action_runs", {"runs": runs})
    one = get(server, "/api/actions/big-orders").json()
    assert one["history"][0]["events"] == window["events"]
    conforms(server, "get", "/api/actions/{name}", one)


def test_a_run_on_demand_of_a_message_driven_action_is_refused(server: SpoolProcess) -> None:
    response = httpx.post(f"{server.http_url}/api/actions/big-orders", json={}, timeout=10)
    assert response.status_code == 409, response.text
    document = get(server, "/api/openapi.json").json()
    assert "409" in document["paths"]["/api/actions/{name}"]["post"]["responses"]
