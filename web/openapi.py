"""The OpenAPI 3.1 document of the admin API, generated from the route table.

web/admin.py declares every endpoint once, as an :class:`Operation` next to its handler;
the routes and this document are both built from that table, so they cannot drift (a
test compares the app's /api routes with the document's paths).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

_PARAM: Final = re.compile(r"{([a-zA-Z_][a-zA-Z0-9_]*)(?::[a-z]+)?}")

ERROR_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "required": ["error", "detail"],
    "properties": {
        "error": {"type": "string", "description": "stable reason, e.g. 'not found'"},
        "detail": {"type": "string", "description": "human explanation"},
    },
}

_STATUS_TEXT: Final[dict[int, str]] = {
    400: "bad parameters or body",
    401: "missing or unknown credentials",
    403: "not allowed (not an admin, CSRF token missing, cross-origin, or not loopback)",
    404: "no such object, or the subsystem is not configured on this instance",
    405: "method not allowed",
    409: "conflict with the current state",
    413: "request body too large",
    500: "the operation failed (an on-demand action whose step failed: the body has the run)",
    503: "not ready",
}


@dataclass(frozen=True, slots=True)
class QueryParam:
    """A query-string parameter of an operation."""

    name: str
    description: str
    required: bool = False
    type: Literal["string", "integer", "number"] = "string"
    #: the bounds the handler enforces (a value outside them is a 400)
    minimum: int | None = None
    maximum: int | None = None

    def schema(self) -> dict[str, Any]:
        """Its JSON schema: the type and the bounds the handler checks."""
        out: dict[str, Any] = {"type": self.type}
        if self.minimum is not None:
            out["minimum"] = self.minimum
        if self.maximum is not None:
            out["maximum"] = self.maximum
        return out

    @property
    def checked(self) -> bool:
        """Whether the handler can refuse a value (a 400): numbers must parse and fit."""
        return self.type != "string" or self.minimum is not None or self.maximum is not None


@dataclass(frozen=True, slots=True)
class Operation:
    """One method on one path, as documented.

    Attributes:
        method: ``GET`` (read) or ``POST`` (action).
        path: the Starlette path template (``/api/clients/{name}``).
        summary: one line.
        tag: group in the document (``clients``, ``stats``, ...).
        description: longer text (optional).
        query: query parameters.
        body: JSON schema of the request body (actions that take one).
        errors: error statuses this operation can return besides the auth ones.
        access: ``public`` (probes), ``user`` (any authenticated user) or ``admin``.
        media_type: the content type of a success (errors are always JSON).
        response: JSON schema of a success (may refer to the document's component
            schemas); None: an object, undescribed.
    """

    method: Literal["GET", "POST"]
    path: str
    summary: str
    tag: str
    description: str = ""
    query: tuple[QueryParam, ...] = ()
    body: dict[str, Any] | None = None
    errors: tuple[int, ...] = ()
    access: Literal["public", "user", "admin"] = "user"
    #: what a success answers with (``text/plain`` for the Prometheus exposition)
    media_type: str = "application/json"
    response: dict[str, Any] | None = None

    @property
    def openapi_path(self) -> str:
        """The path with convertors stripped (``{id:int}`` -> ``{id}``)."""
        return _PARAM.sub(r"{\1}", self.path)

    @property
    def path_params(self) -> list[str]:
        """Names of the path parameters, in order."""
        return _PARAM.findall(self.path)


def _operation(op: Operation) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "summary": op.summary,
        "tags": [op.tag],
        "operationId": f"{op.method.lower()}_{re.sub(r'[^a-zA-Z0-9]+', '_', op.openapi_path)}".rstrip(
            "_"
        ),
    }
    if op.description:
        doc["description"] = op.description
    params: list[dict[str, Any]] = [
        {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
        for name in op.path_params
    ]
    params.extend(
        {
            "name": q.name,
            "in": "query",
            "required": q.required,
            "description": q.description,
            "schema": q.schema(),
        }
        for q in op.query
    )
    if params:
        doc["parameters"] = params
    if op.body is not None:
        doc["requestBody"] = {
            "required": False,
            "content": {"application/json": {"schema": op.body}},
        }
    success = op.response
    if success is None:
        success = {"type": "object" if op.media_type == "application/json" else "string"}
    responses: dict[str, Any] = {
        "200": {"description": "success", "content": {op.media_type: {"schema": success}}}
    }
    statuses = set(op.errors)
    if op.access != "public":
        statuses.add(401)
    if op.access == "admin":
        statuses.add(403)
    if op.method == "POST" or any(q.checked for q in op.query):
        statuses.add(400)  # an action's input, or a query parameter, can be refused
    for status in sorted(statuses):
        responses[str(status)] = {"$ref": f"#/components/responses/E{status}"}
    doc["responses"] = responses
    if op.access == "public":
        doc["security"] = [{}, {"bearerAuth": []}]
    return doc


def openapi_document(
    operations: Iterable[Operation],
    *,
    version: str,
    schemas: Mapping[str, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The OpenAPI 3.1 document for ``operations``; ``schemas`` are the component schemas
    their responses refer to (``#/components/schemas/NAME``)."""
    paths: dict[str, dict[str, Any]] = {}
    for op in operations:
        paths.setdefault(op.openapi_path, {})[op.method.lower()] = _operation(op)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Spool admin API",
            "version": version,
            "description": (
                "Reads are GET; every action is POST and needs an admin user when <Users> "
                'are configured. Errors are {"error": reason, "detail": text}. '
                "See docs/admin-api.md."
            ),
        },
        "paths": dict(sorted(paths.items())),
        "security": [{"bearerAuth": []}, {"sessionCookie": []}],
        "components": {
            "securitySchemes": {
                "bearerAuth": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "a user's <Token>",
                },
                "sessionCookie": {
                    "type": "apiKey",
                    "in": "cookie",
                    "name": "spool_session_PORT",
                    "description": (
                        "dashboard login session; POSTs also need the X-CSRF-Token header"
                    ),
                },
            },
            "schemas": {"Error": ERROR_SCHEMA, **(schemas or {})},
            "responses": {
                f"E{status}": {
                    "description": text,
                    "content": {
                        "application/json": {"schema": {"$ref": "#/components/schemas/Error"}}
                    },
                }
                for status, text in _STATUS_TEXT.items()
            },
        },
    }
