"""Back-pressure against real processes: a burst does not cut a subscriber that keeps
reading; a subscriber that stops reading is disconnected after ``SlowClientTimeout``.

The reader runs in its own process (tests/support/steady_reader.py) with a small socket
receive buffer, so a burst it cannot take at once stays in the broker, as across a network.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from typing import Any

import httpx
import orjson
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from tests.support.server import ROOT, SpoolProcess

#: 20,000 messages of about 1 KB: a 20 MB burst against a 1 MB buffer limit
COUNT = 20_000
PAD = b"x" * 1000
#: the reader's pace: steady, and well below what one publisher sends on loopback
READER_RATE = 4_000_000.0
PER_FRAME = 50


def _body(i: int) -> bytes:
    return b'{"i":%d,"pad":"%s"}' % (i, PAD)


def _frames(topic: str) -> list[bytes]:
    frames: list[bytes] = []
    for start in range(0, COUNT, PER_FRAME):
        parts: list[bytes] = []
        for i in range(start, min(COUNT, start + PER_FRAME)):
            body = _body(i)
            parts.append(b'{"c":"publish","t":"%s","l":%d}%s' % (topic.encode(), len(body), body))
        frames.append(b"".join(parts))
    return frames


async def _publish_burst(url: str, topic: str) -> float:
    """Publish the whole burst as fast as the broker takes it; returns the seconds taken."""
    frames = _frames(topic)
    async with connect(url, compression=None, max_size=2**24) as ws:
        await ws.send(b'{"c":"logon","cid":"l","client_name":"burst","a":"processed"}')
        await ws.recv()
        started = time.monotonic()
        for frame in frames:
            await ws.send(frame)
        # a flush acks once everything before it was processed
        await ws.send(b'{"c":"flush","cid":"f","a":"processed"}')
        while True:
            data = await asyncio.wait_for(ws.recv(), 60)
            if b'"cid":"f"' in data:
                break
        return time.monotonic() - started


def _start_reader(url: str, topic: str) -> subprocess.Popen[bytes]:
    reader = subprocess.Popen(
        [sys.executable, "-m", "tests.support.steady_reader", url, topic, str(COUNT),
         str(READER_RATE)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
    )  # fmt: skip
    assert reader.stdout is not None
    line = reader.stdout.readline()
    assert line.strip() == b"ready", line
    return reader


def _reader_result(reader: subprocess.Popen[bytes]) -> dict[str, Any]:
    out, _ = reader.communicate(timeout=120)
    result: dict[str, Any] = orjson.loads(out.strip().splitlines()[-1])
    return result


def test_a_20mb_burst_is_delivered_whole_and_in_order_to_a_steady_slower_reader(
    spool_server_factory: Any,
) -> None:
    proc: SpoolProcess = spool_server_factory(
        tuning="<SlowClientBufferLimit>1MB</SlowClientBufferLimit>",
        transport_extra="<MaxMessageSize>256KB</MaxMessageSize>",
    )
    reader = _start_reader(proc.ws_url, "burst")
    try:
        publish_seconds = asyncio.run(_publish_burst(proc.ws_url, "burst"))
        result = _reader_result(reader)
    finally:
        if reader.poll() is None:
            reader.kill()
    assert result["closed"] is None, result
    assert result["problem"] is None, result
    assert result["received"] == COUNT
    assert result["in_order"]
    # the burst really outran the reader (it was not absorbed by socket buffers)
    assert publish_seconds < result["seconds"], (publish_seconds, result)
    metrics = httpx.get(f"{proc.http_url}/metrics").text
    assert _sample(metrics, "spool_spills_total") >= 1
    assert _sample(metrics, 'spool_disconnects_total{cause="slow_client_buffer"}') == 0
    assert _sample(metrics, "spool_subscriptions_catching_up") == 0


def _sample(exposition: str, name: str) -> float:
    """The value of one sample of a Prometheus exposition (0 when absent)."""
    for line in exposition.splitlines():
        if line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_a_reader_that_stops_reading_is_disconnected_after_slow_client_timeout(
    spool_server_factory: Any,
) -> None:
    proc: SpoolProcess = spool_server_factory(
        tuning=(
            "<SlowClientBufferLimit>1MB</SlowClientBufferLimit>"
            "<SlowClientTimeout>1s</SlowClientTimeout>"
        ),
        transport_extra="<MaxMessageSize>256KB</MaxMessageSize>",
    )

    async def scenario() -> tuple[float, str | None]:
        async with connect(proc.ws_url, compression=None, max_queue=1, max_size=2**24) as stuck:
            await stuck.send(b'{"c":"logon","cid":"l","client_name":"stuck","a":"processed"}')
            await stuck.recv()
            await stuck.send(b'{"c":"subscribe","cid":"s","t":"feed","sub_id":"s","a":"processed"}')
            await stuck.recv()
            stuck.transport.pause_reading()
            await _publish_burst(proc.ws_url, "feed")
            stopped = time.monotonic()
            async with httpx.AsyncClient() as http:
                while True:
                    names = {
                        c["name"]
                        for c in (await http.get(f"{proc.http_url}/api/clients")).json()["clients"]
                    }
                    if "stuck" not in names:
                        break
                    assert time.monotonic() - stopped < 30, "never disconnected"
                    await asyncio.sleep(0.05)
            gone = time.monotonic() - stopped
            stuck.transport.resume_reading()
            reason = None
            with pytest.raises(ConnectionClosed) as info:
                while True:
                    await asyncio.wait_for(stuck.recv(), 10)
            if info.value.rcvd is not None:
                reason = info.value.rcvd.reason
            return gone, reason

    gone, reason = asyncio.run(scenario())
    assert reason == "slow client"
    assert gone < 10
    metrics = httpx.get(f"{proc.http_url}/metrics").text
    assert _sample(metrics, 'spool_disconnects_total{cause="slow_client_stalled"}') == 1
