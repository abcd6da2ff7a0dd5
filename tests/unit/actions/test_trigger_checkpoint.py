"""The trigger checkpoint file (server/actions/checkpoint.py): what is written reads back,
and every file that is not one this version wrote for this log is refused, so a start-up
never resumes an action from a seq that means nothing in its log."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from spool.server.actions.checkpoint import (
    VERSION,
    TriggerCheckpointError,
    checkpoint_name,
    decode,
    encode,
)

U64 = (1 << 64) - 1
LOG = 0xF00D_CAFE_1234_5678

log_ids = st.integers(1, U64)
names = st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=20)
marks = st.dictionaries(names, st.integers(0, U64), max_size=8)


@given(log_ids, marks)
def test_what_is_written_reads_back(log_id: int, marked: dict[str, int]) -> None:
    data = encode(log_id, marked)
    assert decode(data, log_id) == marked
    assert encode(log_id, dict(reversed(marked.items()))) == data  # order does not matter
    assert orjson.loads(data) == {"version": VERSION, "log": log_id, "actions": marked}


@given(log_ids, marks.filter(bool), st.data())
def test_a_torn_file_is_refused(log_id: int, marked: dict[str, int], data: st.DataObject) -> None:
    whole = encode(log_id, marked)
    cut = data.draw(st.integers(0, len(whole) - 1))
    with pytest.raises(TriggerCheckpointError, match="not JSON"):
        decode(whole[:cut], log_id)


def test_the_file_name() -> None:
    assert checkpoint_name("east-1") == "east-1.triggers.json"


def _file(**changes: Any) -> bytes:
    """A version 1 file for LOG with ``changes`` applied (a value of ``...``: no such key)."""
    obj: dict[str, Any] = {"version": 1, "log": LOG, "actions": {"a": 7, "b": 0}}
    obj.update(changes)
    return orjson.dumps({k: v for k, v in obj.items() if v is not ...})


def test_a_good_file() -> None:
    assert decode(_file(), LOG) == {"a": 7, "b": 0}
    assert decode(_file(actions={}), LOG) == {}


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "not JSON"),
        (b"\xff\xfe", "not JSON"),
        (b'{"version": 1, "log": 1,', "not JSON"),
        (b"[1, 2]", "not a JSON object"),
        (b"1", "not a JSON object"),
        (b"null", "not a JSON object"),
        (_file(version=2), "version 2, this instance reads version 1"),
        (_file(version=0), "version 0"),
        (_file(version="1"), "version '1'"),
        (_file(version=1.0), "version 1.0"),
        (_file(version=True), "version True"),
        (_file(version=...), "no version"),
        (_file(log=...), "differs in 'log'"),
        (_file(actions=...), "differs in 'actions'"),
        (_file(extra={}), "differs in 'extra'"),
        (_file(log=str(LOG)), "is not a publisher identity"),
        (_file(log=float(LOG)), "is not a publisher identity"),
        (_file(log=None), "is not a publisher identity"),
        (_file(log=-1), "is not a publisher identity"),
        (_file(log=0), "is not a publisher identity"),
        (_file(log=True), "is not a publisher identity"),
        (_file(log=LOG + 1), "written for another log"),
        (b'{"version": 1, "log": 18446744073709551616, "actions": {}}', "not a publisher"),
        (_file(actions=[["a", 7]]), "actions is not an object"),
        (_file(actions=None), "actions is not an object"),
        (_file(actions={"a": -1}), "action 'a': -1 is not a seq"),
        (_file(actions={"a": 7.0}), "action 'a': 7.0 is not a seq"),
        (_file(actions={"a": "7"}), "action 'a': '7' is not a seq"),
        (_file(actions={"a": True}), "action 'a': True is not a seq"),
        (_file(actions={"a": None}), "action 'a': None is not a seq"),
        (_file(actions={"a": [7]}), "action 'a': \\[7\\] is not a seq"),
        (b'{"version":1,"log":%d,"actions":{"a":18446744073709551616}}' % LOG, "not a seq"),
    ],
)
def test_a_file_this_version_did_not_write_for_this_log_is_refused(
    data: bytes, reason: str
) -> None:
    with pytest.raises(TriggerCheckpointError, match=reason):
        decode(data, LOG)


def test_another_logs_file_names_both_logs() -> None:
    with pytest.raises(TriggerCheckpointError) as caught:
        decode(encode(0xAB, {"a": 1}), 0xCD)
    assert str(caught.value) == "written for another log (publisher 0xab, this log is 0xcd)"


@pytest.mark.parametrize(
    ("log_id", "marked", "reason"),
    [
        (0, {}, "publisher identity"),
        (-1, {}, "publisher identity"),
        (U64 + 1, {}, "publisher identity"),
        (True, {}, "publisher identity"),
        (LOG, {"a": -1}, "action 'a': not a seq: -1"),
        (LOG, {"a": U64 + 1}, "not a seq"),
        (LOG, {"a": True}, "not a seq"),
    ],
)
def test_what_would_be_refused_is_never_written(
    log_id: int, marked: dict[str, int], reason: str
) -> None:
    with pytest.raises(ValueError, match=reason):
        encode(log_id, marked)
