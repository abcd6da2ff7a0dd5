"""Which implementation of the hot loops runs is visible, and both serve the same
protocol: a real broker with the compiled extension and one with SPOOL_NO_EXTENSIONS=1,
each reporting itself in ``spool --version``, ``/api/instance`` and (only the pure-Python
one) the start-up notice, and each publishing and replaying the same messages."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from spool.server.client import Client
from tests.support.server import ROOT, SpoolProcess

NOTICE = "spool: hot loops run as"


def _version(env: dict[str, str]) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "spool.server.cli", "--version"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        check=True,
        timeout=60,
    )
    return done.stdout.strip()


def test_version_says_which_implementation_runs() -> None:
    assert _version({"SPOOL_NO_EXTENSIONS": ""}).endswith("(hot loops: compiled extension)")
    assert _version({"SPOOL_NO_EXTENSIONS": "1"}).endswith(
        "(hot loops: pure Python (SPOOL_NO_EXTENSIONS=1 is set))"
    )


async def _round_trip(url: str) -> list[tuple[str, bytes, str | None]]:
    async with Client(url, "twin-pub") as pub:
        pub.publish_many("twins", [b'{"i":%d}' % i for i in range(500)], persisted=True)
        pub.publish("twins", {"i": "last"}, persisted=True)
        await pub.wait_persisted(501, timeout=30)
    got: list[tuple[str, bytes, str | None]] = []
    async with Client(url, "twin-sub") as sub_client:
        sub = await sub_client.subscribe("twins", bookmark="0")
        async for batch in sub.batches():
            got += [(m.topic, m.data, m.bookmark) for m in batch]
            if len(got) >= 501:
                break
    return got


@pytest.mark.parametrize("pure", [False, True], ids=["compiled", "python"])
def test_a_broker_reports_its_implementation_and_serves_the_same(
    tmp_path: Path, pure: bool
) -> None:
    server = SpoolProcess(tmp_path / "b", env={"SPOOL_NO_EXTENSIONS": "1" if pure else ""})
    server.start()
    try:
        info = httpx.get(server.http_url + "/api/instance", timeout=30).json()
        got = asyncio.run(_round_trip(server.ws_url))
    finally:
        server.stop()
    ext = info["extensions"]
    if pure:
        assert ext["implementation"] == "python"
        assert ext["reason"] == "SPOOL_NO_EXTENSIONS=1 is set"
        assert set(ext["modules"].values()) == {"disabled by SPOOL_NO_EXTENSIONS=1"}
        assert server.log().count(NOTICE) == 1
    else:
        assert ext == {
            "implementation": "compiled",
            "reason": None,
            "modules": dict.fromkeys(ext["modules"], "compiled"),
        }
        assert NOTICE not in server.log()
    assert [d for _, d, _ in got[:2]] == [b'{"i":0}', b'{"i":1}']
    assert got[-1][1] == b'{"i":"last"}'
    assert len(got) == 501 and all(t == "twins" and bm for t, _, bm in got)


def test_cli_publishes_stdin_in_batches_and_subscribes_in_batches(tmp_path: Path) -> None:
    server = SpoolProcess(tmp_path / "cli")
    server.start()
    lines = [b'{"n":%d}' % i for i in range(3000)]
    try:
        pub = subprocess.run(
            [sys.executable, "-m", "spool.server.cli", "publish", server.ws_url, "cli/t", "-"],
            cwd=ROOT,
            input=b"\n".join(lines) + b"\r\n\n",
            capture_output=True,
            timeout=120,
            check=False,
        )
        assert pub.returncode == 0, pub.stderr
        assert b"published 3000 messages to cli/t" in pub.stdout
        sub = subprocess.run(
            [sys.executable, "-m", "spool.server.cli", "subscribe", server.ws_url, "cli/t",
             "--bookmark", "0", "--count", "2999"],
            cwd=ROOT,
            capture_output=True,
            timeout=120,
            check=False,
        )  # fmt: skip
    finally:
        server.stop()
    assert sub.returncode == 0, sub.stderr
    assert sub.stdout.split(b"\n") == [*lines[:2999], b""]
