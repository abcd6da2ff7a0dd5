"""``spool sow verify`` and ``spool sow rebuild`` on files an engine wrote."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
import pytest

from spool.server.cli import main
from spool.server.sow.filestore import read_sow_file
from spool.server.txlog import TransactionLog
from tests.support.engine import EngineHarness
from tests.support.server import config_xml, sow_topic
from tests.unit.sow.test_engine_sow import pub
from tests.unit.txlog.helpers import config as log_config

SOW = (
    sow_topic("orders", "/id") + sow_topic("^md\\.", "/s") + sow_topic("t", durability="transient")
)


def make_instance(tmp_path: Path) -> Path:
    """An instance that ran and stopped; returns its configuration file."""
    xml = config_xml(tmp_path / "data", sow=SOW, journal_size="1MB",
                     txlog_extra="<PreallocatedJournalFiles>1</PreallocatedJournalFiles>")  # fmt: skip
    path = tmp_path / "spool.xml"
    path.write_text(xml)

    async def body() -> None:
        async with EngineHarness(tmp_path, xml=xml) as h:
            p = await h.logon("pub")
            p.send(*[pub("orders", {"id": i % 4, "v": i}) for i in range(10)])
            p.send(pub("md.a", {"s": "X"}), pub("md.b", {"s": "Y"}), pub("t", {"x": 1}))
            p.send(({"c": "sow_delete", "t": "orders", "k": "1"}, b""))
            await h.commit()
            await h.broker.sow.flush()

    asyncio.run(body())
    return path


def test_verify_reports_clean_and_damaged_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make_instance(tmp_path)
    assert main(["sow", "verify", str(tmp_path / "data"), "--json"]) == 0
    lines = [orjson.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert sorted((d["topic"], d["records"], d["status"]) for d in lines) == [
        ("md.a", 1, "clean"), ("md.b", 1, "clean"), ("orders", 3, "clean"),
    ]  # fmt: skip
    orders = next(Path(d["file"]) for d in lines if d["topic"] == "orders")
    data = bytearray(orders.read_bytes())
    data[-3] ^= 0x55
    orders.write_bytes(bytes(data))
    assert main(["sow", "verify", str(tmp_path / "data" / "sow")]) == 1
    out = capsys.readouterr().out
    assert "damaged at offset" in out and "crc mismatch" in out
    assert main(["sow", "verify", str(tmp_path / "nothing-here")]) == 2


def test_rebuild_writes_the_files_the_log_gives(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = make_instance(tmp_path)
    files = {read_sow_file(p).header.topic: p for p in (tmp_path / "data" / "sow").glob("*.sow")}  # type: ignore[union-attr]
    before = {t: {k: c.body for k, c in read_sow_file(p).records.items()} for t, p in files.items()}
    for path in files.values():
        path.unlink()
    assert main(["sow", "rebuild", "--config", str(config), "--json"]) == 0
    reports = [orjson.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert sorted(r["topic"] for r in reports) == ["md.a", "md.b", "orders"]  # not the transient
    after = {
        read_sow_file(Path(r["file"])).header.topic: {  # type: ignore[union-attr]
            k: c.body for k, c in read_sow_file(Path(r["file"])).records.items()
        }
        for r in reports
    }
    assert after == before
    # one topic only
    assert main(["sow", "rebuild", "--config", str(config), "--topic", "orders"]) == 0
    assert "orders" in capsys.readouterr().out


def orders_log(tmp_path: Path, bodies: list[bytes]) -> Path:
    """A log of ``bodies`` on the persistent SOW topic ``orders`` (key ``/id``), written
    by the log alone; returns the instance's configuration file."""
    data = tmp_path / "data"
    path = tmp_path / "spool.xml"
    path.write_text(config_xml(data, sow=sow_topic("orders", "/id"), journal_size="4MB"))

    async def body() -> None:
        log = TransactionLog(log_config(data, journal_size=4 << 20), "spool-test")
        await log.open()
        for i, payload in enumerate(bodies, 1):
            log.append(topic="orders", message_type="json", pub_hash=7, pub_seq=i, body=payload)
        await log.wait_durable(log.last_seq)
        await log.close()

    asyncio.run(body())
    return path


def rebuild(config: Path, capsys: pytest.CaptureFixture[str]) -> tuple[dict[str, object], str]:
    """``spool sow rebuild`` of ``orders``: its report and its error output."""
    assert main(["sow", "rebuild", "--config", str(config), "--json"]) == 0
    captured = capsys.readouterr()
    (report,) = [orjson.loads(line) for line in captured.out.splitlines()]
    return report, captured.err


def test_rebuild_reads_records_across_the_read_window(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A record that ends 2 bytes before 1 MiB: every record after it is still applied."""
    head = b'{"id":0,"pad":"'
    overhead = 56 + len("orders") + len("json") + len(head) + 2
    first = head + b"x" * ((1 << 20) - 2 - overhead) + b'"}'
    config = orders_log(tmp_path, [first] + [b'{"id":%d}' % i for i in range(1, 300)])
    report, _ = rebuild(config, capsys)
    assert (report["records"], report["file_seq"]) == (300, 300)


def test_rebuild_applies_every_record_before_damage(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The log ends at a torn record: the records before it are all in the rebuilt file."""
    config = orders_log(tmp_path, [b'{"id":%d}' % i for i in range(1, 11)])
    (journal,) = (tmp_path / "data" / "journal").glob("*.journal")
    whole = journal.read_bytes().rstrip(b"\0")
    journal.write_bytes(whole[:-3])  # the last record torn
    report, err = rebuild(config, capsys)
    assert (report["records"], report["file_seq"]) == (9, 9)
    assert "torn record" in err
