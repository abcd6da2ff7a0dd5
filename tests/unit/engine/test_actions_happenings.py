"""Actions run by the broker's happenings, end to end on the in-process engine (virtual
clock): client connections (connect, logon, disconnect) and replication links (cut, heal,
downgrade). The bus's sink offers each happening to the action's lane; the worker runs the
steps once per happening its trigger takes, with that happening's variables.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from spool.server.clock import VirtualClock
from tests.support.engine import EngineHarness, scenario
from tests.support.fabric import B, drive, fabric_of, xml
from tests.support.fabric import scenario as fabric_scenario
from tests.support.replication import destination
from tests.unit.engine.test_actions_events import harness, info, until_done

CLIENTS = """
<Action><Name>who</Name>
  <On><Module>amps-action-on-connect-client</Module></On>
  <On><Module>spool-action-on-logon-client</Module></On>
  <On><Module>amps-action-on-disconnect-client</Module></On>
  <Do><Module>amps-action-do-publish-message</Module><Options>
    <Topic>clients/log</Topic>
    <Data>{"t":"{{AMPS_TRIGGER}}","c":"{{AMPS_CLIENT_NAME}}","n":"{{AMPS_CONNECTION_NAME}}",
      "r":"{{AMPS_REMOTE_ADDRESS}}","x":"{{AMPS_TRANSPORT_NAME}}"}</Data></Options></Do>
</Action>
<Action><Name>gone</Name>
  <On><Module>amps-action-on-disconnect-client</Module><Options>
    <Filter>/cause = 'client'</Filter></Options></On>
  <Do><Module>amps-action-do-publish-message</Module><Options>
    <Topic>clients/gone</Topic>
    <Data>{"c":"{{AMPS_CLIENT_NAME}}","why":"{{AMPS_REASON}}","cause":"{{AMPS_DISCONNECT_CAUSE}}"}</Data>
  </Options></Do>
</Action>"""


def bodies(client: Any, sub_id: str) -> list[dict[str, Any]]:
    return [orjson.loads(body) for _, body in client.deliveries(sub_id)]


@scenario
async def test_a_client_connecting_logging_on_and_leaving_fires_each_trigger(
    tmp_path: Path,
) -> None:
    async with harness(tmp_path, CLIENTS) as h:
        assert h.broker.happenings.clients and not h.broker.happenings.links
        reader = await h.logon("reader")
        reader.send(({"c": "subscribe", "t": "^clients/", "sub_id": "s"}, b""))
        await h.settle()
        c = await h.logon("c")
        kicked = await h.logon("k")
        await c.session.close("bye", cause="client")
        await kicked.session.close("too slow", cause="slow_client_stalled")
        await until_done(h, h.until(lambda: len(reader.deliveries("s")) >= 7))
        await h.settle()
        got = bodies(reader, "s")
        log = [(b["t"], b["c"]) for b in got if "t" in b and b["n"] != "websocket-json-1"]
        assert log == [
            ("amps-action-on-connect-client", ""),
            ("spool-action-on-logon-client", "c"),
            ("amps-action-on-connect-client", ""),
            ("spool-action-on-logon-client", "k"),
            ("amps-action-on-disconnect-client", "c"),
            ("amps-action-on-disconnect-client", "k"),
        ]
        first = next(b for b in got if b.get("c") == "c")
        assert first["n"] == f"websocket-json-{c.session.connection}"
        assert (first["r"], first["x"]) == (c.session.remote, "websocket-json")
        # the filter took the client's own leaving, not the slow one's
        assert [b for b in got if "why" in b] == [{"c": "c", "why": "bye", "cause": "client"}]
        events = info(h, "gone")["events"]
        assert (events["offered"], events["matched"], events["runs"]) == (2, 1, 1)
        assert info(h, "who")["events"]["runs"] == 8  # with the reader's connect and logon


@scenario
async def test_without_a_client_trigger_the_bus_has_no_client_sink(tmp_path: Path) -> None:
    async with harness(tmp_path, "") as h:
        assert h.broker.actions.happenings_sink is None
        assert h.broker.happenings.clients is False
        c = await h.logon("c")
        await c.session.close("bye", cause="client")


LINKS_OUT = """
<Action><Name>out</Name>
  <On><Module>amps-action-on-connect-replication</Module></On>
  <On><Module>amps-action-on-disconnect-replication</Module></On>
  <On><Module>amps-action-on-downgrade-replication</Module></On>
  <On><Module>amps-action-on-upgrade-replication</Module></On>
  <Do><Module>amps-action-do-publish-message</Module><Options><Topic>ops/links</Topic>
    <Data>{"s":"{{AMPS_LINK_STATE}}","l":"{{AMPS_LINK_NAME}}","d":"{{AMPS_LINK_DIRECTION}}",
      "p":"{{AMPS_REPLICATION_PEER_NAME}}","y":"{{AMPS_SYNC_TYPE}}"}</Data></Options></Do>
