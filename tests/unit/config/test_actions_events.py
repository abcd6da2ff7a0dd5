"""Event triggers of ``<Actions>``: each reader's model, each refusal at its element, the
rules of an event action (no mixing, the shared variables), and the refusal of every
event trigger as "not supported yet" once the whole file has been checked."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from spool.server.config import (
    EVENTS_CLIENTS,
    LINK_STATES,
    ActionConfig,
    ConfigError,
    OnAdmin,
    OnClient,
    OnDeadLetter,
    OnLinkState,
    OnOof,
    OnPublishMessage,
    OnSowRemoval,
    SowTopicConfig,
    TopicMatch,
    Trigger,
)
from spool.server.config.sections.actionmodules import ActionFacts
from spool.server.config.sections.actiontriggers import EVENT_TRIGGER_READERS
from spool.server.config.values import Context
from spool.server.config.xmltree import parse_tree
from tests.unit.config.helpers import assert_refused, doc, parse
from tests.unit.config.test_actions import QUEUES, REPLICATION, TXLOG, A, action, do, on

FACTS = ActionFacts(
    transports=("websocket-json", "peers"),
    has_txlog=True,
    directories=("data", "stats", "journal", "archive"),
    destinations={"b": True, "c": False},
    queues=("work", "plain"),
    dead_letter_reasons={"work": frozenset({"max_deliveries", "expired"})},
    client_transports=("websocket-json",),
    sow_topics=(SowTopicConfig("orders", keys=("/id",)), SowTopicConfig("^fx/", is_regex=True)),
    replicates=True,
    event_topics=frozenset({EVENTS_CLIENTS}),
)
CTX = Context({}, Path("/srv/spool"))
PUBLISH = "amps-action-on-publish-message"
DELETE = "amps-action-on-sow-delete-message"
EXPIRE = "amps-action-on-sow-expire-message"
OOF = "amps-action-on-oof-message"
DEAD = "spool-action-on-queue-dead-letter"
LINK = "spool-action-on-link-state"


def read_on(module: str, options: str = "", facts: ActionFacts = FACTS) -> Trigger:
    """Read one ``<On>`` with the event trigger reader of ``module`` (the element is at
    ``/On``, line 1)."""
    inner = f"<Options>{options}</Options>" if options else ""
    element = parse_tree(f"<On><Module>{module}</Module>{inner}</On>")
    opts = next((child for child in element.children if child.tag == "Options"), None)
    return EVENT_TRIGGER_READERS[module](element, opts, CTX, facts)


# -- what each trigger reads --------------------------------------------------------------

READ: list[tuple[str, str, Trigger]] = [
    (PUBLISH, "<Topic>^orders/</Topic><MessageType>json</MessageType><Filter>/qty &gt;= 10"
     "</Filter><MessageSource>all</MessageSource>",
     OnPublishMessage(TopicMatch("^orders/", True), "/qty >= 10", "all", where="/On")),
    (PUBLISH, "<Topic>orders.eu</Topic>", OnPublishMessage(TopicMatch("orders.eu"), where="/On")),
    (PUBLISH, f"<Topic>{EVENTS_CLIENTS}</Topic>",
     OnPublishMessage(TopicMatch(EVENTS_CLIENTS), where="/On")),
    (DELETE, "<Topic>orders</Topic><MessageSource>replicated</MessageSource>",
     OnSowRemoval("deleted", TopicMatch("orders"), None, "replicated", where="/On", module=DELETE)),
    (DELETE, "<Topic>^ord</Topic>",
     OnSowRemoval("deleted", TopicMatch("^ord", True), where="/On", module=DELETE)),
    (EXPIRE, "<Topic>fx/eur</Topic><Reason>time_limit</Reason><Filter>/px &gt; 1</Filter>",
     OnSowRemoval("expired", TopicMatch("fx/eur"), "/px > 1", where="/On", module=EXPIRE)),
    (OOF, "<Topic>orders</Topic><Filter>/open = true</Filter>",
     OnOof(TopicMatch("orders"), "/open = true", ("match", "deleted", "expired"), where="/On")),
    (OOF, "<Topic>orders</Topic>", OnOof(TopicMatch("orders"), None, ("deleted", "expired"),
                                         where="/On")),
    (OOF, "<Topic>orders</Topic><Filter>/open</Filter><Reason>match</Reason>",
     OnOof(TopicMatch("orders"), "/open", ("match",), where="/On")),
    (DEAD, "", OnDeadLetter(("work",), ("expired", "max_deliveries"), where="/On")),
    (DEAD, "<Queue>work</Queue><Reason>expired</Reason><Filter>/reason = 'expired'</Filter>",
     OnDeadLetter(("work",), ("expired",), "/reason = 'expired'", where="/On")),
    ("amps-action-on-connect-client", "<Transport>websocket-json</Transport>",
     OnClient("connected", None, ("websocket-json",), where="/On",
              module="amps-action-on-connect-client")),
    ("amps-action-on-disconnect-client", "<Filter>/cause = 'slow_client'</Filter>",
     OnClient("disconnected", "/cause = 'slow_client'", where="/On",
              module="amps-action-on-disconnect-client")),
    ("spool-action-on-logon-client", "",
     OnClient("logged_on", where="/On", module="spool-action-on-logon-client")),
    ("amps-action-on-connect-replication", "",
     OnLinkState("out", ("connected",), where="/On", module="amps-action-on-connect-replication")),
    ("amps-action-on-disconnect-replication", "<Link>b</Link>",
     OnLinkState("out", ("disconnected",), ("b",), where="/On",
                 module="amps-action-on-disconnect-replication")),
    ("amps-action-on-downgrade-replication", "",
     OnLinkState("out", ("downgraded",), where="/On",
                 module="amps-action-on-downgrade-replication")),
    ("amps-action-on-upgrade-replication", "",
     OnLinkState("out", ("upgraded",), where="/On", module="amps-action-on-upgrade-replication")),
    ("amps-action-on-connect-incoming-replication", "<Link>east</Link>",
     OnLinkState("in", ("connected",), ("east",), where="/On",
                 module="amps-action-on-connect-incoming-replication")),
    ("amps-action-on-disconnect-incoming-replication", "<Filter>/detail LIKE 'timeout'</Filter>",
     OnLinkState("in", ("disconnected",), (), "/detail LIKE 'timeout'", where="/On",
                 module="amps-action-on-disconnect-incoming-replication")),
    (LINK, "<Direction>in</Direction><State>sync</State><State>streaming</State>",
     OnLinkState("in", ("sync", "streaming"), where="/On")),
    (LINK, "<Direction>out</Direction><Link>c</Link>",
     OnLinkState("out", LINK_STATES["out"], ("c",), where="/On")),
]  # fmt: skip


@pytest.mark.parametrize(
    ("module", "options", "expected"), READ, ids=[f"{m}:{i}" for i, (m, _, _) in enumerate(READ)]
)
def test_each_event_trigger_reads_into_its_model(
    module: str, options: str, expected: Trigger
) -> None:
    assert read_on(module, options) == expected


def test_a_link_trigger_of_both_directions_fires_on_every_state_of_either() -> None:
    trigger = read_on(LINK)
    assert isinstance(trigger, OnLinkState) and trigger.direction == "both"
    assert set(trigger.states) == set(LINK_STATES["out"]) | set(LINK_STATES["in"])
    assert len(trigger.states) == len(set(trigger.states))
    # a source is named by its instance, which the file cannot list: any name is taken
    assert read_on(LINK, "<Link>west</Link>") == OnLinkState("both", trigger.states, ("west",),
                                                             where="/On")  # fmt: skip


def test_what_each_trigger_gives_a_run() -> None:
    expired = read_on(EXPIRE, "<Topic>orders</Topic>")
    deleted = read_on(DELETE, "<Topic>orders</Topic>")
    assert "AMPS_REASON" in expired.provides and "AMPS_REASON" not in deleted.provides
    assert "AMPS_CORRELATION_ID" not in deleted.provides  # the SOW keeps none
    gone = read_on("amps-action-on-disconnect-client")
    came = read_on("amps-action-on-connect-client")
    assert {"AMPS_REASON", "AMPS_DISCONNECT_CAUSE"} <= set(gone.provides)
    assert "AMPS_DISCONNECT_CAUSE" not in came.provides
    assert set(came.provides) < set(gone.provides)
    assert "AMPS_CORRELATION_ID" in read_on(PUBLISH, "<Topic>t</Topic>").provides
    assert "AMPS_DELIVERIES" in read_on(DEAD).provides
    assert "AMPS_LINK_STATE" in read_on(LINK).provides


def test_topic_matches_a_name_exactly_or_a_regex_anywhere() -> None:
    assert TopicMatch("orders.eu").matches("orders.eu")
    assert not TopicMatch("orders.eu").matches("ordersXeu")
    assert TopicMatch("^fx/", True).matches("fx/eur") and not TopicMatch("^fx/", True).matches(
        "a/fx/"
    )
    assert TopicMatch("eur$", True).matches("fx/eur")


def test_an_action_is_event_driven_when_all_its_triggers_are_event_triggers() -> None:
    publish = OnPublishMessage(TopicMatch("t"))
    assert ActionConfig("a", (publish, OnClient("connected")), ()).event_driven
    assert not ActionConfig("a", (OnAdmin(),), ()).event_driven


# -- refused by the readers, at the element ------------------------------------------------

NO_LINKS = replace(FACTS, replicates=False, destinations={})
NO_DEAD = replace(FACTS, dead_letter_reasons={})
EXACT_SOW = replace(FACTS, sow_topics=(SowTopicConfig("orders"),))

# (id, module, options, facts, path, fragment)
REFUSED: list[tuple[str, str, str, ActionFacts, str, str]] = [
    ("no Topic", PUBLISH, "", FACTS, "/On", f"{PUBLISH} needs the option <Topic>"),
    ("bad regex", PUBLISH, "<Topic>^(orders</Topic>", FACTS, "/On/Options/Topic",
     "'^(orders' is not a valid regular expression"),
    ("control character", PUBLISH, "<Topic>a&#9;b</Topic>", FACTS, "/On/Options/Topic",
     "no control characters"),
    ("subscribe options", PUBLISH, "<Topic>t</Topic><Options>oof</Options>", FACTS,
     "/On/Options/Options", "on-publish here is a publish stage, not a subscription: subscribe "
     "options do not apply; remove <Options>"),
    ("message type", PUBLISH, "<Topic>t</Topic><MessageType>fix</MessageType>", FACTS,
     "/On/Options/MessageType", "'fix' is not a valid MessageType (allowed: json)"),
    ("bad filter", PUBLISH, "<Topic>t</Topic><Filter>/a ==</Filter>", FACTS,
     "/On/Options/Filter", "the Filter does not compile"),
    ("bad source", PUBLISH, "<Topic>t</Topic><MessageSource>remote</MessageSource>", FACTS,
     "/On/Options/MessageSource", "'remote' is not a valid MessageSource"),
    ("replicated without links", PUBLISH,
     "<Topic>t</Topic><MessageSource>replicated</MessageSource>", NO_LINKS,
     "/On/Options/MessageSource", "this instance receives no replicated messages"),
    ("all without links", DELETE, "<Topic>orders</Topic><MessageSource>all</MessageSource>",
     NO_LINKS, "/On/Options/MessageSource", "this instance receives no replicated messages"),
    ("an event topic not on", PUBLISH, "<Topic>/spool/events/links</Topic>", FACTS,
     "/On/Options/Topic", "'/spool/events/links' is an event topic that is not turned on"),
    ("not a SOW topic", DELETE, "<Topic>ordrs</Topic>", FACTS, "/On/Options/Topic",
     "no SOW topic rule matches 'ordrs' (SOW topics: orders, ^fx/)"),
    ("a regex no SOW name matches", OOF, "<Topic>^fx/</Topic>", EXACT_SOW, "/On/Options/Topic",
     "no SOW topic rule matches '^fx/' (SOW topics: orders)"),
    ("no SOW at all", EXPIRE, "<Topic>orders</Topic>", replace(FACTS, sow_topics=()),
     "/On/Options/Topic", "(SOW topics: none)"),
    ("expire reason", EXPIRE, "<Topic>orders</Topic><Reason>size</Reason>", FACTS,
     "/On/Options/Reason", "Spool expires SOW records by time only"),
    ("expire source", EXPIRE, "<Topic>orders</Topic><MessageSource>local</MessageSource>", FACTS,
     "/On/Options/MessageSource", "unknown element <MessageSource>"),
    ("oof match without a filter", OOF, "<Topic>orders</Topic><Reason>deleted</Reason>"
     "<Reason>match</Reason>", FACTS, "/On/Options/Reason[2]",
     "Reason match is a record that stops matching the Filter, and this trigger has no <Filter>"),
    ("oof reason", OOF, "<Topic>orders</Topic><Reason>gone</Reason>", FACTS, "/On/Options/Reason",
     "Reason 'gone' is not one of match, deleted, expired"),
    ("oof reason twice", OOF, "<Topic>orders</Topic><Reason>expired</Reason>"
     "<Reason>expired</Reason>", FACTS, "/On/Options/Reason[2]", "Reason 'expired' is named twice"),
    ("no dead-letter queue", DEAD, "", NO_DEAD, "/On",
     f"{DEAD} fires on a queue's dead letters, and no queue has a <DeadLetter> (queues: work, "
     "plain); remove this trigger"),
    ("a queue without dead letters", DEAD, "<Queue>plain</Queue>", FACTS, "/On/Options/Queue",
     "queue 'plain' has no <DeadLetter>; queues with dead letters: work"),
    ("no such queue", DEAD, "<Queue>nope</Queue>", FACTS, "/On/Options/Queue",
     "queue 'nope' is not a configured queue"),
    ("a queue twice", DEAD, "<Queue>work</Queue><Queue>work</Queue>", FACTS,
     "/On/Options/Queue[2]", "queue 'work' is named twice"),
    ("a reason the queue does not dead-letter for", DEAD, "<Reason>rejected</Reason>", FACTS,
     "/On/Options/Reason", "no queue named here dead-letters for 'rejected' (their reasons: "
     "expired, max_deliveries)"),
    ("a replication transport", "amps-action-on-connect-client", "<Transport>peers</Transport>",
     FACTS, "/On/Options/Transport", "client transport 'peers' is not one of websocket-json"),
    ("client options", "spool-action-on-logon-client", "<Topic>t</Topic>", FACTS,
     "/On/Options/Topic", "unknown element <Topic>"),
    ("links without replication", LINK, "", NO_LINKS, "/On",
     f"{LINK} fires on replication links, and this instance has none"),
    ("incoming without replication", "amps-action-on-connect-incoming-replication", "", NO_LINKS,
     "/On", "this instance has none (no <Replication> nor amps-replication transport)"),
    ("outgoing without destinations", "amps-action-on-connect-replication", "",
     replace(FACTS, destinations={}), "/On", "no <Replication> <Destination> is configured"),
    ("direction", LINK, "<Direction>sideways</Direction>", FACTS, "/On/Options/Direction",
     "'sideways' is not a valid Direction (allowed: out, in, both)"),
    ("a state of the other direction", LINK, "<Direction>in</Direction><State>downgraded</State>",
     FACTS, "/On/Options/State", "State 'downgraded' is not one of connected, streaming, sync, "
     "disconnected"),
    ("unknown state", LINK, "<State>lost</State>", FACTS, "/On/Options/State",
     "State 'lost' is not one of connected"),
    ("not a destination", LINK, "<Direction>out</Direction><Link>z</Link>", FACTS,
     "/On/Options/Link", "no replication destination named 'z' (configured: b, c)"),
    ("fixed outgoing selection", "amps-action-on-upgrade-replication", "<Link>z</Link>", FACTS,
     "/On/Options/Link", "no replication destination named 'z'"),
    ("a link twice", LINK, "<Link>b</Link><Link>b</Link>", FACTS, "/On/Options/Link[2]",
     "link 'b' is named twice"),
    ("a link name", LINK, "<Link>a/b</Link>", FACTS, "/On/Options/Link",
     "'a/b' is not a valid link name"),
    ("fixed selections take no State", "amps-action-on-connect-replication",
     "<State>refused</State>", FACTS, "/On/Options/State", "unknown element <State>"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("module", "options", "facts", "path", "fragment"),
    [case[1:] for case in REFUSED],
    ids=[case[0] for case in REFUSED],
)
def test_refused_by_the_reader(
    module: str, options: str, facts: ActionFacts, path: str, fragment: str
) -> None:
    with pytest.raises(ConfigError) as info:
        read_on(module, options, facts)
    assert (info.value.path, info.value.line) == (path, 1), info.value.message
    assert fragment in info.value.message


# -- event actions in a whole file -----------------------------------------------------------

#: everything the event triggers need (a SOW topic, queues, links), on the document's line 3
WORLD = (
    TXLOG
    + REPLICATION
    + QUEUES.replace("<SOW>", "<SOW><Topic><Name>orders</Name><Key>/id</Key></Topic>")
)
PUBLISH_STEP = do(
    "amps-action-do-publish-message", '<Topic>out</Topic><Data>{"t":"{{AMPS_TOPIC}}"}</Data>'
)
PLAIN_STEP = do("amps-action-do-publish-message", "<Topic>out</Topic><Data>{}</Data>")
ON_ORDERS = on(PUBLISH, "<Topic>orders</Topic>")
NOT_YET = f"{PUBLISH} is not supported yet: message-driven triggers are not part of this version"


def world(*actions: str) -> str:
    """The sections on line 3, then <Actions> on line 4 (each action one line: the n-th
    action's parts on line 4 + n)."""
    return WORLD + "\n<Actions>\n" + "\n".join(actions) + "\n</Actions>"


def one_line(*parts: str, name: str = "a") -> str:
    return f"<Action><Name>{name}</Name>{''.join(parts)}</Action>"


# (id, body, path, line, fragment)
IN_FILE: list[tuple[str, str, str, int, str]] = [
    ("schedule and event", TXLOG + "\n" + action(
        on("amps-action-on-schedule", "<Every>1m</Every>"), ON_ORDERS.replace("orders", "t"),
        PUBLISH_STEP), f"{A}/On[2]", 8,
     f"action 'a' runs per event ({PUBLISH}) and amps-action-on-schedule runs it on its own: "
     "use two actions"),
    ("event and admin", TXLOG + "\n" + action(
        on("amps-action-on-connect-client"), on("amps-action-on-admin"), PUBLISH_STEP),
     f"{A}/On[2]", 8, "action 'a' runs per event (amps-action-on-connect-client) and "
     "amps-action-on-admin runs it on its own"),
    ("a variable only one trigger gives", world(one_line(
        ON_ORDERS, on(DELETE, "<Topic>orders</Topic>"),
        do("amps-action-do-publish-message",
           '<Topic>out</Topic><Data>{"c":"{{AMPS_CORRELATION_ID}}"}</Data>'))),
     f"{A}/Do/Options/Data", 5, "unknown variable {{AMPS_CORRELATION_ID}}"),
    ("no published bookmark after a happening", world(one_line(
        on("amps-action-on-connect-client"), PLAIN_STEP,
        do("amps-action-do-publish-message",
           '<Topic>out</Topic><Data>{"b":"{{AMPS_PUBLISHED_BOOKMARK}}"}</Data>'))),
     f"{A}/Do[2]/Options/Data", 5, "unknown variable {{AMPS_PUBLISHED_BOOKMARK}}"),
    ("a variable of no trigger", world(one_line(
        on("amps-action-on-connect-client"),
        do("amps-action-do-publish-message", '<Topic>o</Topic><Data>{"t":"{{AMPS_TOPIC}}"}</Data>'))),
     f"{A}/Do/Options/Data", 5, "unknown variable {{AMPS_TOPIC}}"),
    # every action is checked before a trigger not run yet is refused
    ("an error after an event action", world(one_line(ON_ORDERS, PUBLISH_STEP),
     one_line(on(DELETE, "<Topic>ordrs</Topic>"), PUBLISH_STEP, name="b")),
     f"{A}[2]/On/Options/Topic", 6, "no SOW topic rule matches 'ordrs'"),
    ("the first not run yet in file order", world(
        one_line(on("amps-action-on-admin"), PLAIN_STEP),
        one_line(on("amps-action-on-admin"), PLAIN_STEP,
                 do("amps-action-do-query-sow", "<Topic>orders</Topic>"), name="b")),
     f"{A}[2]/Do[2]/Module", 6,
     "amps-action-do-query-sow is not supported yet: SOW queries from actions"),
    ("resync complete has no reader", TXLOG + REPLICATION + "\n" + action(
        on("amps-action-on-replication-resync-complete"), PUBLISH_STEP), f"{A}/On/Module", 7,
     "amps-action-on-replication-resync-complete is not supported yet: replication link "
     "triggers are not part of this version of Spool; remove this module"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("body", "path", "line", "fragment"),
    [case[1:] for case in IN_FILE],
    ids=[case[0] for case in IN_FILE],
)
def test_event_actions_in_a_file(body: str, path: str, line: int, fragment: str) -> None:
    assert_refused(body, path, line, fragment)


def test_an_on_publish_action_loads_with_its_variables_and_published_bookmark() -> None:
    body = world(one_line(
        on(PUBLISH, "<Topic>^orders</Topic><Filter>/qty &gt; 1</Filter>"), PUBLISH_STEP,
        do("amps-action-do-publish-message",
           '<Topic>out</Topic><Data>{"b":"{{AMPS_PUBLISHED_BOOKMARK}}"}</Data>')))  # fmt: skip
    (action,) = parse(doc(body)).actions
    assert action.event_driven
    (trigger,) = action.triggers
    assert isinstance(trigger, OnPublishMessage)
    assert (trigger.topic.text, trigger.topic.is_regex, trigger.filter) == (
        "^orders", True, "/qty > 1",
    )  # fmt: skip


NOT_RUN: list[str] = [
    "amps-action-on-deliver-message",
    "amps-action-on-message-condition-timeout",
    "amps-action-on-subscribe",
    "amps-action-on-unsubscribe",
    "amps-action-on-replication-resync-complete",
]


@pytest.mark.parametrize("module", NOT_RUN)
def test_the_triggers_not_run_are_refused_as_not_supported_yet(module: str) -> None:
    body = world(one_line(on(module), PLAIN_STEP))
    assert_refused(body, f"{A}/On/Module", 5, f"{module} is not supported yet:")


RUN: list[tuple[str, str]] = [
    (DEAD, "<Queue>work</Queue>"),
    (DELETE, "<Topic>orders</Topic>"),
    (EXPIRE, "<Topic>orders</Topic>"),
    (OOF, "<Topic>orders</Topic><Filter>/open</Filter>"),
    ("amps-action-on-connect-client", ""),
    ("amps-action-on-disconnect-client", "<Filter>/cause = 'slow_client'</Filter>"),
    ("spool-action-on-logon-client", "<Transport>websocket-json</Transport>"),
    ("amps-action-on-connect-replication", "<Link>b</Link>"),
    ("amps-action-on-disconnect-replication", ""),
    ("amps-action-on-downgrade-replication", ""),
    ("amps-action-on-upgrade-replication", ""),
    ("amps-action-on-connect-incoming-replication", ""),
    ("amps-action-on-disconnect-incoming-replication", ""),
    (LINK, "<State>refused</State>"),
]


@pytest.mark.parametrize(("module", "options"), RUN, ids=[m for m, _ in RUN])
def test_the_triggers_that_run_load_into_an_event_action(module: str, options: str) -> None:
    (action,) = parse(doc(world(one_line(on(module, options), PLAIN_STEP)))).actions
    assert action.event_driven
    assert [t.module for t in action.triggers] == [module]


def test_triggers_sharing_the_variables_of_a_record_load_together() -> None:
    body = world(one_line(
        ON_ORDERS, on(DELETE, "<Topic>orders</Topic>"), on(OOF, "<Topic>orders</Topic>"),
        do("amps-action-do-publish-message",
           '<Topic>out</Topic><Data>{"k":"{{AMPS_SOW_KEY}}","d":"{{AMPS_DATA}}"}</Data>')))  # fmt: skip
    (action,) = parse(doc(body)).actions
    assert [t.module for t in action.triggers] == [PUBLISH, DELETE, OOF]


def test_a_file_without_event_triggers_still_loads() -> None:
    config = parse(doc(world(one_line(on("amps-action-on-admin"), PLAIN_STEP))))
    assert not config.actions[0].event_driven
