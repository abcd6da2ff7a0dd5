"""The websocket logon is not a password oracle: on a real server, 100 wrong-password
logons from one address are answered, the ones after the configured failures refused
without an scrypt derivation (counted on /metrics, and measured as server CPU time and
answer latency), and a correct logon from another address still succeeds at once.

"Another address": Linux routes all of 127.0.0.0/8 to the loopback interface, so the
client binds 127.0.0.2 as its source address; the server sees a different peer."""

from __future__ import annotations

import asyncio
import hashlib
import re
import statistics
import time
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
from websockets.asyncio.client import connect

from spool.server.passwords import SCRYPT_N, SCRYPT_P, SCRYPT_R, hash_password
from spool.server.protocol.frame import encode_message, parse_frame
from tests.support.server import SpoolProcess, config_xml

PASSWORD = "the right password"
TOKEN = "throttle-test-token-0123456"
USERS = (
    f"<User><Name>ops</Name><PasswordHash>{hash_password(PASSWORD)}</PasswordHash>"
    f"<Token>{TOKEN}</Token><Admin>true</Admin></User>"
)
PER_ADDRESS = 10


async def logon(
    url: str, name: str, password: str, source: str = "127.0.0.1"
) -> tuple[dict[str, Any], float]:
    """One connection, one logon; the ack and the seconds from sending it to the answer."""
    async with connect(url, compression=None, local_addr=(source, 0), open_timeout=10) as ws:
        started = time.perf_counter()
        await ws.send(
            encode_message(
                {
                    "c": "logon",
                    "cid": "l",
                    "a": "processed",
                    "client_name": name,
                    "user_id": "ops",
                    "pw": password,
                }
            )
        )
        frame = await asyncio.wait_for(ws.recv(), 30)
        took = time.perf_counter() - started
    data = frame if isinstance(frame, bytes) else frame.encode()
    return parse_frame(data).messages[0].header, took


def scrypt_seconds() -> float:
    """What one password check costs on this machine now (median of three)."""
    samples = []
    for _ in range(3):
        started = time.process_time()
        hashlib.scrypt(b"x", salt=b"saltsalt", n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P, maxmem=64 << 20)
        samples.append(time.process_time() - started)
    return statistics.median(samples)


def password_checks(proc: SpoolProcess) -> float:
    text = httpx.get(f"{proc.http_url}/metrics", headers={"Authorization": f"Bearer {TOKEN}"}).text
    match = re.search(r"^spool_password_checks_total ([0-9.e+]+)$", text, re.M)
    assert match, text[:2000]
    return float(match.group(1))


@pytest.mark.slow
def test_100_wrong_logons_from_one_address(tmp_path: Path) -> None:
    xml = config_xml(
        tmp_path / "data",
        users=USERS,
        tuning=f"<LogonFailuresPerAddress>{PER_ADDRESS}</LogonFailuresPerAddress>",
    )
    proc = SpoolProcess(tmp_path, xml).start()
    try:
        server = psutil.Process(proc.pid)

        async def main() -> dict[str, Any]:
            warm, _ = await logon(proc.ws_url, "warm-up", PASSWORD, source="127.0.0.3")
            assert warm["status"] == "success"
            checks_before = password_checks(proc)
            cpu = server.cpu_times()
            cpu_before = cpu.user + cpu.system
            answers = [await logon(proc.ws_url, f"guess-{i}", f"guess {i}") for i in range(100)]
            cpu = server.cpu_times()
            cpu_spent = cpu.user + cpu.system - cpu_before
            checks = password_checks(proc) - checks_before
            other, other_took = await logon(proc.ws_url, "rightful", PASSWORD, source="127.0.0.2")
            return {
                "answers": answers,
                "cpu": cpu_spent,
                "checks": checks,
                "other": other,
                "other_took": other_took,
            }

        got = asyncio.run(main())
    finally:
        proc.stop()
    answers: list[tuple[dict[str, Any], float]] = got["answers"]
    assert all(h["status"] == "failure" and h["reason"] == "auth failure" for h, _ in answers)
    checked = [t for h, t in answers if "retry_after" not in h]
    refused = [t for h, t in answers if "retry_after" in h]
    assert len(checked) == PER_ADDRESS and len(refused) == 100 - PER_ADDRESS
    assert all(0 < h["retry_after"] <= 300 for h, _ in answers[PER_ADDRESS:])
    # exactly the admitted ones ran scrypt (the counter counts derivations)
    assert got["checks"] == PER_ADDRESS
    # ... which is what the CPU says: the 90 refusals cost a fraction of one check each
    one = scrypt_seconds()
    assert got["cpu"] < PER_ADDRESS * one + 0.5 * len(refused) * one, (got["cpu"], one)
    # ... and the answers: a refusal does not wait for a derivation
    assert statistics.median(refused) < statistics.median(checked)
    assert statistics.median(refused) < one
    # the rightful user, from another address, is not locked out
    assert got["other"]["status"] == "success"
    assert got["other_took"] < max(2.0, 20 * one)
    print(
        f"\n100 wrong logons: server CPU {got['cpu']:.3f} s (one scrypt here {one * 1000:.1f} ms);"
        f" answer median checked {statistics.median(checked) * 1000:.1f} ms,"
        f" refused {statistics.median(refused) * 1000:.2f} ms (p90"
        f" {statistics.quantiles(refused, n=10)[-1] * 1000:.2f} ms);"
        f" other address {got['other_took'] * 1000:.1f} ms"
    )
