"""What the engine's write-outage scenarios share: a scenario runs on its own event loop,
numbered publishes to ``orders``, the failure acks a client got, and the log's next retry."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from functools import wraps
from pathlib import Path
from typing import Any

from spool.server.txlog import TransactionLog
from tests.support.engine import EngineHarness, FakeClient

#: the first retry one second after a failed write (then 2 s, 4 s...)
RETRY = "<WriteRetryInterval>1s</WriteRetryInterval>"


def scenario(fn: Callable[[Path], Coroutine[Any, Any, None]]) -> Callable[[Path], None]:
    @wraps(fn)
    def wrapper(tmp_path: Path) -> None:
        asyncio.run(fn(tmp_path))

    return wrapper


def publish(n: int, **header: Any) -> tuple[dict[str, Any], bytes]:
    return {"c": "publish", "t": "orders", "s": n, **header}, b'{"n":%d}' % n


def txlog_of(h: EngineHarness) -> TransactionLog:
    assert h.broker.txlog is not None
    return h.broker.txlog


def failures(client: FakeClient) -> list[dict[str, Any]]:
    return [a for a in client.acks() if a.get("status") == "failure"]


async def next_retry(h: EngineHarness, log: TransactionLog) -> float:
    """When the log's next retry is due (wall clock), once the flusher scheduled it."""
    await h.settle()
    outage = log.write_outage
    assert outage is not None and outage.next_attempt is not None
    return outage.next_attempt
