"""The command table's routing rule (server/commandtable.py) on a real broker: each
subscribe-like command, for each kind of topic, goes to the handler of the service that
owns it, or is refused before any service sees it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from spool.server.commandtable import CommandTable
from spool.server.dispatch import CommandHandler
from spool.server.engine import Broker
from spool.server.protocol.commands import COMMANDS, decode_command
from spool.server.protocol.errors import InvalidOptions, InvalidTopic, ProtocolFailure
from spool.server.protocol.message import Message
from spool.server.session import Session
from tests.support.engine import EngineHarness, FakeClient, scenario
from tests.support.server import sow_topic

#: a topic of each kind on the harness below
TOPICS = {"queue": "work", "sow": "orders", "regex": "^ord", "plain": "news"}


def harness(tmp_path: Path) -> EngineHarness:
    queue = (
        "<Queue><Name>work</Name><MessageType>json</MessageType>"
        "<UnderlyingTopic>work-in</UnderlyingTopic></Queue>"
    )
    return EngineHarness(
        tmp_path, sow=sow_topic("orders", "/id") + queue, journal_size="1MB",
        txlog_extra="<PreallocatedJournalFiles>1</PreallocatedJournalFiles>",
    )  # fmt: skip


def command(name: str, topic: str, **header: Any) -> Any:
    return decode_command(Message({"c": name, "t": topic, "sub_id": "s", **header}, b""))


def handlers(b: Broker) -> dict[str, CommandHandler]:
    """Each service handler a route can be, by a short name."""
    return {
        "queues.subscribe": b.queues.subscribe,
        "queues.ack": b.queues.ack,
        "sow.subscribe": b.sow.subscribe,
        "sow.sow_delete": b.sow.sow_delete,
        "sow.sow_and_subscribe": b.sow.sow_and_subscribe,
        "subscriptions.subscribe": b.subscriptions.subscribe,
        "subscriptions.pause_or_resume": b.subscriptions.pause_or_resume,
    }


def routed(table: CommandTable, b: Broker, session: Session, cmd: Any) -> str:
    """The short name of the handler ``cmd`` goes to, or the refusal's reason."""
    try:
        handler = table.route(session, cmd)
    except ProtocolFailure as exc:
        return f"refused: {exc.reason}"
    (name,) = [name for name, h in handlers(b).items() if h == handler]
    return name


#: (command, with bm) -> expected route per topic kind (queue, sow, regex, plain)
RULE: dict[tuple[str, bool], tuple[str, str, str, str]] = {
    ("subscribe", False): (
        "queues.subscribe", "sow.subscribe", "subscriptions.subscribe", "subscriptions.subscribe",
    ),
    ("subscribe", True): (
        "refused: invalid options", "subscriptions.subscribe", "subscriptions.subscribe",
        "subscriptions.subscribe",
    ),
    ("delta_subscribe", False): (
        "refused: invalid topic", "sow.subscribe", "sow.subscribe", "refused: invalid topic",
    ),
    ("delta_subscribe", True): ("refused: invalid options",) * 4,
    ("sow_delete", False): ("queues.ack", "sow.sow_delete", "sow.sow_delete", "sow.sow_delete"),
    ("sow_delete", True): ("queues.ack", "sow.sow_delete", "sow.sow_delete", "sow.sow_delete"),
    ("sow_and_subscribe", False): ("sow.sow_and_subscribe",) * 4,
    ("sow_and_subscribe", True): ("sow.sow_and_subscribe",) * 4,
    ("sow_and_delta_subscribe", False): ("sow.sow_and_subscribe",) * 4,
    ("sow_and_delta_subscribe", True): ("sow.sow_and_subscribe",) * 4,
}  # fmt: skip


@scenario
async def test_each_command_for_each_topic_kind_goes_to_its_handler(tmp_path: Path) -> None:
    async with harness(tmp_path) as h:
        b = h.broker
        table = b.command_table
        session = (await h.logon("c")).session
        assert {k: table.kind(t) for k, t in TOPICS.items()} == {k: k for k in TOPICS}
        for (name, bm), expected in RULE.items():
            extra = {"bm": "0"} if bm else {}
            got = tuple(
                routed(table, b, session, command(name, t, **extra)) for t in TOPICS.values()
            )
            assert got == expected, (name, bm)


