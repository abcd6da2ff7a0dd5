"""The REST error catalog: one exception class per HTTP failure the admin API returns.

Every 4xx/5xx body is ``{"error": REASON, "detail": TEXT}`` (docs/admin-api.md). ``REASON`` is
the short, stable string a script can match on (the class's ``error``); ``detail`` is for
humans and never contains secrets.

Hierarchy::

    SpoolError
    └── ApiError                    .status, .error, .detail
        ├── BadRequest              400 "bad request"
        ├── Unauthorized            401 "unauthorized"     (with WWW-Authenticate: Bearer)
        ├── Forbidden               403 "forbidden"
        ├── NotFound                404 "not found"
        ├── MethodNotAllowed        405 "method not allowed" (with Allow)
        ├── Conflict                409 "conflict"
        ├── PayloadTooLarge         413 "payload too large"
        ├── TooManyRequests         429 "too many requests" (with Retry-After)
        ├── InternalError           500 "internal error"
        ├── ActionFailed            500 "action failed"   (with the run's record)
        └── NotReady                503 "not ready"
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import orjson
from starlette.responses import Response

from spool.server.protocol.errors import SpoolError


class JSONResponse(Response):
    """A JSON response rendered with orjson (non-str keys and datetimes allowed)."""

    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content, default=str, option=orjson.OPT_NON_STR_KEYS)


class ApiError(SpoolError):
    """A failure of a REST call, rendered by :meth:`response`.

    Attributes:
        status: HTTP status code.
        error: the stable reason string.
        detail: the human explanation.
        headers: extra response headers (Allow, Retry-After, WWW-Authenticate).
    """

    status: ClassVar[int] = 500
    error: ClassVar[str] = "internal error"

    def __init__(self, detail: str = "", headers: Mapping[str, str] | None = None) -> None:
        super().__init__(detail or self.error)
        self.detail = detail or self.error
        self.headers = dict(headers or {})

    def response(self) -> JSONResponse:
        """The JSON response for this error."""
        return JSONResponse(
            {"error": self.error, "detail": self.detail},
            status_code=self.status,
            headers=self.headers,
        )


class BadRequest(ApiError):
    status = 400
    error = "bad request"


class Unauthorized(ApiError):
    status = 401
    error = "unauthorized"

    def __init__(self, detail: str = "") -> None:
        super().__init__(detail, {"WWW-Authenticate": 'Bearer realm="spool"'})


class Forbidden(ApiError):
    status = 403
    error = "forbidden"


class NotFound(ApiError):
    status = 404
    error = "not found"


class MethodNotAllowed(ApiError):
    status = 405
    error = "method not allowed"

    def __init__(self, method: str, allowed: list[str]) -> None:
        super().__init__(
            f"{method} is not allowed here; use {', '.join(allowed)}",
            {"Allow": ", ".join(allowed)},
        )


class Conflict(ApiError):
    status = 409
    error = "conflict"


class PayloadTooLarge(ApiError):
    status = 413
    error = "payload too large"


class TooManyRequests(ApiError):
    status = 429
    error = "too many requests"

    def __init__(self, detail: str, retry_after: float) -> None:
        super().__init__(detail, {"Retry-After": str(max(int(retry_after + 0.999), 1))})


class InternalError(ApiError):
    status = 500
    error = "internal error"


class ActionFailed(ApiError):
    """An on-demand action ran and a step failed: the body carries the run (``run``)."""

    status = 500
    error = "action failed"

    def __init__(self, detail: str, run: Mapping[str, Any]) -> None:
        super().__init__(detail)
        self.run = dict(run)

    def response(self) -> JSONResponse:
        return JSONResponse(
            {"error": self.error, "detail": self.detail, "run": self.run},
            status_code=self.status,
        )


class NotReady(ApiError):
    status = 503
    error = "not ready"
