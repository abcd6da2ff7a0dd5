"""The bootstrap's marker file and progress (server/replication/bootstrap.py), alone."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spool.server.replication.bootstrap import BootstrapProgress, Marker, marker_path
from spool.server.replication.errors import BootstrapFailed
from spool.server.replication.state import save


@given(
    st.builds(
        Marker,
        copied_upto=st.integers(0, 2**62),
        sow_done=st.booleans(),
        source=st.text(max_size=10),
        records=st.integers(0, 2**62),
        log_id=st.text(max_size=10),
    )
)
def test_the_marker_round_trips(marker: Marker) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = marker_path(Path(tmp), "b")
        save(path, marker.encode())
        assert Marker.load(path) == marker


def test_no_marker_and_a_damaged_one(tmp_path: Path) -> None:
    path = marker_path(tmp_path, "b")
    assert Marker.load(path) is None
    save(path, b"{not json")
    with pytest.raises(BootstrapFailed, match="cannot be read"):
        Marker.load(path)
    save(path, b'{"copied_upto": "x", "sow_done": false, "records": 0}')
    with pytest.raises(BootstrapFailed, match="malformed"):
        Marker.load(path)


def test_progress_alerts_follow_the_state() -> None:
    progress = BootstrapProgress()
    assert progress.alerts() == []
    progress.state, progress.started_at, progress.error = "waiting", 0.0, "10.0.0.1:9007: refused"
    progress.waiting_on = ["c"]
    (waiting,) = progress.alerts()
    assert (
        waiting["id"] == "bootstrap-in-progress"
        and "bootstrapping themselves: c" in waiting["message"]
    )
    progress.state, progress.source, progress.phase = "copying", "a", "txlog"
    progress.records, progress.total_records, progress.rate, progress.eta_seconds = (
        50,
        200,
        25.0,
        6.0,
    )
    (copying,) = progress.alerts()
    assert "Copying the txlog of a: 50 of ~200 records" in copying["message"]
    assert "about 6 s left" in copying["message"]
    progress.state, progress.error = "failed", "mutual bootstrap: ..."
    (failed,) = progress.alerts()
    assert failed["level"] == "error" and failed["message"] == "mutual bootstrap: ..."
    progress.state = "done"
    assert progress.alerts() == []
    assert progress.to_dict()["state"] == "done"
