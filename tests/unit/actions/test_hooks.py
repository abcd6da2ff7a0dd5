"""The happenings sink of client and link triggers: which triggers a happening reaches,
what it offers, and the happening as a filter and a run read it."""

from __future__ import annotations

from spool.server.actions.hooks import (
    ActionHappenings,
    HappeningRun,
    LetterRun,
    SowRun,
    document,
    takes,
    variables,
)
from spool.server.config import (
    OnClient,
    OnDeadLetter,
    OnLinkState,
    OnOof,
    OnSowRemoval,
    TopicMatch,
)
from spool.server.ports import (
    ClientHappening,
    DeadLetterFact,
    DeadLetterHappening,
    LinkHappening,
    SowChangeHappening,
    SowRecord,
    SowRemovalHappening,
    SubscriptionHappening,
)


class Lane:
    def __init__(self) -> None:
        self.got: list[HappeningRun | SowRun | LetterRun] = []

    def offer(self, item: HappeningRun | SowRun | LetterRun) -> bool:
        self.got.append(item)
        return True


def client(event: str = "connected", transport: str = "websocket-json") -> ClientHappening:
    return ClientHappening(event, 5, 3, "c", "u", "10.0.0.1:5", transport,  # type: ignore[arg-type]
                           reason="bye", cause="client")  # fmt: skip


def link(event: str = "disconnected", direction: str = "out", name: str = "b") -> LinkHappening:
    return LinkHappening(event, 5, direction, name, "inst-b", False, "sync", "lost")  # type: ignore[arg-type]


def test_a_client_trigger_takes_its_step_and_transports_only() -> None:
    on = OnClient("connected", transports=("websocket-json",))
    assert takes(on, client())
    assert not takes(on, client("disconnected"))
    assert not takes(on, client(transport="other"))
    assert not takes(on, link())
    assert takes(OnClient("disconnected"), client("disconnected", "other"))


def test_a_link_trigger_takes_its_direction_states_and_links_only() -> None:
    out = OnLinkState("out", ("disconnected", "downgraded"), links=("b",))
    assert takes(out, link()) and takes(out, link("downgraded"))
    assert not takes(out, link("connected"))
    assert not takes(out, link(direction="in"))
    assert not takes(out, link(name="c"))
    both = OnLinkState("both", ("disconnected",))
    assert takes(both, link(direction="in", name="x")) and not takes(both, client())


def test_the_sink_wants_only_its_families_and_offers_to_each_trigger_it_fires() -> None:
    sink = ActionHappenings()
    assert sink.families == frozenset()
    a, b = Lane(), Lane()
    sink.bind(a, OnClient("connected"), 0)
    sink.bind(a, OnClient("disconnected"), 1)
    sink.bind(b, OnClient("connected"), 2)
    assert sink.families == {"clients"}
    sink.happened(client())
    sink.happened(client("logged_on"))
    sink.happened(SubscriptionHappening("added", 1, 1, "c", None, "s", "subscribe", "live",
                                        "t", None, "", "none"))  # fmt: skip
    assert [(r.happening.event, r.trigger) for r in a.got if isinstance(r, HappeningRun)] == [
        ("connected", 0)
    ]
    assert [r.trigger for r in b.got] == [2]


def test_a_happening_as_a_document_and_as_variables() -> None:
    gone = client("disconnected")
    assert document(gone)["client_name"] == "c" and document(gone)["cause"] == "client"
    assert variables(gone) == {
        "AMPS_CLIENT_NAME": "c", "AMPS_CONNECTION_NAME": "websocket-json-3",
        "AMPS_AUTHENTICATION_ID": "u", "AMPS_REMOTE_ADDRESS": "10.0.0.1:5",
        "AMPS_TRANSPORT_NAME": "websocket-json", "AMPS_REASON": "bye",
        "AMPS_DISCONNECT_CAUSE": "client",
    }  # fmt: skip
    assert "AMPS_REASON" not in variables(client())
    lost = link()
    assert (document(lost)["state"], document(lost)["link"]) == ("disconnected", "b")
    assert variables(lost)["AMPS_REPLICATION_PEER_NAME"] == "inst-b"
    assert variables(lost)["AMPS_LINK_STATE"] == "disconnected"


def removal(
    reason: str = "deleted", source: str = "local", topic: str = "book"
) -> SowRemovalHappening:
    record = SowRecord("k", b"{}", 1, 5, 0, 0, 0, 1)
    return SowRemovalHappening(5, topic, reason, (record,), source)  # type: ignore[arg-type]


def test_sow_triggers_take_their_topic_reason_and_source_and_say_what_they_watch() -> None:
    deletes = OnSowRemoval("deleted", TopicMatch("^bo", is_regex=True), source="replicated")
    assert takes(deletes, removal(source="replicated"))
    assert not takes(deletes, removal()) and not takes(deletes, removal("expired", "replicated"))
    assert not takes(deletes, removal(source="replicated", topic="other"))
    oof = OnOof(TopicMatch("book"), "/open", reasons=("match", "expired"))
    assert takes(oof, removal("expired")) and not takes(oof, removal())
    assert takes(oof, SowChangeHappening(5, "book", (), "replicated"))
    assert not takes(OnOof(TopicMatch("book")), SowChangeHappening(5, "book", (), "local"))
    sink = ActionHappenings()
    lane = Lane()
    sink.bind(lane, deletes, 0)
    sink.bind(lane, OnOof(TopicMatch("book"), reasons=("match",)), 1)  # no filter: nothing
    assert sink.families == {"sow_removals"}
    assert sink.watches("sow_removals", "book") and not sink.watches("sow_removals", "other")
    assert not sink.watches("sow_changes", "book")
    sink.happened(removal(source="replicated"))
    assert [(r.trigger, r.count) for r in lane.got] == [(0, 1)]


def test_a_dead_letter_trigger_takes_its_queues_only() -> None:
    fact = DeadLetterFact("work-in", "1|1|", "rejected", "c/1", 1, b"{}", b"{}")
    letters = DeadLetterHappening(5, "work", "work-dead", (fact, fact))
    on = OnDeadLetter(("work",), ("rejected",))
    assert takes(on, letters)
    assert not takes(OnDeadLetter(("other",), ("rejected",)), letters)
    assert not takes(on, client())
    sink = ActionHappenings()
    lane = Lane()
    sink.bind(lane, on, 0)
    assert sink.families == {"dead_letters"}
    sink.happened(letters)
    assert [(r.trigger, r.count) for r in lane.got] == [(0, 2)]
