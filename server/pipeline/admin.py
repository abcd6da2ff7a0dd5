"""The few admin REST calls a stream makes to a live instance (docs/admin-api.md, httpx).

A stream reads journal files directly, but two facts only the running broker knows:

- **the durable point** (``GET /api/transaction_log``, ``totals.durable_seq``): records up
  to it are fsynced and will never change; records after it may still be cut by a crash,
  so a stream that must be exactly-once never reads past it;
- **retention**: a named pin (``POST /api/transaction_log/pins``) keeps the journals from
  a seq on until the stream moves it (at each commit) or releases it
  (``POST /api/transaction_log/pins/{owner}/release``).

Blocking calls (the stream reader runs them on the Spark driver, not on an event loop).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import httpx

from spool.server.pipeline.errors import AdminRequestFailed

__all__ = ["AdminClient", "LogPosition"]


class LogPosition:
    """The log's extent as the instance reports it."""

    __slots__ = ("durable_seq", "first_seq", "last_seq")

    def __init__(self, first_seq: int, last_seq: int, durable_seq: int) -> None:
        self.first_seq = first_seq
        self.last_seq = last_seq
        self.durable_seq = durable_seq


class AdminClient:
    """Calls to one instance's admin API.

    Args:
        url: the admin address, e.g. ``http://127.0.0.1:8085``.
        token: bearer token when the instance has users (never logged).
        timeout: seconds per request.
    """

    def __init__(self, url: str, token: str | None = None, timeout: float = 10.0) -> None:
        self.url = url.rstrip("/")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout)

    def close(self) -> None:
        self._http.close()

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        where = f"{method} {self.url}{path}"
        try:
            response = self._http.request(method, path, json=body)
        except httpx.HTTPError as exc:
            raise AdminRequestFailed(where, f"{type(exc).__name__}: {exc}") from exc
        try:
            data = response.json()
        except ValueError:
            data = None
        if response.status_code >= 400:
            detail = data.get("detail") or data.get("error") if isinstance(data, dict) else None
            raise AdminRequestFailed(
                where, f"HTTP {response.status_code}: {detail or response.text[:200]}"
            )
        return data

    def position(self) -> LogPosition:
        """First, last and durable seqs of the instance's log."""
        data = self._call("GET", "/api/transaction_log")
        try:
            totals = data["totals"]
            return LogPosition(
                int(totals["first_seq"]), int(totals["last_seq"]), int(totals["durable_seq"])
            )
        except (TypeError, KeyError, ValueError) as exc:
            raise AdminRequestFailed(
                f"GET {self.url}/api/transaction_log", f"bad answer: {exc}"
            ) from exc

    def pin(self, owner: str, seq: int) -> int:
        """Take or move the pin named ``owner`` to ``seq``; returns the log's first seq."""
        data = self._call("POST", "/api/transaction_log/pins", {"owner": owner, "seq": seq})
        return int(data.get("first_seq", 0)) if isinstance(data, dict) else 0

    def release(self, owner: str) -> bool:
        """Release the pin named ``owner``; False when there was none."""
        try:
            self._call("POST", f"/api/transaction_log/pins/{quote(owner, safe='')}/release")
        except AdminRequestFailed as exc:
            if "HTTP 404" in exc.detail:
                return False
            raise
        return True
