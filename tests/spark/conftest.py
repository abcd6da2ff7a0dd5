"""Spark in local mode over journals a real broker wrote.

One SparkSession for the whole test run (``spark``, session-scoped; starting one costs
5-30 s here), with task retries on (``local[2,4]``: two threads, four attempts per task)
so the sink's retry test can fail a task once. ``journals`` is a broker's data directory
after ``publish_corpus`` went through it: several journals, the oldest compressed, the
next archived, the broker stopped so the files are final. ``corpus`` is the plain Python
scan of those files with the record codec: the oracle every test compares with.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from pyspark.sql import SparkSession

from spool.server.client import Client
from spool.server.pipeline.session import spark_session
from spool.server.txlog.cli import iter_file_records
from spool.server.txlog.format.record import Record
from spool.server.txlog.storage.files import parse_name
from tests.support.server import SpoolProcess, config_xml

INSTANCE = "spool-spark"
TOPICS = ("orders", "trades", "md.ibm", "audit/x")
PUBLISHERS = ("pub-a", "pub-b", "pub-c")
SYMS = ("IBM", "MSFT", "AAPL", "Ünïcode")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.spark)


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    session = spark_session("local[2,4]", "spool-tests", {"spark.sql.shuffle.partitions": "4"})
    yield session
    session.stop()


def body(i: int) -> bytes:
    """Message ``i`` of the corpus (JSON; a few are not UTF-8, a few not JSON)."""
    if i % 997 == 0:
        return b"\xff\xfe not utf-8 " + str(i).encode()
    if i % 499 == 0:
        return b"plain text " + str(i).encode()
    sym = SYMS[i % len(SYMS)]
    side = "B" if i % 2 else "S"
    return (
        f'{{"i":{i},"qty":{i % 97},"sym":"{sym}","px":{100 + (i % 50) / 10},'
        f'"side":"{side}","tags":["t{i % 5}"],"pad":"{"x" * (i % 300)}"}}'
    ).encode()


async def publish_corpus(url: str, count: int, start: int = 0) -> None:
    """``count`` messages over the topics, from three publishers, persisted."""
    clients = [Client(url, name) for name in PUBLISHERS]
    for c in clients:
        await c.connect()
    try:
        last = [0, 0, 0]
        for i in range(start, start + count):
            k = i % 3
            last[k] = clients[k].publish(
                TOPICS[i % len(TOPICS)], body(i), persisted=True,
                correlation_id=f"corr-{i}" if i % 101 == 0 else None,
            )  # fmt: skip
            if i % 500 == 0:
                await asyncio.sleep(0)
        for k, c in enumerate(clients):
            if last[k]:
                await c.wait_persisted(last[k], timeout=60)
            assert not c.failures, c.failures
    finally:
        for c in clients:
            await c.close()


def scan_files(journal_dir: Path, archive_dir: Path | None = None) -> list[Record]:
    """Every record of the instance's journal files, by the codec alone, in seq order."""
    out: list[Record] = []
    for d in [journal_dir, *([archive_dir] if archive_dir else [])]:
        for path in d.iterdir():
            parsed = parse_name(path.name, INSTANCE)
            if parsed is not None and parsed.kind == "journal":
                out.extend(rec for _off, rec in iter_file_records(path))
    out.sort(key=lambda r: r.seq)
    return out


@dataclass(frozen=True)
class Journals:
    data: Path
    journal: Path
    archive: Path
    records: list[Record]


def broker(workdir: Path) -> SpoolProcess:
    xml = config_xml(workdir / "data", name=INSTANCE, journal_size="1MB")
    return SpoolProcess(workdir, xml)


@pytest.fixture(scope="session")
def journals(tmp_path_factory: pytest.TempPathFactory) -> Journals:
    """16,000 messages written by a real broker; the first journal compressed, the first two
    archived (the archive action takes every older journal along)."""
    proc = broker(tmp_path_factory.mktemp("corpus")).start()
    try:
        asyncio.run(publish_corpus(proc.ws_url, 16_000))
        with httpx.Client(base_url=proc.http_url, timeout=30) as http:
            listed = http.get("/api/transaction_log").json()["journals"]
            ids = sorted(j["id"] for j in listed if j["state"] == "closed")
            assert len(ids) >= 3, listed
            http.post(f"/api/transaction_log/journals/{ids[0]}/compress").raise_for_status()
            http.post(f"/api/transaction_log/journals/{ids[1]}/archive").raise_for_status()
    finally:
        proc.stop()
    data = proc.workdir / "data"
    records = scan_files(data / "journal", data / "archive")
    assert [r.seq for r in records] == list(range(1, 16_001))
    return Journals(data, data / "journal", data / "archive", records)


@pytest.fixture(scope="session")
def python() -> str:
    return sys.executable


def env_without_java() -> dict[str, str]:
    """The environment with no java reachable (for the missing-Java error)."""
    env = dict(os.environ)
    env.pop("JAVA_HOME", None)
    env["PATH"] = "/nonexistent"
    return env
