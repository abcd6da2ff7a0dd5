"""Workers of the delayed family (tests/bench/delayed_family.py): a publisher of delayed
messages and the subscriber that times their delivery, each in its own process.

Both use Spool's own asyncio ``Client``, as an application asking for delayed delivery
would. A message's body carries its number and its due time (``{"i":N,"due_us":T}``,
microseconds since the epoch); the publisher sends that due time as ``deliver_at``. The
due time is read from ``time.time_ns()`` (CLOCK_REALTIME, the clock the broker schedules
by; one clock for all processes of the machine), so the subscriber's receive stamp minus
the body's due time is the message's lateness.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from typing import Any, Final

import orjson

from spool.server.client import Client
from tests.bench.processes import Gate

_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
#: publishes queued between two looks at the persisted acks (the burst's window)
_WINDOW: Final = 10_000


def _moment(due_us: int) -> datetime:
    return _EPOCH + timedelta(microseconds=due_us)


async def delayed_paced_publisher(
    gate: Gate,
    *,
    url: str,
    name: str,
    topic: str,
    rate: int,
    seconds: float,
    delay_s: float,
    timeout: float,
) -> dict[str, Any]:
    """Publish ``rate * seconds`` messages at ``rate`` per second, each due ``delay_s``
    after it is sent (the send stamp is taken when the loop wakes for the messages due
    then, about every millisecond); waits for the persisted ack of the last one."""
    total = int(rate * seconds)
    delay_us = round(delay_s * 1_000_000)
    async with Client(url, name) as client:
        await gate.aopen()
        start = time.monotonic_ns()
        interval = 1e9 / rate
        sent = 0
        last = 0
        while sent < total:
            now = time.monotonic_ns()
            due = min(total, int((now - start) / interval) + 1) - sent
            if due <= 0:
                await asyncio.sleep((start + sent * interval - now) / 1e9)
                continue
            due_us = time.time_ns() // 1000 + delay_us
            at = _moment(due_us)
            for i in range(sent, sent + due):
                body = b'{"i":%d,"due_us":%d}' % (i, due_us)
                last = client.publish(topic, body, deliver_at=at, persisted=True)
            sent += due
        last_send = time.monotonic_ns()
        await client.wait_persisted(last, timeout)
    return {"sent": total, "start_ns": start, "last_send_ns": last_send}


async def delayed_burst_publisher(
    gate: Gate,
    *,
    url: str,
    name: str,
    topic: str,
    count: int,
    lead_s: float,
    timeout: float,
) -> dict[str, Any]:
    """Publish ``count`` messages as fast as the persisted acks allow (at most
    :data:`_WINDOW` unacked), all due ``lead_s`` after go.

    Raises:
        RuntimeError: the last persisted ack came after the due time: the burst would
            measure the publisher, not the delivery.
    """
    async with Client(url, name) as client:
        await gate.aopen()
        start = time.monotonic_ns()
        due_us = time.time_ns() // 1000 + round(lead_s * 1_000_000)
        at = _moment(due_us)
        first = client.seq + 1
        last = 0
        for i in range(count):
            body = b'{"i":%d,"due_us":%d}' % (i, due_us)
            last = client.publish(topic, body, deliver_at=at, persisted=True)
            if (i + 1) % 1000 == 0:
                if last - _WINDOW >= first:
                    await client.wait_persisted(last - _WINDOW, timeout)
                await asyncio.sleep(0)  # let the writer send what is queued
        await client.wait_persisted(last, timeout)
        stored_us = time.time_ns() // 1000
    if stored_us >= due_us:
        raise RuntimeError(
            f"storing {count} messages took {(stored_us - due_us) / 1e6 + lead_s:.2f}s, "
            f"past their due time ({lead_s}s after the start): raise the lead"
        )
    return {"sent": count, "start_ns": start, "due_us": due_us,
            "stored_ahead_s": (due_us - stored_us) / 1e6}  # fmt: skip


async def delayed_subscriber(
    gate: Gate,
    *,
    url: str,
    name: str,
    topic: str,
    expected: int,
    grace_s: float,
    timeout: float,
) -> dict[str, Any]:
    """Subscribe, then stamp every delivery: lateness (receive minus due, ns) per message,
    in arrival order. After the ``expected``-th message it reads ``grace_s`` more, so a
    duplicate delivered just after is seen.

    Raises:
        RuntimeError: a message number arrived twice, or not every one arrived in time.
    """
    lateness = [0] * expected
    seen = bytearray(expected)
    received = 0
    duplicates = 0
    first_ns = last_ns = 0
    async with Client(url, name, queue_size=200_000) as client:
        sub = await client.subscribe(topic, timeout=timeout)
        await gate.aopen()

        async def consume() -> None:
            nonlocal received, duplicates, first_ns, last_ns
            async for batch in sub.batches():
                now_ns = time.time_ns()
                for msg in batch:
                    body = orjson.loads(msg.data)
                    i = body["i"]
                    if seen[i]:
                        duplicates += 1
                        continue
                    seen[i] = 1
                    lateness[i] = now_ns - body["due_us"] * 1000
                    received += 1
                if not first_ns:
                    first_ns = now_ns
                last_ns = now_ns
                if received >= expected:
                    return

        try:
            await asyncio.wait_for(consume(), timeout)
        except TimeoutError:
            raise RuntimeError(
                f"{expected - received} of {expected} messages never arrived "
                f"({duplicates} duplicates)"
            ) from None
        # anything more in the grace period is a duplicate (every number arrived)
        with_grace = asyncio.wait_for(consume(), grace_s)
        try:
            await with_grace
        except TimeoutError:
            pass
    if duplicates:
        raise RuntimeError(f"{duplicates} messages were delivered twice")
    return {"count": received, "lateness_ns": lateness, "first_ns": first_ns,
            "last_ns": last_ns}  # fmt: skip
