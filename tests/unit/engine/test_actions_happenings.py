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
from tests.support.engine import EngineHarness, actions_engine, scenario
from tests.support.fabric import B, drive, fabric_of, xml
from tests.support.fabric import scenario as fabric_scenario
from tests.support.replication import destination
from tests.support.server import sow_topic
from tests.unit.engine.test_actions_events import info

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
    async with actions_engine(tmp_path, CLIENTS) as h:
        assert h.broker.happenings.clients and not h.broker.happenings.links
        reader = await h.logon("reader")
        reader.send(({"c": "subscribe", "t": "^clients/", "sub_id": "s"}, b""))
        await h.settle()
        c = await h.logon("c")
        kicked = await h.logon("k")
        await c.session.close("bye", cause="client")
        await kicked.session.close("too slow", cause="slow_client_stalled")
        await h.drive(h.until(lambda: len(reader.deliveries("s")) >= 7))
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
    async with actions_engine(tmp_path, "") as h:
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


# -- SOW records ------------------------------------------------------------------------------

SOW_ACTIONS = """
<Action><Name>deleted</Name>
  <On><Module>amps-action-on-sow-delete-message</Module><Options><Topic>book</Topic></Options></On>
  <Do><Module>amps-action-do-publish-message</Module><Options><Topic>ops/deleted</Topic>
    <Data>{"k":"{{AMPS_SOW_KEY}}","at":"{{AMPS_UNIX_TIMESTAMP}}","d":{{AMPS_DATA}}}</Data>
  </Options></Do>
</Action>
<Action><Name>expired</Name>
  <On><Module>amps-action-on-sow-expire-message</Module><Options><Topic>book</Topic></Options></On>
  <Do><Module>amps-action-do-publish-message</Module><Options><Topic>ops/expired</Topic>
    <Data>{"k":"{{AMPS_SOW_KEY}}","at":"{{AMPS_UNIX_TIMESTAMP}}","r":"{{AMPS_REASON}}"}</Data>
  </Options></Do>
</Action>
<Action><Name>oof</Name>
  <On><Module>amps-action-on-oof-message</Module><Options><Topic>book</Topic>
    <Filter>/open = true</Filter></Options></On>
  <Do><Module>amps-action-do-publish-message</Module><Options><Topic>ops/oof</Topic>
    <Data>{"k":"{{AMPS_SOW_KEY}}","at":"{{AMPS_UNIX_TIMESTAMP}}","r":"{{AMPS_REASON}}","d":{{AMPS_DATA}}}</Data>
  </Options></Do>
</Action>"""


def entry(sym: str, open_: bool) -> tuple[dict[str, Any], bytes]:
    return {"c": "publish", "t": "book"}, orjson.dumps({"sym": sym, "open": open_})


@scenario
async def test_sow_deletes_expirations_and_records_out_of_focus_fire_at_their_times(
    tmp_path: Path,
) -> None:
    book = sow_topic("book", "/sym", expiration="10s")
    async with actions_engine(tmp_path, SOW_ACTIONS, sow=book) as h:
        assert h.broker.happenings.sow_removals and h.broker.happenings.sow_changes
        reader = await h.logon("reader")
        reader.send(*[({"c": "subscribe", "t": f"ops/{t}", "sub_id": t}, b"")
                      for t in ("deleted", "expired", "oof")])  # fmt: skip
        pub = await h.logon("pub")
        await h.settle()
        t0 = h.clock.time()
        pub.send(entry("A", True), entry("B", True), entry("C", True), entry("D", False))
        await h.settle()
        await h.clock.advance(2)
        pub.send(entry("A", False), ({"c": "sow_delete", "t": "book", "f": "/sym = 'B'"}, b""))
        await h.settle()
        await h.clock.advance(8)  # C and D expire, at t0 + 10
        await h.settle()
        await h.clock.advance(2)  # A, updated at t0 + 2, at t0 + 12
        await h.settle()
        await h.drive(h.until(lambda: len(reader.deliveries("expired")) == 3))
        await h.settle()

        def at(x: dict[str, Any]) -> float:
            return round(float(x["at"]) - t0, 3)

        deleted = bodies(reader, "deleted")
        assert [(x["k"], x["d"], at(x)) for x in deleted] == [
            ("B", {"sym": "B", "open": True}, 2.0),
        ]
        expired = bodies(reader, "expired")
        assert sorted((x["k"], x["r"], at(x)) for x in expired) == [
            ("A", "time_limit", 12.0), ("C", "time_limit", 10.0), ("D", "time_limit", 10.0),
        ]  # fmt: skip
        oof = bodies(reader, "oof")
        # A stopped matching (its new state), B went while it matched, C expired while it
        # did; D never matched, A had stopped matching before it expired
        assert [(x["k"], x["r"], x["d"]["open"], at(x)) for x in oof] == [
            ("A", "match", False, 2.0),
            ("B", "deleted", True, 2.0),
            ("C", "expired", True, 10.0),
        ]
        events = info(h, "oof")["events"]
        assert (events["runs"], events["failed"], events["dropped"]) == (3, 0, 0)


