"""Actions run by the broker's happenings, end to end on the in-process engine (virtual
clock): client connections (connect, logon, disconnect) and replication links (cut, heal,
downgrade). The bus's sink offers each happening to the action's lane; the worker runs the
steps once per happening its trigger takes, with that happening's variables.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from tests.support.engine import scenario
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
