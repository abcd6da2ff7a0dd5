"""JSON schemas of what the actions endpoints answer (``GET /api/actions``, one action,
``/api/action_runs``, a run on demand), as components of the OpenAPI document.

Every object lists all its keys as required and no others, so a response that gains,
loses or retypes a field no longer matches (the fuzz test validates real answers). The
two tallies are built from the counters themselves (:class:`EventTally`,
:class:`WebhookTally`), so a new counter is documented as it is added.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any, Final

from spool.server.actions.results import EventTally, WebhookTally

__all__ = ["ACTION_SCHEMAS", "ref"]


def ref(name: str) -> dict[str, str]:
    """A reference to one of :data:`ACTION_SCHEMAS`."""
    return {"$ref": f"#/components/schemas/{name}"}


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    return {"anyOf": [schema, {"type": "null"}]}


def _object(description: str, properties: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return {
        "type": "object",
        "description": description,
        "required": list(properties),
        "additionalProperties": False,
        "properties": properties,
    }


def _counters(description: str, counters: type) -> dict[str, Any]:
    count = {"type": "integer", "minimum": 0}
    return _object(description, {f.name: dict(count) for f in fields(counters)})


_STR: Final = {"type": "string"}
_STR_OR_NULL: Final = {"type": ["string", "null"]}
_INT: Final = {"type": "integer", "minimum": 0}
_STRINGS: Final = {"type": "array", "items": _STR}

ACTION_SCHEMAS: Final[dict[str, dict[str, Any]]] = {
    "EventTally": _counters(
        "what an event-driven action did since the instance started, or over one history "
        "window (offered = loop_cut + dropped + what its worker took; runs = succeeded + "
        "stopped + failed)",
        EventTally,
    ),
    "WebhookTally": _counters(
        "what an action's webhook steps posted since the instance started", WebhookTally
    ),
    "ActionTrigger": _object(
        "one <On> of an action",
        {
            "module": _STR,
            "description": {**_STR, "description": "the trigger in words"},
            "next_run": {**_STR_OR_NULL, "description": "ISO-8601 UTC; null: not timed"},
        },
    ),
    "ActionParameter": _object(
        "a parameter of an on-admin action",
        {
            "name": _STR,
            "default": _STR_OR_NULL,
            "required": {"type": "boolean"},
            "pattern": _STR_OR_NULL,
            "description": _STR,
        },
    ),
    "ActionStep": _object(
        "one <If> or <Do> of an action",
        {
            "index": {"type": "integer", "minimum": 1},
            "kind": {"enum": ["if", "do"]},
            "module": _STR,
            "description": _STR,
        },
    ),
    "ActionStepRun": _object(
        "what one step did in a run (or over an event window)",
        {
            "index": {"type": "integer", "minimum": 1},
            "kind": {"enum": ["if", "do"]},
            "module": _STR,
            "status": {"enum": ["ok", "partial", "stopped", "failed", "not_run"]},
            "message": _STR,
            "duration_s": {"type": "number", "minimum": 0},
            "journals": {"type": "array", "items": {"type": "integer"}},
            "files": _STRINGS,
            "pinned": {
                "type": "array",
                "items": _object(
                    "a journal a pin still needs",
                    {
                        "journal": {"type": "integer"},
                        "owner": _STR,
                        "seq": {"type": "integer"},
                    },
                ),
            },
            "variables": {"type": "object", "additionalProperties": _STR},
        },
    ),
    "ActionRun": _object(
        "one run, or one history window of an event-driven action",
        {
            "id": {"type": ["integer", "null"], "description": "its row; null until stored"},
            "action": _STR,
            "trigger": {**_STR, "description": "the module(s) that started it"},
            "detail": {**_STR, "description": "what about the trigger; a window's counts"},
            "user": _STR_OR_NULL,
            "parameters": {"type": "object", "additionalProperties": _STR},
            "started": _STR,
            "finished": _STR_OR_NULL,
            "duration_s": {"type": ["number", "null"], "minimum": 0},
            "outcome": {"enum": ["succeeded", "partial", "stopped", "failed", None]},
            "message": _STR,
            "steps": {"type": "array", "items": ref("ActionStepRun")},
            "files": _STRINGS,
            "events": {
                **_nullable(ref("EventTally")),
                "description": "a window's change of the tally; null for a run",
            },
        },
    ),
    "Action": _object(
        "one configured action",
        {
            "name": _STR,
            "triggers": {"type": "array", "items": ref("ActionTrigger")},
            "next_run": _STR_OR_NULL,
            "on_admin": {"type": "boolean", "description": "POST /api/actions/{name} runs it"},
            "parameters": {"type": "array", "items": ref("ActionParameter")},
            "steps": {"type": "array", "items": ref("ActionStep")},
            "running": _nullable(ref("ActionRun")),
            "last_run": {
                **_nullable(ref("ActionRun")),
                "description": "the last run; an event-driven action's last window",
            },
            "runs": {**_INT, "description": "runs (firings, for an event-driven action)"},
            "skipped": {**_INT, "description": "firings skipped (messages dropped)"},
            "event_driven": {"type": "boolean", "description": "runs once per message"},
            "events": {
                **_nullable(ref("EventTally")),
                "description": "the tally since start; null unless event-driven",
            },
            "webhooks": {
                **_nullable(ref("WebhookTally")),
                "description": "null: the action has no webhook step",
            },
        },
    ),
}
ACTION_SCHEMAS["ActionWithRuns"] = _object(
    "one configured action and its recent runs",
    {
        **ACTION_SCHEMAS["Action"]["properties"],
        "history": {"type": "array", "items": ref("ActionRun"), "description": "newest first"},
    },
)
