"""``spool sow URL TOPIC`` and ``spool sow-delete`` as processes against a real broker:
query shapes (filter, orderby, top-n, historical bookmark), output forms, deletes by
filter and by keys, and the exit codes of refusals and usage errors."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from spool.server.client import Client
from tests.support.server import SpoolProcess, config_xml, sow_topic

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SpoolProcess]:
    workdir = tmp_path_factory.mktemp("sow-cli")
    sow = sow_topic("orders", "/id") + sow_topic("scratch", "/id", durability="transient")
    proc = SpoolProcess(workdir, config_xml(workdir / "data", journal_size="4MB", sow=sow))
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


def spool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "spool.server.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def publish(server: SpoolProcess, topic: str, docs: list[dict[str, object]]) -> str:
    """Publish, wait until persisted; returns the bookmark of the last one."""

    async def body() -> str:
        async with Client(server.ws_url, f"cli-feed-{topic}") as client:
            seq = 0
            for doc in docs:
                seq = client.publish(topic, doc, persisted=True)
            await client.wait_persisted(seq)
            result = await client.sow(topic, filter=f"/id = {docs[-1]['id']}")
            bookmark = result.records[0].bookmark
            assert bookmark
            return bookmark

    return asyncio.run(body())


def test_a_query_prints_the_records_shaped_as_asked(server: SpoolProcess) -> None:
    url = server.ws_url
    publish(server, "orders", [{"id": i, "px": i % 4, "name": f"n{i:02d}"} for i in range(12)])
    everything = spool("sow", url, "orders")
    assert everything.returncode == 0, everything.stderr
    docs = [orjson.loads(line) for line in everything.stdout.splitlines()]
    assert sorted(d["id"] for d in docs) == list(range(12))

    shaped = spool(
        "sow", url, "orders", "--filter", "/px >= 2", "--orderby", "/px DESC, /name",
        "--top-n", "3", "-v",
    )  # fmt: skip
    assert shaped.returncode == 0, shaped.stderr
    assert [orjson.loads(x)["name"] for x in shaped.stdout.splitlines()] == ["n03", "n07", "n11"]
    assert "3 records returned of 6 matching" in shaped.stderr

    keyed = spool("sow", url, "orders", "--filter", "/id = 5", "--show-key")
    assert keyed.stdout.split("\t")[0] == "5"
    as_json = spool("sow", url, "orders", "--filter", "/id = 5", "--json")
    (line,) = as_json.stdout.splitlines()
    record = orjson.loads(line)
    assert record["topic"] == "orders" and record["key"] == "5" and record["bookmark"]
    assert orjson.loads(record["data"])["name"] == "n05"
    # the long form is the same command
    assert spool("sow", "query", url, "orders").stdout == everything.stdout


def test_a_historical_query_shows_the_state_as_of_a_bookmark(server: SpoolProcess) -> None:
    url = server.ws_url
    mark = publish(server, "orders", [{"id": 100, "v": "old"}])
    publish(server, "orders", [{"id": 100, "v": "new"}, {"id": 101, "v": "later"}])
    then = spool("sow", url, "orders", "--filter", "/id >= 100", "--bookmark", mark)
    assert then.returncode == 0, then.stderr
    assert [orjson.loads(x) for x in then.stdout.splitlines()] == [{"id": 100, "v": "old"}]
    now = spool("sow", url, "orders", "--filter", "/id >= 100", "--orderby", "/id")
    assert [orjson.loads(x)["v"] for x in now.stdout.splitlines()] == ["new", "later"]


def test_sow_delete_by_filter_and_by_keys(server: SpoolProcess) -> None:
    url = server.ws_url
    publish(server, "scratch", [{"id": i, "px": i} for i in range(10)])
    by_filter = spool("sow-delete", url, "scratch", "--filter", "/px >= 7")
    assert by_filter.returncode == 0, by_filter.stderr
    assert by_filter.stdout == "3 records deleted from scratch\n"
    by_keys = spool("sow-delete", url, "scratch", "--keys", "1,2,99", "--json")
    assert by_keys.returncode == 0, by_keys.stderr
    assert orjson.loads(by_keys.stdout) == {"topic": "scratch", "records_deleted": 2}
    left = spool("sow", url, "scratch", "--orderby", "/id")
    assert [orjson.loads(x)["id"] for x in left.stdout.splitlines()] == [0, 3, 4, 5, 6]


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (("sow", "{url}", "not-a-sow-topic"), 1, "invalid topic"),
        (("sow", "{url}", "orders", "--filter", "/px >>> 1"), 1, "bad filter"),
        (("sow", "{url}", "orders", "--orderby", "px"), 1, "refused"),
        (("sow", "{url}", "orders", "--top-n", "0"), 2, "positive integer"),
        (("sow", "{url}", "orders", "--cafile", "ca.pem"), 2, "need a wss:// URL"),
        (("sow-delete", "{url}", "orders"), 2, "one of the arguments --filter --keys"),
        (("sow-delete", "{url}", "orders", "--filter", "/a", "--keys", "1"), 2, "not allowed"),
        (("sow-delete", "{url}", "orders", "--keys", ","), 2, "at least one key"),
        (("sow", "ws://127.0.0.1:9/amps/json", "orders"), 3, "cannot connect"),
    ],
)
def test_refusals_and_usage_errors_have_their_exit_codes(
    server: SpoolProcess, args: tuple[str, ...], code: int, message: str
) -> None:
    result = spool(*(a.replace("{url}", server.ws_url) for a in args))
    assert result.returncode == code, (result.stdout, result.stderr)
    assert message in result.stderr