@scenario
async def test_a_sow_topic_no_trigger_names_is_never_watched(tmp_path: Path) -> None:
    sow = sow_topic("book", "/sym") + sow_topic("other", "/sym")
    async with actions_engine(tmp_path, SOW_ACTIONS, sow=sow) as h:
        happenings = h.broker.happenings
        assert happenings.sow_interest("sow_changes", "book")
        assert not happenings.sow_interest("sow_changes", "other")
        assert not happenings.sow_interest("sow_removals", "other")
        pub = await h.logon("pub")
        pub.send(({"c": "publish", "t": "other"}, b'{"sym":"A","open":true}'),
                 ({"c": "sow_delete", "t": "other", "f": "1 = 1"}, b""))  # fmt: skip
        await h.commit()
        await h.settle()
        assert all(
            info(h, name)["events"]["offered"] == 0 for name in ("deleted", "expired", "oof")
        )
    async with actions_engine(tmp_path / "none", "", sow=sow) as h:
        assert not h.broker.happenings.sow_removals and not h.broker.happenings.sow_changes


def on_delete(name: str, source: str, instance: str) -> str:
    """An action of ``instance`` publishing to ``ops/NAME-INSTANCE`` (a's messages replicate
    to b: each instance's have topics of their own)."""
    return f"""
<Action><Name>{name}</Name>
  <On><Module>amps-action-on-sow-delete-message</Module><Options><Topic>book</Topic>
    <MessageSource>{source}</MessageSource></Options></On>
  <Do><Module>amps-action-do-publish-message</Module><Options><Topic>ops/{name}-{instance}</Topic>
    <Data>{{"k":"{{{{AMPS_SOW_KEY}}}}","by":"{{{{AMPS_INSTANCE_NAME}}}}"}}</Data></Options></Do>
</Action>"""


@fabric_scenario
async def test_a_replicated_sow_delete_fires_the_triggers_of_its_message_source(
    tmp_path: Path,
) -> None:
    book = sow_topic("book", "/sym")
    configs = {
        "a": xml(tmp_path, "a", destination("b", [B], exclude="replicate"), sow=book,
                 actions=on_delete("here", "local", "a")),
        "b": xml(tmp_path, "b", sow=book, actions=on_delete("here", "local", "b")
                 + on_delete("there", "replicated", "b") + on_delete("both", "all", "b")),
    }  # fmt: skip
    async with fabric_of(tmp_path, configs) as (_fabric, clock, h):
        a, b = h["a"], h["b"]
        repl = a.broker.replication
        assert repl is not None
        await drive(clock, lambda: repl.destinations["b"].connected)
        pub = await a.logon("pub")
        pub.send(entry("A", True), entry("B", True))
        pub.send(({"c": "sow_delete", "t": "book", "f": "/sym = 'B'"}, b""))
        local = b.broker.operations.sow_keys
        await drive(clock, lambda: local("book")["keys"] == ["A"])
        mine = await b.logon("mine")
        mine.send(entry("C", True), ({"c": "sow_delete", "t": "book", "f": "/sym = 'C'"}, b""))
        there = await logged(clock, b, "ops/there-b", 1)
        assert [(x["k"], x["by"]) for x in there] == [("B", "b")]
        both = await logged(clock, b, "ops/both-b", 2)
        assert sorted(x["k"] for x in both) == ["B", "C"]
        here = await logged(clock, b, "ops/here-b", 1)
        assert [(x["k"], x["by"]) for x in here] == [("C", "b")]
        at_a = await logged(clock, a, "ops/here-a", 1)
        assert [(x["k"], x["by"]) for x in at_a] == [("B", "a")]
        counts = {name: info(b, name)["events"] for name in ("here", "there", "both")}
        assert {name: c["runs"] for name, c in counts.items()} == {
            "here": 1, "there": 1, "both": 2,
        }  # fmt: skip


# -- dead letters ---------------------------------------------------------------------------------