@scenario
async def test_the_other_commands_go_to_one_service_whatever_the_topic(tmp_path: Path) -> None:
    async with harness(tmp_path) as h:
        b = h.broker
        table = b.command_table.handlers
        assert set(table) == COMMANDS - {"publish", "heartbeat"}
        assert b.commands is table
        assert table["logon"] == b.clients.logon
        assert table["flush"] == b.acks.flush
        # a query runs in the SOW service (the table also tells the happenings of it)
        assert table["sow"] == b.command_table._sow_query
        assert table["delta_publish"] == b.sow.delta_publish


@scenario
async def test_pause_and_resume_of_a_sow_topic_go_to_the_subscriptions(tmp_path: Path) -> None:
    """A subscribe that pauses or resumes existing subscriptions is the subscription
    service's on a SOW topic too; with options that are not valid it stays the SOW's
    (which refuses them with its own checks)."""
    async with harness(tmp_path) as h:
        b, table = h.broker, h.broker.command_table
        c = await h.logon("c")
        c.send(({"c": "subscribe", "t": "news", "sub_id": "p", "bm": "0", "o": "pause"}, b""))
        await h.settle()
        assert "p" in c.session.subs
        for topic, expected in (("orders", "subscriptions.pause_or_resume"),
                                ("news", "subscriptions.subscribe")):  # fmt: skip
            for options in ("resume", "pause"):
                cmd = command("subscribe", topic, sub_id="p", o=options)
                assert routed(table, b, c.session, cmd) == expected
        cmd = command("subscribe", "orders", sub_id="other", o="pause")
        assert routed(table, b, c.session, cmd) == "sow.subscribe"  # no such subscription
        cmd = command("subscribe", "orders", sub_id="p", o="resume,bogus")
        assert routed(table, b, c.session, cmd) == "sow.subscribe"
        with pytest.raises(InvalidOptions):
            table.handlers["subscribe"](c.session, cmd)


@scenario
async def test_unsubscribe_ends_a_subscription_of_every_kind(tmp_path: Path) -> None:
    async with harness(tmp_path) as h:
        b = h.broker
        c = await h.logon("c")
        subs = {"q": "work", "s": "orders", "p": "news", "r": "^ord"}
        c.send(*(({"c": "subscribe", "t": t, "sub_id": i}, b"") for i, t in subs.items()))
        c.send(({"c": "subscribe", "t": "news", "sub_id": "m", "bm": "0"}, b""))
        await h.settle()
        assert sorted(c.session.subs) == ["m", "p", "q", "r", "s"]
        assert b.queues.info("work").consumers == 1
        assert len(b.sow.delivery.router.match("orders")) == 1
        # a sub id named twice ends once
        c.send(({"c": "unsubscribe", "sub_id": "p,p", "cid": "pp", "a": "processed"}, b""))
        await h.settle()
        assert _acked(c, "pp") and sorted(c.session.subs) == ["m", "q", "r", "s"]
        c.send(({"c": "unsubscribe", "sub_id": "all", "cid": "u", "a": "processed"}, b""))
        await h.settle()
        assert _acked(c, "u")
        assert c.session.subs == {}
        assert b.queues.info("work").consumers == 0
        assert b.sow.delivery.router.match("orders") == []
        assert b.router.match("news") == []


@scenario
async def test_a_refused_route_changes_nothing(tmp_path: Path) -> None:
    """A refusal of the routing rule comes before any replace: the subscription of the
    sub id stays."""
    async with harness(tmp_path) as h:
        b = h.broker
        c = await h.logon("c")
        c.send(({"c": "subscribe", "t": "work", "sub_id": "q"}, b""))
        await h.settle()
        for cmd, error in (
            (command("subscribe", "work", sub_id="q", bm="0", o="replace"), InvalidOptions),
            (command("delta_subscribe", "news", sub_id="q", o="replace"), InvalidTopic),
        ):
            with pytest.raises(error):
                b.command_table.handlers[cmd.name](c.session, cmd)
        assert b.queues.info("work").consumers == 1
        assert "q" in c.session.subs


def _acked(c: FakeClient, cid: str) -> bool:
    return any(a.get("cid") == cid and a.get("status") == "success" for a in c.acks())