</Action>"""

LINKS_IN = """
<Action><Name>in</Name>
  <On><Module>amps-action-on-connect-incoming-replication</Module></On>
  <On><Module>spool-action-on-link-state</Module><Options><Direction>in</Direction>
    <State>disconnected</State><Filter>/link = 'a'</Filter></Options></On>
  <Do><Module>amps-action-do-publish-message</Module><Options><Topic>ops/in</Topic>
    <Data>{"s":"{{AMPS_LINK_STATE}}","l":"{{AMPS_LINK_NAME}}","t":"{{AMPS_TRIGGER}}"}</Data>
  </Options></Do>
</Action>"""


async def logged(clock: VirtualClock, h: EngineHarness, topic: str, n: int) -> list[Any]:
    """The first ``n`` messages of ``topic`` in the log (a subscriber from the start; its
    name is the topic's, so the linked brokers' readers never share one)."""
    reader = await h.logon(topic.replace("/", "-"))
    reader.send(({"c": "subscribe", "t": topic, "sub_id": "s", "bm": "0"}, b""))
    await drive(clock, lambda: len(reader.deliveries("s")) >= n)
    return bodies(reader, "s")


@fabric_scenario
async def test_a_link_cut_healed_downgraded_and_upgraded_fires_each_side_s_triggers(
    tmp_path: Path,
) -> None:
    configs = {
        "a": xml(tmp_path, "a", destination("b", [B], exclude="replicate"), actions=LINKS_OUT),
        "b": xml(tmp_path, "b", actions=LINKS_IN),
    }
    async with fabric_of(tmp_path, configs) as (fabric, clock, h):
        a, b = h["a"], h["b"]
        assert a.broker.happenings.links and not a.broker.happenings.clients
        repl = a.broker.replication
        assert repl is not None
        link = repl.destinations["b"]
        await drive(clock, lambda: link.connected)
        fabric.cut(B)
        await drive(clock, lambda: not link.connected)
        fabric.heal(B)
        await drive(clock, lambda: link.connected)
        a.broker.operations.downgrade_destination("b")
        a.broker.operations.upgrade_destination("b")
        got = await logged(clock, a, "ops/links", 5)
        assert [(x["s"], x["l"], x["d"], x["p"]) for x in got] == [
            ("connected", "b", "out", "b"),
            ("disconnected", "b", "out", "b"),
            ("connected", "b", "out", "b"),
            ("downgraded", "b", "out", "b"),
            ("upgraded", "b", "out", "b"),
        ]
        assert (got[3]["y"], got[4]["y"]) == ("async", "sync")
        seen = await logged(clock, b, "ops/in", 3)
        assert [(x["s"], x["l"], x["t"]) for x in seen] == [
            ("connected", "a", "amps-action-on-connect-incoming-replication"),
            ("disconnected", "a", "spool-action-on-link-state"),
            ("connected", "a", "amps-action-on-connect-incoming-replication"),
        ]
        assert info(a, "out")["events"]["runs"] == 5