DEAD_LETTERS = """
<Action><Name>dead</Name>
  <On><Module>spool-action-on-queue-dead-letter</Module><Options><Queue>work</Queue>
    <Reason>max_deliveries</Reason><Reason>rejected</Reason>
    <Filter>/message/n &lt; 10</Filter></Options></On>
  <Do><Module>amps-action-do-publish-message</Module><Options><Topic>ops/dead</Topic>
    <Data>{"q":"{{AMPS_QUEUE}}","t":"{{AMPS_TOPIC}}","r":"{{AMPS_REASON}}","bm":"{{AMPS_BOOKMARK}}",
      "c":"{{AMPS_CONSUMER}}","n":"{{AMPS_DELIVERIES}}","at":"{{AMPS_UNIX_TIMESTAMP}}",
      "d":{{AMPS_DATA}}}</Data></Options></Do>
</Action>"""

QUEUE = (
    "<Queue><Name>work</Name><MessageType>json</MessageType><UnderlyingTopic>work-in"
    "</UnderlyingTopic><LeasePeriod>10s</LeasePeriod><MaxPerSubscriptionBacklog>5</MaxPerSubscriptionBacklog>"
    "<MaxCancels>1</MaxCancels>"
    "<MaxDeliveries>2</MaxDeliveries><DeadLetter><Topic>work-dead</Topic></DeadLetter></Queue>"
)


@scenario
async def test_dead_letters_fire_once_published_with_their_reason_and_consumer(
    tmp_path: Path,
) -> None:
    async with actions_engine(tmp_path, DEAD_LETTERS, sow=QUEUE) as h:
        assert h.broker.happenings.dead_letters
        reader = await h.logon("reader")
        reader.send(({"c": "subscribe", "t": "ops/dead", "sub_id": "o"}, b""))
        p = await h.logon("pub")
        c = await h.logon("c")
        c.send(({"c": "subscribe", "t": "work", "sub_id": "s", "o": "max_backlog=5"}, b""))
        await h.settle()
        t0 = h.clock.time()
        p.send(*[({"c": "publish", "t": "work-in"}, orjson.dumps({"n": n})) for n in (1, 2, 20)])
        await h.settle()
        bms = {orjson.loads(b)["n"]: hd["bm"] for hd, b in c.deliveries("s")}
        assert sorted(bms) == [1, 2, 20]
        c.send(({"c": "sow_delete", "t": "work", "bm": bms[1], "o": "cancel"}, b""))  # max_cancels
        await h.settle()
        await h.clock.advance(10.5)  # the leases end at t0 + 10: 2 and 20 delivered again
        await h.settle()
        await h.clock.advance(10.5)  # at t0 + 20, past MaxDeliveries: dead letters
        await h.settle()
        await h.drive(h.until(lambda: reader.deliveries("o")))
        await h.settle()
        got = bodies(reader, "o")
        # 1 left for max_cancels (not a reason of the trigger), 20 the filter leaves out
        assert [(x["q"], x["t"], x["r"], x["bm"], x["n"]) for x in got] == [
            ("work", "work-dead", "max_deliveries", bms[2], "2"),
        ]
        assert got[0]["c"].startswith("c/") and got[0]["d"]["message"] == {"n": 2}
        assert round(float(got[0]["at"]) - t0, 3) == 20.0
        events = info(h, "dead")["events"]
        assert (events["offered"], events["matched"], events["runs"]) == (3, 1, 1)
        assert h.broker.queues.info("work").dead_lettered == 3


@scenario
async def test_a_dead_letter_the_pipeline_refused_fires_nothing(tmp_path: Path) -> None:
    # the dead-letter topic keeps records by a field no dead letter has: each is refused
    sow = QUEUE + sow_topic("work-dead", "/missing")
    async with actions_engine(tmp_path, DEAD_LETTERS, sow=sow) as h:
        p = await h.logon("pub")
        c = await h.logon("c")
        c.send(({"c": "subscribe", "t": "work", "sub_id": "s", "o": "max_backlog=5"}, b""))
        await h.settle()
        p.send(({"c": "publish", "t": "work-in"}, b'{"n":1}'))
        await h.settle()
        (bm,) = [hd["bm"] for hd, _ in c.deliveries("s")]
        c.send(({"c": "sow_delete", "t": "work", "bm": bm, "o": "reject"}, b""))
        await h.settle()
        refused = [e for e in h.broker.events.recent(100) if e["event"] == "dead_letter_refused"]
        assert len(refused) == 1
        assert h.broker.queues.info("work").dead_lettered == 0
        await h.clock.advance(1)
        await h.settle()
        assert info(h, "dead")["events"]["offered"] == 0
