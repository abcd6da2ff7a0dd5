"""``spool journal dump / verify / find``: output, exit codes, and never writing."""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path

import pytest

from spool.server.txlog import TransactionLog
from spool.server.txlog.cli import parse_position, register
from tests.unit.txlog.helpers import INSTANCE, config, journal_files, run

T0 = 1_700_000_000_000_000  # 20231114T221320Z


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="spool")
    sub = p.add_subparsers(dest="command", required=True)
    register(sub)
    return p


def spool(*argv: str) -> int:
    args = parser().parse_args(["journal", *argv])
    code: int = args.func(args)
    return code


@pytest.fixture
def logdir(tmp_path: Path) -> Path:
    """1500 records, 1 ms apart, topics alternating a/b, publisher 7 then 8; one compressed."""

    async def body() -> None:
        log = TransactionLog(config(tmp_path), INSTANCE, block_bytes=512)
        await log.open()
        for i in range(1500):
            ph = 7 if i < 1000 else 8
            log.append(topic="ab"[i % 2], message_type="json", pub_hash=ph,
                       pub_seq=i + 1 if ph == 7 else i - 999, body=b'{"i":%d}' % i,
                       timestamp_us=T0 + i * 1000)  # fmt: skip
        await log.wait_durable(log.last_seq)
        await log.compress(log.journals()[0].id)
        await log.close()

    run(body)
    return tmp_path / "journal"


def snapshot(directory: Path) -> dict[str, str]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in directory.rglob("*")
        if p.is_file()
    }


def test_parse_position() -> None:
    assert parse_position("7|12|") == (7, 12)
    assert parse_position("7|12") == (7, 12)
    assert parse_position("20231114T221320Z") == T0
    assert parse_position("20231114T221320.000500") == T0 + 500
    for bad in ("7|x|", "1|2|3|", "yesterday"):
        with pytest.raises(ValueError):
            parse_position(bad)


