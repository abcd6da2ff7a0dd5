"""Journals a fault replaces are kept for the checker's order check.

Real journals written by the transaction log, where pub-2's messages come in blocks of
two higher ones before two late ones (3, 4, 1, 2, 7, 8, 5, 6, ...). ``join-empty`` wipes
an instance, which then copies its log from a peer, in sequence order; ``missing-journal``
removes a journal, which the repair writes back in a peer's order. The kept copies must
give the checker the order the replaced journals held.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

from spool.server.bookmarks import pub_hash
from spool.server.txlog import TransactionLog
from tests.nemesis import damage
from tests.nemesis.checker import held_orders
from tests.nemesis.cluster import TOPIC_PUB, Cluster
from tests.nemesis.journals import read_instance
from tests.nemesis.net import Network
from tests.nemesis.run import earlier_orders
from tests.unit.txlog.helpers import config

NAMES = ["a", "b", "c"]
H = pub_hash("pub-2")


def _write(data: Path, name: str, order: list[tuple[int, bool]], journal_size: int) -> None:
    async def body() -> None:
        log = TransactionLog(config(data, journal_size=journal_size), name, track_gaps=True)
        await log.open()
        for s, late in order:
            log.append(
                topic=TOPIC_PUB,
                message_type="json",
                pub_hash=H,
                pub_seq=s,
                body=b'{"s":%d}' % s,
                late=late,
            )
        await log.wait_durable(log.last_seq)
        await log.close()

    asyncio.run(body())


def _blocks(count: int) -> list[tuple[int, bool]]:
    """3, 4, late 1, late 2, 7, 8, late 5, late 6, ..."""
    out = []
    for k in range(0, 4 * count, 4):
        out += [(k + 3, False), (k + 4, False), (k + 1, True), (k + 2, True)]
    return out


def _cluster(root: Path) -> Cluster:
    return Cluster(root, 3, "mixed", Network.build(NAMES, want_isolation=False))


def test_a_wiped_log_is_kept_whole(tmp_path: Path) -> None:
    b = _cluster(tmp_path / "cluster").instances["b"]
    _write(b.data, "b", _blocks(1), 64 * 1024)
    assert list((b.data / "journal").glob("*.prealloc.*"))
    b.keep_log("7")
    b.wipe()
    _write(b.data, "b", [(s, False) for s in range(1, 5)], 64 * 1024)
    kept = b.earlier_logs()
    assert [d.parent.name for d in kept] == ["7"]
    assert not list((kept[0] / "journal").glob("*.prealloc.*"))
    expected = [{(H, 1): [(3, 4)], (H, 2): [(3, 4)]}]
    assert earlier_orders(_cluster(tmp_path / "cluster"), keep_data=True) == expected
    assert earlier_orders(_cluster(tmp_path / "cluster"), keep_data=False) == expected
    assert b.earlier_logs() == []
    assert earlier_orders(_cluster(tmp_path / "cluster"), keep_data=False) == []


def test_a_removed_journal_is_kept_with_the_one_before_it(tmp_path: Path) -> None:
    b = _cluster(tmp_path / "cluster").instances["b"]
    _write(b.data, "b", _blocks(100), 4096)
    files = damage.journals(b.data / "journal", "b")
    assert len(files) >= 4
    before = read_instance(b.data, "b").records
    done = damage.missing_journal(
        b.data / "journal", "b", random.Random(5), keep=b.earlier_log("12") / "journal"
    )
    assert done is not None
    removed = files.index(b.data / "journal" / done["file"])
    assert not files[removed].exists()
    kept = sorted(p.name for p in (b.earlier_log("12") / "journal").iterdir())
    assert kept == [files[removed - 1].name, files[removed].name]
    first, last = _first_seq(files[removed - 1]), done["last_seq"]
    expected = held_orders(r for r in before if first <= r.seq <= last)
    assert expected  # the kept journals hold late records after higher ones
    assert earlier_orders(_cluster(tmp_path / "cluster"), keep_data=False) == [expected]


def _first_seq(journal: Path) -> int:
    return int(journal.name.split(".")[1])
