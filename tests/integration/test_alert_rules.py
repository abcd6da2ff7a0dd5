"""Alert rules against a real ``spool serve``: a queue rule fires once its queue's oldest
message is older than the threshold for ``For``, and clears when the message is consumed
(the rules' REST view, the events, /metrics, /healthz); a malformed rule stops the start."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from spool.server.client import Client, subscribe_queue
from tests.support.server import ROOT, SpoolProcess, config_xml
from tests.support.wait import wait_until

ServerFactory = Callable[..., SpoolProcess]

QUEUE = (
    "<Queue><Name>work</Name><MessageType>json</MessageType>"
    "<UnderlyingTopic>work-in</UnderlyingTopic><LeasePeriod>30s</LeasePeriod></Queue>"
)
RULE = (
    "<Alerts><Rule><Name>work-old</Name><Metric>queue_age</Metric><Queue>work</Queue>"
    "<Above>2s</Above><For>1s</For><Level>error</Level></Rule></Alerts>"
)


def api(server: SpoolProcess, path: str) -> Any:
    r = httpx.get(server.http_url + path, timeout=10)
    assert r.status_code == 200, r.text
    return r.json()


def rule(server: SpoolProcess) -> dict[str, Any]:
    rules = api(server, "/api/alerts/rules")["rules"]
    assert [r["name"] for r in rules] == ["work-old"]
    return dict(rules[0])


def gauge(server: SpoolProcess, family: str) -> float | None:
    """The value of ``family{rule="work-old"}`` in /metrics (None: absent)."""
    text = httpx.get(server.http_url + "/metrics", timeout=10).text
    prefix = f'{family}{{rule="work-old"}} '
    line = next((ln for ln in text.splitlines() if ln.startswith(prefix)), None)
    return float(line.removeprefix(prefix)) if line is not None else None


def events(server: SpoolProcess) -> list[dict[str, Any]]:
    return list(api(server, "/api/events?category=alert")["events"])


def test_a_queue_rule_fires_on_an_old_message_and_clears_when_it_is_consumed(
    spool_server_factory: ServerFactory,
) -> None:
    server = spool_server_factory(sow=QUEUE, admin_extra=RULE)
    assert rule(server)["state"] == "inactive"
    assert gauge(server, "spool_alert_firing") == 0.0
    assert api(server, "/healthz") == {"status": "ok"}

    async def publish() -> None:
        async with Client(server.ws_url, "pub") as pub:
            pub.publish("work-in", {"n": 1})
            await pub.flush()

    asyncio.run(publish())
    # older than 2s, then held for 1s: pending on the way, then firing
    wait_until(lambda: rule(server)["state"] == "firing", 30, message="the rule fires")
    fired = rule(server)
    assert fired["value"] > 2.0 and fired["since"] is not None
    assert fired["threshold_text"] == "2s" and fired["for_seconds"] == 1.0
    [event] = events(server)
    assert event["event"] == "alert_fired" and event["level"] == "error"
    assert (event["rule"], event["threshold"]) == ("work-old", 2.0)
    assert event["metric_value"] > 2.0
    assert gauge(server, "spool_alert_firing") == 1.0
    value = gauge(server, "spool_alert_value")
    assert value is not None and value > 2.0
    health = api(server, "/healthz")
    assert health["status"] == "degraded"
    assert {"id": "rule-work-old", "title": "Alert rule work-old"} in health["reasons"]
    [alert] = [a for a in api(server, "/api/instance")["alerts"] if a["id"] == "rule-work-old"]
    assert alert["level"] == "error" and "queue work" in alert["message"]

    async def consume() -> None:
        async with Client(server.ws_url, "worker") as c:
            sub = await subscribe_queue(c, "work")
            async for message in sub:
                assert message.json() == {"n": 1}
                message.ack()
                break
            await c.flush()

    asyncio.run(consume())
    wait_until(lambda: rule(server)["state"] == "inactive", 30, message="the rule clears")
    assert [e["event"] for e in events(server)] == ["alert_fired", "alert_cleared"]
    assert events(server)[1]["rule"] == "work-old"
    assert gauge(server, "spool_alert_firing") == 0.0
    assert api(server, "/healthz") == {"status": "ok"}
    assert not [a for a in api(server, "/api/instance")["alerts"] if a["id"] == "rule-work-old"]


def test_a_malformed_rule_stops_the_start_with_a_message_naming_its_element(
    tmp_path: Path,
) -> None:
    bad = RULE.replace("<Above>2s</Above>", "<Below>2s</Below>")
    config = tmp_path / "spool.xml"
    config.write_text(config_xml(tmp_path / "data", sow=QUEUE, admin_extra=bad))
    done = subprocess.run(
        [sys.executable, "-m", "spool.server.cli", "serve", str(config)],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode != 0
    assert "/SpoolConfig/Admin/Alerts/Rule/Below" in done.stderr, done.stderr
    assert "the metric queue_age takes <Above>, not <Below>" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
