"""The soak's short variant in ``make test``: about a minute of faults loses nothing.

The same harness as ``make soak`` (see :mod:`tests.soak`), shorter: at least one SIGKILL,
one SIGSTOP past the heartbeat and (as root) one full disk, with every oracle check held.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.soak.harness import SoakSettings, run_soak

pytestmark = [pytest.mark.soak, pytest.mark.faults, pytest.mark.slow]

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "soak"


def test_a_minute_of_kills_freezes_and_a_full_disk_loses_and_repeats_nothing(
    tmp_path: Path,
) -> None:
    result = run_soak(tmp_path, SoakSettings(minutes=1.0, fault_gap=5.0))
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "summary-short.json").write_text(json.dumps(result.to_json(), indent=2))
    table = result.table()
    print(table)
    assert result.faults.injected["kill"] >= 1, table
    assert result.faults.injected["stop"] >= 1, table
    if os.geteuid() == 0:
        assert result.faults.injected["disk"] >= 1, table
        assert result.refused > 0, table  # the disk did fill: publishes were refused
    else:
        assert "root" in result.faults.skipped["disk"]
    assert result.verdict.duplicates == 0 and result.verdict.lost == 0, table
    assert result.ok, table
    assert result.stored == result.acked == result.published > 0
    # the slow reader was spilled to the log at least once and caught up seamlessly
    assert result.broker_counters.get("spills", 0) >= 1, table
