"""``GET /live/events`` on a real ``spool serve``: what a dashboard page receives, and a
shutdown that ends open streams cleanly instead of waiting on them."""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import orjson

from spool.server.client.sync import SyncClient
from tests.support.server import SpoolProcess


def sse_events(lines: Iterator[str]) -> Iterator[tuple[str, Any]]:
    """(event name, decoded data) from the lines of a text/event-stream."""
    name = "message"
    data: list[str] = []
    for line in lines:
        if line == "":
            if data:
                yield name, orjson.loads("\n".join(data))
            name, data = "message", []
        elif line.startswith("event: "):
            name = line[len("event: ") :]
        elif line.startswith("data: "):
            data.append(line[len("data: ") :])


def test_a_page_gets_history_then_points_and_log_entries_and_shutdown_ends_the_stream(
    spool_server_factory: Callable[..., SpoolProcess],
) -> None:
    server = spool_server_factory(name="live")
    with httpx.stream("GET", f"{server.http_url}/live/events", timeout=20) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["cache-control"] == "no-store"
        events = sse_events(response.iter_lines())
        name, history = next(events)
        assert name == "history"
        assert {"points", "log"} <= history.keys()
        assert any(i["entry"]["event"] == "started" for i in history["log"])

        with SyncClient(server.ws_url, "live-feeder") as client:
            seen_logon = False
            busy_point: dict[str, Any] | None = None
            for name, data in events:
                if name == "log":
                    seen_logon |= any(
                        i["entry"]["event"] == "logon" and i["entry"].get("client") == "live-feeder"
                        for i in data
                    )
                elif name == "message":
                    if data["msgs_in"] > 0 and data["acks"] > 0:
                        busy_point = data
                        break
                    # keep the publisher busy until a whole second of it shows in a point
                    for i in range(50):
                        client.publish("ticker", {"i": i}, persisted=True)
                    client.flush()
        assert seen_logon
        assert busy_point is not None
        assert busy_point["connections"] >= 1
        assert busy_point["durable_seq"] >= 50
        assert busy_point["ack_p99_ms"] >= busy_point["ack_p50_ms"] > 0

        # the broker begins to stop while the stream is open: the stream must end with a
        # proper end of body (an abrupt close would raise RemoteProtocolError here)
        assert server.proc is not None
        server.proc.send_signal(signal.SIGTERM)
        for _ in events:
            pass
    server.stop()
    # the whole shutdown ran (uvicorn did not give up on a connection and cancel it)
    assert '"event":"stopped"' in server.log()
    assert "timeout graceful shutdown exceeded" not in server.log()
