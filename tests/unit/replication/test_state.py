"""The replication state file: positions, the log's identity, the instance's identity."""

from __future__ import annotations

import orjson
import pytest

from spool.server.replication.state import AckedState, ReplicationState


def test_a_state_round_trips_with_its_identities() -> None:
    state = ReplicationState.new()
    state.destinations["b"] = AckedState("b", "L", 42)
    back = ReplicationState.decode(state.encode())
    assert (back.log_id, back.instance_id) == (state.log_id, state.instance_id)
    assert back.destinations == state.destinations


def test_a_log_that_starts_over_keeps_the_instance_identity() -> None:
    old = ReplicationState.new()
    fresh = ReplicationState.new(old.instance_id)
    assert fresh.log_id != old.log_id and fresh.instance_id == old.instance_id
    assert ReplicationState.new().instance_id != old.instance_id


def test_a_file_of_an_older_version_without_an_instance_identity_gets_one() -> None:
    data = orjson.dumps({"version": 1, "log_id": "L", "destinations": {}})
    state = ReplicationState.decode(data)
    assert state.log_id == "L" and len(state.instance_id) == 32


def test_a_malformed_instance_identity_is_refused() -> None:
    data = orjson.dumps({"version": 1, "log_id": "L", "destinations": {}, "instance_id": 7})
    with pytest.raises(ValueError, match="instance_id"):
        ReplicationState.decode(data)
