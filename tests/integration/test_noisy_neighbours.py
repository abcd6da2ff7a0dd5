"""One client cannot stall the broker or exhaust its memory: the attacks of a valid
low-privilege account, against a real ``spool serve`` with users, while a well-behaved
client publishes (the key listing over REST is tests/integration/test_rest_entitlements.py).
"""

from __future__ import annotations

import asyncio
import base64
import os
import socket
import time
from collections.abc import Iterator

import httpx
import psutil
import pytest

from spool.server.client import Client
from spool.server.protocol import errors
from spool.server.protocol.frame import encode_message
from tests.support.roster import bearer
from tests.support.server import SpoolProcess, config_xml
from tests.support.wait import wait_until

ALICE = "alice-token-0123456789"
OPS = "ops-token-0123456789abc"
USERS = (
    f"<User><Name>ops</Name><Token>{OPS}</Token><Admin>true</Admin>"
    "<Read>.*</Read><Write>.*</Write></User>"
    f"<User><Name>alice</Name><Token>{ALICE}</Token>"
    "<Read>^public\\.</Read><Write>^public\\.</Write></User>"
)
LIMIT = 8 << 20


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SpoolProcess]:
    work = tmp_path_factory.mktemp("neighbours")
    xml = config_xml(
        work / "data",
        users=USERS,
        tuning="<SlowClientBufferLimit>8MB</SlowClientBufferLimit>",
        transport_extra="<MaxMessageSize>1MB</MaxMessageSize>",
    )
    proc = SpoolProcess(work, xml)
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


async def _probe_ack_seconds(server: SpoolProcess, name: str) -> float:
    """Seconds a well-behaved client waits for the ack of one publish."""
    async with Client(server.ws_url, name, user_id="ops", password=OPS) as probe:
        started = time.monotonic()
        await probe.publish_acked("public.probe", {"n": 1})
        return time.monotonic() - started


def test_a_regex_filter_is_answered_at_once_and_stalls_nobody(server: SpoolProcess) -> None:
    """REGEXP_MATCH('aaa…a!', '^(a+)+$') was folded by a backtracking engine on the event
    loop (28 a's: 29 s of everyone waiting); LIKE '^(a+)+$' did it per message."""

    async def scenario() -> None:
        async with Client(server.ws_url, "alice-rx", user_id="alice", password=ALICE) as alice:
            bomb = "a" * 40 + "!"
            started = time.monotonic()
            await alice.subscribe(
                "public.x", filter=f"REGEXP_MATCH('{bomb}', '^(a+)+$')", sub_id="r1"
            )
            await alice.subscribe("public.x", filter="/v LIKE '^(a+)+$'", sub_id="r2")
            with pytest.raises(errors.BadFilter, match="backreference"):
                await alice.subscribe("public.x", filter="/v LIKE '^(a+)\\1$'", sub_id="r3")
            assert time.monotonic() - started < 1.0
            for _ in range(20):
                alice.publish("public.x", {"v": bomb})
            # while those run through the LIKE subscription, a probe publishes
            assert await _probe_ack_seconds(server, "probe-rx") < 1.0
            await alice.flush()

    asyncio.run(scenario())


