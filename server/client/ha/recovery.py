"""Recovery point adapters: a bookmark store's resume points kept outside the client.

A :class:`RecoveryPointAdapter` receives each subscription's recovery point (its MOST_RECENT
resume bookmark) whenever it moves, and gives them back when the store opens, so a client
on another machine (or after its disk is gone) resumes where the last one stopped.

:class:`SowRecoveryPointAdapter` keeps them in a SOW topic of the broker (docs/sow.md),
one record per ``(client name, sub_id)``, through its **own** connection (client name
``<name>.recovery``): the data connection's outages, reconnects and backpressure do not
hold it up, and a SOW record is overwritten in place, so the topic holds one small record
per subscription. Updates are conflated: while one publish is in flight, only the latest
point per subscription waits. The topic needs no ``Key`` paths: the adapter sets the
record's key with ``k`` (``<name>/<sub_id>``); with key paths configured they must be
``/client`` and ``/sub_id``.

Record body: ``{"client": NAME, "sub_id": SUB_ID, "bookmark": RESUME_BOOKMARK}``.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from typing import Protocol

import orjson

from spool.server.client.client import Client
from spool.server.client.errors import ClientError


class RecoveryPointAdapter(Protocol):
    """Where a bookmark store also keeps recovery points."""

    async def load(self) -> dict[str, str]:
        """Every stored recovery point of this client, by ``sub_id``."""
        ...

    def update(self, sub_id: str, bookmark: str) -> None:
        """``sub_id`` now resumes at ``bookmark`` (queued; :meth:`sync` waits for it)."""
        ...

    def purge(self, sub_id: str) -> None:
        """Forget ``sub_id``'s point."""
        ...

    async def sync(self) -> None:
        """Return once every update so far is stored."""
        ...

    async def close(self) -> None: ...


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


class SowRecoveryPointAdapter:
    """Recovery points in a SOW topic over a connection of its own (module docstring).

    Args:
        url: the broker.
        name: the client name of the data connection (records are per name).
        topic: the SOW topic.
        user_id / password / ssl: for its connection.
        timeout: per command.
    """

    def __init__(
        self,
        url: str,
        name: str,
        topic: str = "spool.recovery",
        *,
        user_id: str | None = None,
        password: str | None = None,
        ssl: ssl.SSLContext | None = None,
        timeout: float = 10.0,
    ) -> None:
        self.url = url
        self.name = name
        self.topic = topic
        self.timeout = timeout
        self._user_id = user_id
        self._password = password
        self._ssl = ssl
        self._client: Client | None = None
        self._pending: dict[str, str | None] = {}
        self._task: asyncio.Task[None] | None = None
        self._error: BaseException | None = None

    async def _connected(self) -> Client:
        c = self._client
        if c is None or c.closed.is_set():
            c = Client(self.url, f"{self.name}.recovery", user_id=self._user_id,
                       password=self._password, ssl=self._ssl)  # fmt: skip
            await c.connect(self.timeout)
            self._client = c
        return c

    def _key(self, sub_id: str) -> str:
        return f"{self.name}/{sub_id}"

    async def load(self) -> dict[str, str]:
        c = await self._connected()
        result = await c.sow(self.topic, filter=f"/client = {_quote(self.name)}",
                             timeout=self.timeout)  # fmt: skip
        points: dict[str, str] = {}
        for record in result.records:
            body = record.json()
            if isinstance(body, dict) and isinstance(body.get("bookmark"), str):
                points[str(body.get("sub_id"))] = body["bookmark"]
        return points

    def update(self, sub_id: str, bookmark: str) -> None:
        self._pending[sub_id] = bookmark
        self._kick()

    def purge(self, sub_id: str) -> None:
        self._pending[sub_id] = None
        self._kick()

    def _kick(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._drain())

    async def _drain(self) -> None:
        while self._pending:
            batch = self._pending
            self._pending = {}
            try:
                c = await self._connected()
                last = 0
                for sid, bm in batch.items():
                    if bm is None:
                        await c.sow_delete(self.topic, keys=[self._key(sid)], timeout=self.timeout)
                    else:
                        body = {"client": self.name, "sub_id": sid, "bookmark": bm}
                        last = c.publish(self.topic, orjson.dumps(body), sow_key=self._key(sid),
                                         persisted=True)  # fmt: skip
                if last:
                    await c.wait_persisted(last, self.timeout)
                self._error = None
            except (OSError, TimeoutError, ClientError) as exc:
                # keep the newest points for the next try; a newer update wins
                for sid, bm in batch.items():
                    self._pending.setdefault(sid, bm)
                self._error = exc
                self._client = None
                return

    async def sync(self) -> None:
        """Store what is pending; raises the connection's error if it could not."""
        if self._pending and (self._task is None or self._task.done()):
            self._kick()
        if self._task is not None:
            await self._task
        if self._error is not None:
            raise self._error

    async def close(self) -> None:
        with contextlib.suppress(OSError, TimeoutError, ClientError):
            await self.sync()
        if self._client is not None:
            await self._client.close()
            self._client = None


__all__ = ["RecoveryPointAdapter", "SowRecoveryPointAdapter"]
