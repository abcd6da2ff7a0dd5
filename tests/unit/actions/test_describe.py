"""Triggers and steps in words (the admin API's and the dashboard's lines)."""

from __future__ import annotations

import pytest

from spool.server.actions.describe import describe_step, describe_trigger
from spool.server.config import (
    CompactSow,
    DeleteSow,
    EchoMessage,
    ExtractValues,
    OnClient,
    OnDeadLetter,
    OnLinkState,
    OnOof,
    OnPublishMessage,
    OnSowRemoval,
    Step,
    Template,
    TopicMatch,
    Trigger,
    Webhook,
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


STEPS: list[tuple[Step, str]] = [
    (DeleteSow(Template.parse("orders"), filter=Template.parse("/id = '{{SYM}}'")),
     "delete SOW records of orders where /id = '{{SYM}}'"),
    (DeleteSow(Template.parse("orders"), key=Template.parse("{{K}}")),
     "delete SOW records of orders with key {{K}}"),
    (CompactSow(), "compact every persistent SOW topic"),
    (CompactSow(("orders", "fx")), "compact SOW topics orders, fx"),
    (EchoMessage(Template.parse("big {{SYM}}"), "warning", 5),
     "echo (warning, at most 5/s): big {{SYM}}"),
    (ExtractValues((("SYM", "/sym"), ("N", "/qty * /px"))), "extract SYM, N"),
    (ExtractValues((("SYM", "/sym"),), Template.parse("{{AMPS_DATA}}")),
     "extract SYM from {{AMPS_DATA}}"),
    (Webhook(Template.parse("https://h/spool/x?token=SECRET-q"), Template.parse("{}"),
             headers=(("Authorization", Template.parse("Bearer SECRET-h")),
                      ("X-Trace", Template.parse("SECRET-t"))),
             signing_key="SECRET-key-0123456789"),
     "post to https://h/spool/x?… (headers Authorization, X-Trace, signed)"),
    (Webhook(Template.parse("https://h/spool/{{SYM}}"), Template.parse("{}")),
     "post to https://h/spool/{{SYM}}"),
]  # fmt: skip


@pytest.mark.parametrize(("step", "text"), STEPS, ids=[t for _, t in STEPS])
def test_each_new_module_in_words_without_its_secrets(step: Step, text: str) -> None:
    described = describe_step(step)
    assert described == text
    assert "SECRET" not in described
