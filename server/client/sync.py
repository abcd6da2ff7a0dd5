"""A thin synchronous wrapper over the asyncio :class:`~spool.server.client.client.Client`.

It runs the async client on a private event loop in a daemon thread, so scripts and REPLs
can use Spool without asyncio. Every call blocks until the async call finishes.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

from spool.server.client.client import Ack, Client, LogonInfo, Message, SowResult, Subscription

T = TypeVar("T")


class SyncSubscription:
    """Blocking iterator over a subscription's messages."""

    def __init__(self, owner: SyncClient, sub: Subscription) -> None:
        self._owner = owner
        self._sub = sub
        self.sub_id = sub.sub_id

    def get(self, timeout: float | None = None) -> Message:
        return self._owner._run(self._sub.get(timeout))

    def __iter__(self) -> Iterator[Message]:
        while True:
            yield self.get()

    def unsubscribe(self) -> None:
        self._owner._run(self._sub.unsubscribe())


class SyncClient:
    """Synchronous Spool client (same arguments as :class:`Client`)."""

    def __init__(self, url: str, name: str, **kwargs: Any) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, daemon=True, name=f"spool-client-{name}"
        )
        self._thread.start()
        self._client = Client(url, name, **kwargs)

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def connect(self) -> LogonInfo:
        return self._run(self._client.connect())

    def publish(self, topic: str, data: bytes | str | Any, **kwargs: Any) -> int:
        async def _publish() -> int:
            return self._client.publish(topic, data, **kwargs)

        return self._run(_publish())

    def publish_acked(self, topic: str, data: bytes | str | Any) -> Ack:
        return self._run(self._client.publish_acked(topic, data))

    def wait_persisted(self, seq: int, timeout: float = 30.0) -> None:
        self._run(self._client.wait_persisted(seq, timeout))

    def subscribe(self, topic: str, **kwargs: Any) -> SyncSubscription:
        return SyncSubscription(self, self._run(self._client.subscribe(topic, **kwargs)))

    def unsubscribe(self, sub_id: str = "all") -> None:
        self._run(self._client.unsubscribe(sub_id))

    def flush(self, timeout: float = 30.0) -> None:
        self._run(self._client.flush(timeout))

    def sow(self, topic: str, **kwargs: Any) -> SowResult:
        """A SOW query (:meth:`Client.sow`'s arguments)."""
        return self._run(self._client.sow(topic, **kwargs))

    def sow_delete(self, topic: str, **kwargs: Any) -> int:
        """Delete SOW records (:meth:`Client.sow_delete`'s arguments); how many."""
        return self._run(self._client.sow_delete(topic, **kwargs))

    def close(self) -> None:
        try:
            self._run(self._client.close())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)
            self._loop.close()

    def __enter__(self) -> SyncClient:
        self.connect()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
