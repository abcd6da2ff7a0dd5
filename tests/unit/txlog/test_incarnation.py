"""The log's incarnation: the instance's own identity names the log, not only the name.

A log that starts over (no journal left, whatever else is in the directory) gets a new
identity; the same log keeps its identity across restarts; a missing or damaged
``NAME.incarnation`` next to journals gives a new one too (a new identity is always safe,
an old one is safe only with the log that numbered it).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from spool.server.bookmarks import broker_pub_hash
from spool.server.txlog import TransactionLog, TxlogClosed
from spool.server.txlog.publishers.incarnation import incarnation_name, read_incarnation
from tests.unit.txlog.helpers import INSTANCE, config, run


async def _identity(tmp: Path, *, own_records: int = 0) -> int:
    """Open the log under ``tmp``, append ``own_records`` of the instance's identity, close;
    the identity it had."""
    log = TransactionLog(config(tmp, preallocated=0), INSTANCE, track_gaps=True)
    with pytest.raises(TxlogClosed):
        _ = log.own_pub_hash  # no identity before the files say which log this is
    await log.open()
    try:
        own = log.own_pub_hash
        for _ in range(own_records):
            log.append(topic="q", message_type="json", pub_hash=own,
                       pub_seq=log.publisher_last(own) + 1, body=b"{}")  # fmt: skip
        await log.wait_durable(log.last_seq)
    finally:
        await log.close()
    return own


def test_the_same_log_keeps_its_identity_and_a_new_log_gets_another(tmp_path: Path) -> None:
    first = run(lambda: _identity(tmp_path, own_records=3))
    token = read_incarnation(tmp_path / "journal", INSTANCE)
    assert token is not None and first == broker_pub_hash(INSTANCE, token)
    assert first != broker_pub_hash(INSTANCE)  # never the bare name an older log used
    assert run(lambda: _identity(tmp_path)) == first  # restarted: the same log
    # the journals go, the incarnation file stays (or the whole directory goes)
    for path in (tmp_path / "journal").glob(f"{INSTANCE}.*.journal*"):
        path.unlink()
    second = run(lambda: _identity(tmp_path, own_records=1))
    assert second not in (first, broker_pub_hash(INSTANCE))
    shutil.rmtree(tmp_path / "journal")
    shutil.rmtree(tmp_path / "archive")
    third = run(lambda: _identity(tmp_path))
    assert third not in (first, second)


@pytest.mark.parametrize("damage", ["missing", "garbage"])
def test_a_log_without_a_readable_incarnation_takes_a_new_identity(
    tmp_path: Path, damage: str
) -> None:
    first = run(lambda: _identity(tmp_path, own_records=2))
    path = tmp_path / "journal" / incarnation_name(INSTANCE)
    if damage == "missing":
        path.unlink()
    else:
        path.write_bytes(b"\x00\xffnot a token")
    again = run(lambda: _identity(tmp_path))
    assert again not in (first, broker_pub_hash(INSTANCE))
    assert read_incarnation(tmp_path / "journal", INSTANCE) is not None
