"""The replication modules of actions between real `spool serve` processes: a
scheduled downgrade releases the persisted acks a down sync destination
holds once it has been behind longer than ``Age``, and the scheduled upgrade makes it
sync again after it came back and caught up. Publishes go through the Python client;
the state is read from the admin API (``/api/replication``, ``/api/actions/NAME``).
"""

from __future__ import annotations

import asyncio
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from spool.server.client import Client
from tests.support.replication import Cluster, destination
from tests.support.wait import wait_until

pytestmark = [pytest.mark.slow]

AGE = 3.0
LINKS = f"""
<Action><Name>links</Name>
  <On><Module>amps-action-on-schedule</Module><Options><Every>1s</Every></Options></On>
  <Do><Module>amps-action-do-downgrade-replication</Module><Options><Age>{AGE:g}s</Age></Options></Do>
  <Do><Module>amps-action-do-upgrade-replication</Module><Options><Age>1s</Age></Options></Do>
</Action>"""


def _runs(cluster: Cluster, message: str, module: int) -> list[dict[str, Any]]:
    """The runs of ``links`` whose step ``module`` (0 downgrade, 1 upgrade) says
    ``message`` first."""
    runs = cluster.api("a", "/api/actions/links?limit=1000")["history"]
    return [r for r in runs if r["steps"][module]["message"].startswith(message)]


def test_scheduled_actions_downgrade_a_down_sync_destination_past_age_and_upgrade_it_back(
    tmp_path: Path,
) -> None:
    cluster = Cluster(tmp_path, ["a", "b"])
    cluster.add(
        "a", destinations=[destination("b", [cluster.address("b")], exclude="replicate")],
        actions=LINKS,
    )  # fmt: skip
    cluster.add("b")
    cluster.start()

    async def scenario() -> None:
        async with Client(cluster.procs["a"].ws_url, "pub") as client:
            for s in range(1, 51):
                client.publish("orders", b'{"n":%d}' % s, seq=s, persisted=True)
            await client.wait_persisted(50, timeout=20)
            cluster.procs["b"].stop()
            await asyncio.to_thread(
                wait_until, lambda: not cluster.destination("a", "b")["connected"], 20
            )
            w0, t0 = time.time(), time.monotonic()
            for s in range(51, 101):
                client.publish("orders", b'{"n":%d}' % s, seq=s, persisted=True)
            # durable on a at once, but its sync destination is down: the acks wait
            await asyncio.to_thread(
                wait_until, lambda: cluster.replication("a")["durable_seq"] >= 100, 30
            )
            # an ack past 50 comes only once a run of the action has downgraded b (read in
            # this order, a downgrade between the two reads cannot fail it, however slow
            # the machine is)
            if client.persisted_seq > 50:
                assert cluster.destination("a", "b")["effective_sync_type"] == "async"
            # a run of the action downgrades b once it is more than AGE behind
            await client.wait_persisted(100, timeout=30)
            released_at, released = time.time(), time.monotonic() - t0
            assert released > AGE - 0.5, released  # not before (records are timestamped first)
            dest = cluster.destination("a", "b")
            assert dest["effective_sync_type"] == "async"
            [run] = _runs(cluster, "downgraded b (", 0)
            assert run["trigger"] == "amps-action-on-schedule"
            assert w0 <= datetime.fromisoformat(run["started"]).timestamp() <= released_at
            assert run["steps"][0]["variables"] == {"AMPS_DESTINATIONS_DOWNGRADED": "b"}
            behind = float(run["steps"][0]["message"].split("(")[1].split("s behind")[0])
            assert behind > AGE
            # b comes back and catches up; a run upgrades it and it becomes sync again
            await asyncio.to_thread(cluster.procs["b"].start)
            await asyncio.to_thread(
                wait_until,
                lambda: cluster.destination("a", "b")["effective_sync_type"] == "sync",
                30,
            )
            upgrades = await asyncio.to_thread(
                wait_until, lambda: _runs(cluster, "upgraded b (", 1), 10
            )
            assert len(upgrades) == 1
            # sync again: a publish is acknowledged once b has it
            for s in range(101, 111):
                client.publish("orders", b'{"n":%d}' % s, seq=s, persisted=True)
            await client.wait_persisted(110, timeout=20)
            assert cluster.destination("a", "b")["last_acked_position"] >= 110

    try:
        asyncio.run(scenario())
        events = [e["event"] for e in cluster.destination("a", "b")["events"]]
        assert events.index("downgraded") < events.index("upgrading") < events.index("upgraded")
    finally:
        cluster.stop()
