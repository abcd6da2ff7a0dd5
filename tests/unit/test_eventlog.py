"""The event log (server/eventlog.py): stamps come from the injected clock, secrets are
redacted, and lines reach the file through the listener thread."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
import pytest

from spool.server.clock import VirtualClock
from spool.server.config import AdminConfig, Config
from spool.server.engine import Broker
from spool.server.eventlog import EventLog, text_line

START = 1_700_000_000.25
START_ISO = "2023-11-14T22:13:20.250000+00:00"
LATER_ISO = "2023-11-14T22:13:21.750000+00:00"  # START + 1.5 s


def test_events_are_stamped_with_the_injected_clock() -> None:
    clock = VirtualClock(START)
    log = EventLog(None, "t", console=False, clock=clock)
    try:
        log.emit("info", "instance", "first")
        asyncio.run(clock.advance(1.5))
        log.emit("warning", "session", "second")
        assert [(e["time"], e["event"]) for e in log.recent()] == [
            (START_ISO, "first"),
            (LATER_ISO, "second"),
        ]
    finally:
        log.close()


def test_the_file_gets_the_same_stamped_and_redacted_lines(tmp_path: Path) -> None:
    log = EventLog(tmp_path, "inst", console=False, clock=VirtualClock(START))
    log.emit("info", "admin", "login", user="ops", password="hunter2", api_token="t0k")
    log.close()  # flushes the listener thread's queue
    lines = (tmp_path / "inst.events.log").read_text().splitlines()
    assert [orjson.loads(line) for line in lines] == [
        {
            "time": START_ISO,
            "level": "info",
            "category": "admin",
            "event": "login",
            "user": "ops",
            "password": "***",
            "api_token": "***",
        }
    ]


def test_the_broker_stamps_its_events_with_its_own_clock(tmp_path: Path) -> None:
    config = Config(
        name="t",
        group="t",
        data_directory=tmp_path,
        admin=AdminConfig(stats_file=tmp_path / "stats.db"),
        transports=(),
        transaction_log=None,
    )
    broker = Broker(config, clock=VirtualClock(START), console_log=False)
    try:
        broker.events.emit("info", "instance", "probe")
        assert broker.events.recent()[-1]["time"] == START_ISO
    finally:
        broker.events.close()


def test_a_text_line_reads_as_a_sentence_and_quotes_what_is_not_a_word() -> None:
    entry = {
        "time": "2026-11-29T22:15:01.123456+00:00", "level": "warning",
        "category": "replication", "event": "destination_disconnected",
        "destination": "b", "detail": "nothing heard for 6.0 s", "seqs": [1, 2],
        "ok": True, "empty": "", "eq": "a=b",
    }  # fmt: skip
    assert text_line(entry) == (
        "2026-11-29 22:15:01.123 WARNING replication destination_disconnected "
        'destination=b detail="nothing heard for 6.0 s" seqs=[1,2] ok=true empty="" eq="a=b"'
    )


def test_the_console_gets_text_when_asked_and_the_file_keeps_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = EventLog(tmp_path, "t", console=True, console_format="text", clock=VirtualClock(START))
    try:
        log.emit("info", "instance", "started", port=9007, password="hunter2")
    finally:
        log.close()
    assert capsys.readouterr().err == (
        "2023-11-14 22:13:20.250 INFO    instance started port=9007 password=***\n"
    )
    (line,) = (tmp_path / "t.events.log").read_bytes().splitlines()
    assert orjson.loads(line)["password"] == "***"