def test_dump_prints_records_with_filters(logdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files = journal_files(logdir.parent)
    assert files[0].name.endswith(".journal.zst")
    assert spool("dump", str(files[0]), "--limit", "2") == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2
    assert lines[0].split()[:3] == ["1", "20231114T221320.000000Z", "7|1|"]
    assert lines[0].endswith('a [7B] {"i":0}')
    assert (
        spool("dump", str(files[0]), "--json", "--from", "7|900|", "--topic", "b", "--limit", "3")
        == 0
    )
    rows = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [r["seq"] for r in rows] == [900, 902, 904]
    assert (
        rows[0]["bookmark"] == "7|900|"
        and rows[0]["body"] == '{"i":899}'
        and rows[0]["kind"] == "publish"
    )
    t = "20231114T221321.200000Z"  # the record appended 1200 ms after the first
    assert spool("dump", str(files[-1]), "--json", "--from", t, "--limit", "1") == 0
    assert json.loads(capsys.readouterr().out)["seq"] == 1201


def test_dump_stops_at_damage_with_exit_1(logdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    active = journal_files(logdir.parent)[-1]
    data = bytearray(active.read_bytes())
    data[2000] ^= 0xFF
    active.write_bytes(bytes(data))
    assert spool("dump", str(active), "--json") == 1
    captured = capsys.readouterr()
    rows = [json.loads(x) for x in captured.out.splitlines()]
    assert rows and rows[-1]["offset"] < 2000
    assert "corrupt record" in captured.err


def test_verify_clean_and_damaged_without_touching_files(
    logdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert spool("verify", str(logdir)) == 0
    out = capsys.readouterr().out
    assert out.strip().endswith("seqs 1..1500: clean")
    active = journal_files(logdir.parent)[-1]
    data = bytearray(active.read_bytes())
    data[2000] ^= 0xFF
    active.write_bytes(bytes(data))
    before = snapshot(logdir.parent)
    assert spool("verify", str(logdir), "--json") == 1
    rows = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    report = rows[-1]["report"]
    # the intact records after the damage are kept: the damaged one would be fenced
    assert report["truncations"] == []
    (fence,) = report["fenced"]
    assert fence["path"] == str(active) and fence["reason"] == "crc mismatch"
    assert fence["first_seq"] == fence["last_seq"] and fence["saved"] is None
    (damaged,) = [row["damaged"] for row in rows if "damaged" in row]
    assert damaged["first_seq"] == damaged["last_seq"] == fence["first_seq"]
    assert damaged["found_by"] == "verify" and damaged["path"] == str(active)
    assert snapshot(logdir.parent) == before  # verify only reads


def test_verify_lists_every_damaged_range_with_the_records_it_held(
    logdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two flipped bytes in one journal: two ranges, each named by its seqs; the intact
    records between and after them are counted as such."""
    first = next(p for p in journal_files(logdir.parent) if p.suffix == ".journal")
    data = bytearray(first.read_bytes())
    data[3000] ^= 0xFF
    data[9000] ^= 0xFF
    first.write_bytes(bytes(data))
    assert spool("verify", str(logdir)) == 1
    lines = [x for x in capsys.readouterr().out.splitlines() if x.startswith("DAMAGED")]
    assert len(lines) == 2
    assert all("crc mismatch" in x and "not readable" in x for x in lines)
    spans = [x.split("seqs ")[1].split(" ")[0] for x in lines]
    a, b = (tuple(map(int, span.split(".."))) for span in spans)
    assert a[0] == a[1] < b[0] == b[1]


def test_find_by_bookmark_and_time(logdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert spool("find", "8|250|", "--dir", str(logdir), "--json") == 0
    found = json.loads(capsys.readouterr().out)
    assert found["found"] and found["seq"] == 1250 and found["bookmark"] == "8|250|"
    assert spool("find", "7|3|", "--dir", str(logdir)) == 0  # in the compressed journal
    assert capsys.readouterr().out.startswith("seq 3  7|3|")
    assert spool("find", "20231114T221320.500000Z", "--dir", str(logdir), "--json") == 0
    assert json.loads(capsys.readouterr().out)["seq"] == 501
    assert spool("find", "20200101T000000Z", "--dir", str(logdir), "--json") == 0
    assert json.loads(capsys.readouterr().out)["seq"] == 1
    assert spool("find", "7|1001|", "--dir", str(logdir)) == 1
    assert "not found" in capsys.readouterr().out
    assert spool("find", "20300101T000000Z", "--dir", str(logdir)) == 1


def test_instance_must_be_named_when_several_share_a_directory(
    logdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = journal_files(logdir.parent)[-1]
    (logdir / first.name.replace(INSTANCE, "spool-b")).write_bytes(first.read_bytes())
    assert spool("find", "7|3|", "--dir", str(logdir)) == 2
    assert "use --name" in capsys.readouterr().err
    assert spool("find", "7|3|", "--dir", str(logdir), "--name", INSTANCE) == 0
    assert spool("verify", str(logdir), "--name", "nobody") == 0  # an empty log is clean


def _straddling_log(tmp: Path, small: int, gap: int) -> Path:
    """One record that ends ``gap`` bytes before 1 MiB, then ``small`` records: the next
    record starts where dump's read window has fewer than a length field's bytes left."""

    async def body() -> None:
        log = TransactionLog(config(tmp, journal_size=4 << 20), INSTANCE)
        await log.open()
        overhead = 56 + 1 + 4  # fixed header and CRC, topic "t", message type "json"
        log.append(topic="t", message_type="json", pub_hash=7, pub_seq=1,
                   body=b"x" * ((1 << 20) - gap - overhead))  # fmt: skip
        for i in range(small):
            log.append(topic="t", message_type="json", pub_hash=7, pub_seq=i + 2,
                       body=b'{"i":%d}' % i)  # fmt: skip
        await log.wait_durable(log.last_seq)
        await log.close()

    run(body)
    return journal_files(tmp)[0]


@pytest.mark.parametrize("gap", [1, 2, 3])
def test_dump_reads_records_across_its_read_window(
    tmp_path: Path, gap: int, capsys: pytest.CaptureFixture[str]
) -> None:
    journal = _straddling_log(tmp_path, 500, gap)
    assert spool("verify", str(journal.parent), "--json") == 0
    verified = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert verified[0]["records"] == 501
    assert spool("dump", str(journal), "--json") == 0
    rows = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [r["seq"] for r in rows] == list(range(1, 502))
    assert rows[-1]["body"] == '{"i":499}'
