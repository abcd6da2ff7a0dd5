"""The data-directory lock in one process (the process tests are tests/faults/test_datalock.py).

``flock`` locks belong to an open file description, so a second acquisition in the same
process is refused just as one from another process would be: these tests need no second
process to check the refusal, the holder's description and the release.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from spool.server.config import parse_config
from spool.server.datalock import (
    DATA_LOCK_NAME,
    DataDirectoryInUse,
    DataDirectoryLock,
    LockHolder,
    lock_paths,
)
from tests.support.server import config_xml


def test_the_lock_files_are_the_data_directory_and_the_journal_directories(
    tmp_path: Path,
) -> None:
    cfg = parse_config(config_xml(tmp_path / "d", name="spool-a"))
    assert lock_paths(cfg) == [
        tmp_path / "d" / DATA_LOCK_NAME,
        tmp_path / "d" / "journal" / "spool-a.lock",
        tmp_path / "d" / "archive" / "spool-a.lock",
    ]
    bare = parse_config(config_xml(tmp_path / "e", txlog=False))
    assert lock_paths(bare) == [tmp_path / "e" / DATA_LOCK_NAME]


def test_a_second_holder_is_refused_with_the_first_ones_pid_and_address(
    tmp_path: Path,
) -> None:
    cfg = parse_config(config_xml(tmp_path / "d", name="spool-a"))
    first = DataDirectoryLock.acquire(cfg)
    first.record_address("127.0.0.1:9007")
    with pytest.raises(DataDirectoryInUse) as refused:
        DataDirectoryLock.acquire(cfg)
    holder = refused.value.holder
    assert holder.instance == "spool-a" and holder.address == "127.0.0.1:9007"
    assert holder.pid is not None and holder.started is not None
    message = str(refused.value)
    assert f"pid {holder.pid}" in message and "listening on 127.0.0.1:9007" in message
    assert str(tmp_path / "d") in message
    # the refused attempt took nothing: after the release the next one gets every lock
    first.release()
    again = DataDirectoryLock.acquire(cfg)
    assert again.paths == lock_paths(cfg)
    content = orjson.loads((tmp_path / "d" / DATA_LOCK_NAME).read_bytes())
    assert content["address"] is None and content["instance"] == "spool-a"
    again.release()


def test_instances_of_other_names_share_journal_directories_but_not_one_name(
    tmp_path: Path,
) -> None:
    """The prefix rule lets spool-a and spool-b share a journal directory; two spool-a on
    one journal directory (each with its own data directory) would write the same
    journals, and are refused."""
    shared = tmp_path / "journals"
    a = DataDirectoryLock.acquire(parse_config(_shared(tmp_path / "a", shared, "spool-a")))
    b = DataDirectoryLock.acquire(parse_config(_shared(tmp_path / "b", shared, "spool-b")))
    with pytest.raises(DataDirectoryInUse) as refused:
        DataDirectoryLock.acquire(parse_config(_shared(tmp_path / "c", shared, "spool-a")))
    assert refused.value.path == shared / "spool-a.lock"
    assert not (tmp_path / "c" / DATA_LOCK_NAME).exists() or _unlocked(tmp_path / "c")
    a.release()
    b.release()


def _shared(data: Path, journal: Path, name: str) -> str:
    return config_xml(data, name=name).replace(str(data / "journal"), str(journal))


def _unlocked(data: Path) -> bool:
    """The data directory's lock was given back (taking it again works)."""
    cfg = parse_config(config_xml(data, name="probe", txlog=False))
    lock = DataDirectoryLock.acquire(cfg)
    lock.release()
    return True


@given(st.binary(max_size=300))
def test_a_lock_file_of_any_content_names_a_holder_without_failing(data: bytes) -> None:
    holder = LockHolder.parse(data)
    assert holder.describe().startswith(("instance ", "another instance"))


def test_a_holder_that_has_not_bound_yet_says_so() -> None:
    holder = LockHolder.parse(b'{"pid": 12, "instance": "x"}')
    assert holder.describe() == "instance 'x' (pid 12, not listening yet)"
    assert LockHolder.parse(b"").describe() == "another instance (pid unknown, not listening yet)"
