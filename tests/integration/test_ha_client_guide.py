"""docs/ha-client.md: its example runs against a real broker (twice: the second run resumes
from the stores), and the SOW recovery point adapter keeps resume points in the broker."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from pathlib import Path

from spool.server.client import (
    Client,
    DefaultServerChooser,
    FixedDelayStrategy,
    HAClient,
    MemoryBookmarkStore,
    SowRecoveryPointAdapter,
)
from tests.conftest import ServerFactory
from tests.support.server import CHECKOUT_PATH, ROOT, SpoolProcess, sow_topic

GUIDE = ROOT / "docs" / "ha-client.md"


def example() -> str:
    text = GUIDE.read_text()
    section = text[text.index("## Example") :]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match is not None
    return match.group(1)


def test_the_guides_example_runs_and_resumes(spool_server: SpoolProcess, tmp_path: Path) -> None:
    script = tmp_path / "example.py"
    script.write_text(example())
    env = {**os.environ, "SPOOL_URL": spool_server.ws_url, "PYTHONPATH": CHECKOUT_PATH}
    outputs = []
    for _ in range(2):
        done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=120)  # fmt: skip
        assert done.returncode == 0, done.stderr
        outputs.append(done.stdout.strip())
    assert outputs == [
        "read 100 messages from publisher sequence 1",
        "read 100 messages from publisher sequence 101",
    ]
    assert (tmp_path / "feed.store").exists() and (tmp_path / "reader.store").exists()


def test_sow_recovery_point_adapter_resumes_a_new_client(
    spool_server_factory: ServerFactory,
) -> None:
    proc = spool_server_factory(sow=sow_topic("spool.recovery"))
    url = proc.ws_url

    def reader() -> HAClient:
        adapter = SowRecoveryPointAdapter(url, "sow-reader")
        return HAClient("sow-reader", bookmark_store=MemoryBookmarkStore(adapter=adapter),
                        chooser=DefaultServerChooser([url]),
                        delay=FixedDelayStrategy(0.05))  # fmt: skip

    async def run() -> tuple[list[int], list[dict[str, str]]]:
        async with Client(url, "sow-feed") as feed:
            last = feed.publish_many("orders", [b'{"n":%d}' % n for n in range(10)], persisted=True)
            await feed.wait_persisted(last)
        first = reader()
        async with first:
            sub = await first.subscribe("orders", bookmark="0", sub_id="r1")
            for _ in range(6):
                (await sub.get(10)).discard()
            await first.bookmark_store.sync()  # the adapter stored the point
        second = reader()  # a fresh memory store: only the SOW topic knows the point
        async with second:
            sub = await second.subscribe("orders", bookmark="0", sub_id="r1")
            got = [(await sub.get(10)).json()["n"] for _ in range(4)]
        async with Client(url, "inspector") as c:
            records = (await c.sow("spool.recovery")).records
        return got, [r.json() for r in records]

    got, records = asyncio.run(run())
    assert got == [6, 7, 8, 9]
    assert len(records) == 1
    assert records[0]["client"] == "sow-reader" and records[0]["sub_id"] == "r1"
    assert records[0]["bookmark"].split(",")[0].endswith("|6|")
