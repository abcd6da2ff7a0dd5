"""Parameters of the REST admin API's requests, parsed once for every subsystem.

The admin API (web/admin.py) and the subsystems' parts of it (web/replication_api.py,
web/stats_api.py, ...) take the same kinds of parameters: bounded integers, a time window
``t0``/``t1`` and small JSON object bodies. Parsing them in one place gives every endpoint
the same 400 (and 413) messages.
"""

from __future__ import annotations

from typing import Any, Final

import orjson
from starlette.requests import Request

from spool.server.clock import Clock
from spool.server.stats.timeparse import parse_time
from spool.web.api_errors import BadRequest, PayloadTooLarge

__all__ = [
    "DEFAULT_WINDOW",
    "EVENTS_MAX",
    "MAX_BODY",
    "TIME_HELP",
    "int_param",
    "json_body",
    "time_window",
]

#: largest request body an action takes
MAX_BODY: Final = 64 * 1024

#: the window a series or event query covers when ``t0`` is not given
DEFAULT_WINDOW: Final = 3600.0
#: most events (or event-like rows) one answer holds
EVENTS_MAX: Final = 1000
#: how a time parameter is written (for the OpenAPI descriptions)
TIME_HELP: Final = "YYYYmmddTHHMMSS[Z], ISO-8601 or epoch seconds; inclusive"


def int_param(request: Request, name: str, default: int, low: int, high: int) -> int:
    """The integer query parameter ``name`` (``default`` when absent), within bounds.

    Raises:
        BadRequest: not an integer, or outside ``low..high``.
    """
    text = request.query_params.get(name)
    if text is None or text == "":
        return default
    try:
        value = int(text)
    except ValueError as exc:
        raise BadRequest(f"{name} must be an integer") from exc
    if not low <= value <= high:
        raise BadRequest(f"{name} must be between {low} and {high}")
    return value


def time_window(request: Request, clock: Clock) -> tuple[float, float]:
    """``(t0, t1)`` from the query: ``t1`` defaults to now, ``t0`` to an hour before it.

    Raises:
        BadRequest: ``t0`` after ``t1``.
        BadTimeValue: a time that cannot be read (the API answers 400).
    """
    params = request.query_params
    t1 = parse_time(params["t1"]) if params.get("t1") else clock.time()
    t0 = parse_time(params["t0"]) if params.get("t0") else t1 - DEFAULT_WINDOW
    if t0 > t1:
        raise BadRequest("t0 is after t1")
    return t0, t1


async def json_body(request: Request) -> dict[str, Any]:
    """The request's JSON object body ({} when empty), read with a size limit.

    Raises:
        PayloadTooLarge: more than :data:`MAX_BODY` bytes (read no further).
        BadRequest: not JSON, or not an object.
    """
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY:
            raise PayloadTooLarge(f"body larger than {MAX_BODY} bytes")
        chunks.append(chunk)
    raw = b"".join(chunks)
    if not raw.strip():
        return {}
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise BadRequest(f"body is not JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise BadRequest("body must be a JSON object")
    return body
