"""Triggers and steps in words (the admin API's and the dashboard's lines)."""

from __future__ import annotations

import pytest

from spool.server.actions.describe import describe_trigger
from spool.server.config import (
    OnClient,
    OnDeadLetter,
    OnLinkState,
    OnOof,
    OnPublishMessage,
    OnSowRemoval,
    TopicMatch,
    Trigger,
)

TRIGGERS: list[tuple[Trigger, str]] = [
    (OnPublishMessage(TopicMatch("^orders/", True), "/qty > 10"),
     "each message published to ^orders/ where /qty > 10"),
    (OnPublishMessage(TopicMatch("orders"), source="replicated"),
     "each message published to orders (replicated messages)"),
    (OnSowRemoval("expired", TopicMatch("orders")), "each SOW record expired from orders"),
    (OnSowRemoval("deleted", TopicMatch("orders"), source="all"),
     "each SOW record deleted from orders (all messages)"),
    (OnOof(TopicMatch("orders"), "/open", ("match",)),
     "each record of orders out of focus where /open (match)"),
    (OnDeadLetter(("work", "jobs"), ("expired",)), "each dead letter of queues work, jobs (expired)"),
    (OnClient("disconnected", "/cause = 'slow_client'", ("websocket-json",)),
     "each client disconnection on transport websocket-json where /cause = 'slow_client'"),
    (OnClient("logged_on"), "each client logon"),
    (OnLinkState("out", ("connected", "disconnected")),
     "connected, disconnected of links to destinations"),
    (OnLinkState("both", ("sync",), ("east",)), "sync of link east"),
]  # fmt: skip


@pytest.mark.parametrize(("trigger", "text"), TRIGGERS, ids=[t for _, t in TRIGGERS])
def test_each_event_trigger_in_words(trigger: Trigger, text: str) -> None:
    assert describe_trigger(trigger) == text
