"""Host metrics: shape of a reading and directory sizes against an oracle."""

from __future__ import annotations

import random
from pathlib import Path

from spool.server.stats.host import HostProbe, directory_bytes, host_metric_values


def test_directory_bytes_sums_files_recursively(tmp_path: Path) -> None:
    rng = random.Random(3)
    total = 0
    for i in range(20):
        sub = tmp_path / f"d{i % 3}" / ("x" if i % 2 else "")
        sub.mkdir(parents=True, exist_ok=True)
        size = rng.randrange(0, 5000)
        (sub / f"f{i}").write_bytes(b"\0" * size)
        total += size
    assert directory_bytes(tmp_path) == total
    assert directory_bytes(tmp_path / "missing") == 0


def test_reading_and_flattened_values(tmp_path: Path) -> None:
    journal = tmp_path / "journal"
    journal.mkdir()
    (journal / "a.journal").write_bytes(b"x" * 1234)
    probe = HostProbe({"journal": journal, "archive": tmp_path / "not-yet"})
    first = probe.sample()
    assert first["network"]["bytes_sent_rate"] is None  # no baseline yet
    second = probe.sample()
    assert second["network"]["bytes_sent_rate"] is not None
    assert 0.0 <= second["cpu"]["percent"] <= 100.0
    assert second["memory"]["total"] > 0
    assert second["disks"]["journal"]["dir_bytes"] == 1234
    assert second["disks"]["archive"]["dir_bytes"] == 0
    assert second["disks"]["archive"]["fs_total"] > 0  # measured at the nearest parent
    assert second["process"]["rss"] > 0
    values = host_metric_values(second)
    assert values["host/disk/journal/dir_bytes"] == 1234.0
    assert "host/net_bytes_recv_rate" in values
    assert all(isinstance(v, float) for v in values.values())
