"""The schemas the OpenAPI document gives the actions endpoints say exactly what the
service answers: every key of each answer's type, no other, and null where (and only
where) the type allows None."""

from __future__ import annotations

import types
import typing
from dataclasses import fields
from typing import Any

import jsonschema_rs
import pytest

from spool.server.actions.results import EventTally, RunDict, StepDict, WebhookTally
from spool.server.actions.service import ActionInfo, ParameterInfo, StepInfo, TriggerInfo
from spool.web.actions_schema import ACTION_SCHEMAS
from spool.web.openapi import Operation, openapi_document

TYPES: dict[str, Any] = {
    "Action": ActionInfo,
    "ActionRun": RunDict,
    "ActionStepRun": StepDict,
    "ActionTrigger": TriggerInfo,
    "ActionParameter": ParameterInfo,
    "ActionStep": StepInfo,
}


def validator(schema: dict[str, Any]) -> Any:
    return jsonschema_rs.validator_for({**schema, "components": {"schemas": ACTION_SCHEMAS}})


def admits_none(annotation: Any) -> bool:
    return type(None) in typing.get_args(annotation) or annotation is types.NoneType


@pytest.mark.parametrize("name", sorted(TYPES))
def test_each_key_of_the_answer_is_documented_with_its_nullability(name: str) -> None:
    hints = typing.get_type_hints(TYPES[name])
    schema = ACTION_SCHEMAS[name]
    assert set(schema["required"]) == set(schema["properties"]) == set(hints)
    assert schema["additionalProperties"] is False
    for key, annotation in hints.items():
        nullable = validator(schema["properties"][key]).is_valid(None)
        assert nullable == admits_none(annotation), key


def test_an_action_with_its_runs_is_an_action_and_a_history() -> None:
    detail = ACTION_SCHEMAS["ActionWithRuns"]["properties"]
    assert set(detail) == set(typing.get_type_hints(ActionInfo)) | {"history"}


@pytest.mark.parametrize(
    ("name", "counters"), [("EventTally", EventTally), ("WebhookTally", WebhookTally)]
)
def test_a_tally_documents_every_counter_as_a_count(name: str, counters: type) -> None:
    schema = ACTION_SCHEMAS[name]
    assert set(schema["required"]) == {f.name for f in fields(counters)}
    check = validator({"$ref": f"#/components/schemas/{name}"})
    assert check.is_valid(counters().counts())
    assert not check.is_valid({**counters().counts(), "offered": -1, "sent": -1})
    assert not check.is_valid({**counters().counts(), "extra": 1})
    assert not check.is_valid({})


def test_an_event_driven_action_and_a_scheduled_one_both_match() -> None:
    tally = {**EventTally().counts(), "offered": 8, "matched": 5, "runs": 5, "succeeded": 5}
    base = {
        "name": "a", "triggers": [], "next_run": None, "on_admin": False, "parameters": [],
        "steps": [{"index": 1, "kind": "do", "module": "m", "description": "d"}],
        "running": None, "last_run": None, "runs": 5, "skipped": 0,
    }  # fmt: skip
    check = validator({"$ref": "#/components/schemas/Action"})
    assert check.is_valid({**base, "event_driven": True, "events": tally, "webhooks": None})
    hooks = WebhookTally().counts()
    assert check.is_valid({**base, "event_driven": False, "events": None, "webhooks": hooks})
    assert not check.is_valid({**base, "event_driven": True, "events": {"offered": 1},
                               "webhooks": None})  # fmt: skip
    assert not check.is_valid({**base, "event_driven": True, "events": tally})


def test_a_described_response_and_its_components_are_in_the_document() -> None:
    op = Operation("GET", "/api/a", "a", "a", response={"$ref": "#/components/schemas/Action"})
    document = openapi_document([op], version="t", schemas=ACTION_SCHEMAS)
    content = document["paths"]["/api/a"]["get"]["responses"]["200"]["content"]
    assert content == {"application/json": {"schema": {"$ref": "#/components/schemas/Action"}}}
    assert set(ACTION_SCHEMAS) | {"Error"} == set(document["components"]["schemas"])