def _raw_websocket(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall(
        f"GET /amps/json HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
        f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
        .encode()
    )  # fmt: skip
    head = b""
    while b"\r\n\r\n" not in head:
        head += sock.recv(4096)
    assert head.startswith(b"HTTP/1.1 101"), head
    return sock


def _frame(payload: bytes) -> bytes:
    """A masked binary client frame (RFC 6455)."""
    mask = os.urandom(4)
    n = len(payload)
    head = bytes([0x82, 0x80 | 126]) + n.to_bytes(2, "big") if n >= 126 else bytes([0x82, 0x80 | n])
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def test_replays_on_a_connection_that_reads_nothing_cost_at_most_its_limit(
    server: SpoolProcess,
) -> None:
    """300 x 60 KB on public.big (18 MB, twice the limit); one connection sends 20
    subscribes from EPOCH and reads nothing: the broker grew by 370 MB in 6 s."""

    async def fill() -> None:
        async with Client(server.ws_url, "feed-big", user_id="ops", password=OPS) as feed:
            pad = "x" * 60_000
            for i in range(300):
                feed.publish("public.big", {"i": i, "pad": pad})
            await feed.flush()

    asyncio.run(fill())
    broker = psutil.Process(server.pid)
    before = broker.memory_info().rss
    sock = _raw_websocket(server.port)
    try:
        logon = {"c": "logon", "cid": "l", "client_name": "alice-rp", "user_id": "alice",
                 "pw": ALICE}  # fmt: skip
        subscribes = [
            {"c": "subscribe", "t": "public.big", "sub_id": f"r{i}", "bm": "0"} for i in range(20)
        ]
        sock.sendall(_frame(b"".join(encode_message(h) for h in [logon, *subscribes])))
        with httpx.Client(base_url=server.http_url, headers=bearer(OPS), timeout=30) as http:

            def replaying() -> bool:
                subs = http.get("/api/subscriptions").json()["subscriptions"]
                mine = [s for s in subs if s["client"] == "alice-rp"]
                return len(mine) == 20 and all(s["state"] == "replaying" for s in mine)

            wait_until(replaying, timeout=30, message="the 20 replays to start")
            # they stay replaying (the client reads nothing); the memory they hold settles
            peak = _settled_peak(broker)
            assert replaying()
        assert peak - before <= LIMIT, f"grew by {(peak - before) / 2**20:.1f} MiB"
        assert asyncio.run(_probe_ack_seconds(server, "probe-rp")) < 1.0
    finally:
        sock.close()


def _settled_peak(proc: psutil.Process) -> int:
    """The highest RSS read until five readings in a row agree within 1 MiB."""
    readings = [proc.memory_info().rss]

    def settled() -> bool:
        readings.append(proc.memory_info().rss)
        last = readings[-5:]
        return len(last) == 5 and max(last) - min(last) <= 1 << 20

    wait_until(settled, timeout=30, interval=0.1, message="the broker's memory to settle")
    return max(readings)


def test_a_connection_past_its_subscription_quota_is_refused_with_the_reason(
    server: SpoolProcess,
) -> None:
    async def scenario() -> None:
        async with Client(server.ws_url, "alice-q", user_id="alice", password=ALICE) as alice:
            for i in range(100):
                await alice.subscribe("public.q", filter=f"/v = {i}", sub_id=f"q{i}")
            with pytest.raises(errors.LimitExceeded, match="MaxSubscriptionsPerConnection"):
                await alice.subscribe("public.q", filter="/v = 100", sub_id="q100")
            assert await _probe_ack_seconds(server, "probe-q") < 1.0

    asyncio.run(scenario())


def test_an_idle_socket_is_closed_at_the_logon_deadline(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    work = tmp_path_factory.mktemp("deadline")
    proc = SpoolProcess(work, config_xml(work / "data", users=USERS,
                                         tuning="<LogonTimeout>1s</LogonTimeout>"))  # fmt: skip
    proc.start()
    try:
        sock = _raw_websocket(proc.port)
        sock.settimeout(30)
        # the broker closes it: a close frame, then the end of the stream
        data = b""
        while chunk := sock.recv(4096):
            data += chunk
        assert data[:1] == b"\x88" and b"logon required" in data
        sock.close()
        events = httpx.get(f"{proc.http_url}/api/events", headers=bearer(OPS), timeout=30)
        assert any(e["event"] == "logon_timeout" for e in events.json()["events"])
    finally:
        proc.stop()


def test_one_peer_failing_its_logons_spares_the_users_of_its_address(
    server: SpoolProcess,
) -> None:
    """A program with wrong credentials on 127.0.0.1 does not lock every user there out."""

    async def scenario() -> None:
        for i in range(12):
            c = Client(server.ws_url, f"bad-{i}", user_id="robot", password="wrong-0123456789")
            with pytest.raises(errors.AuthFailure):
                await c.connect()
            await c.close()
        # that pair is refused now, unchecked, with the seconds to wait
        c = Client(server.ws_url, "bad-late", user_id="robot", password="wrong-0123456789")
        with pytest.raises(errors.AuthFailure) as info:
            await c.connect()
        await c.close()
        assert info.value.retry_after is not None
        # the users on the same address are not
        async with Client(server.ws_url, "ops-ok", user_id="ops", password=OPS):
            pass
        async with Client(server.ws_url, "alice-ok", user_id="alice", password=ALICE):
            pass

    asyncio.run(scenario())
