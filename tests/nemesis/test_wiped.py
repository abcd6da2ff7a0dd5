"""A log wiped by the nemesis (``join-empty``) is kept for the checker's order check.

Real journals written by the transaction log: ``b`` held pub-2's 3 and 4 before the late
1 and 2, was wiped and filled again in sequence order. The kept copy must give the
checker the order the wiped log held (its preallocated files are not copied).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from server.bookmarks import pub_hash
from server.config import TransactionLogConfig
from server.txlog import TransactionLog
from tests.nemesis.cluster import TOPIC_PUB, Cluster
from tests.nemesis.net import Network
from tests.nemesis.run import wiped_orders

NAMES = ["a", "b", "c"]


def _write(data: Path, name: str, order: list[tuple[int, bool]]) -> None:
    async def body() -> None:
        cfg = TransactionLogConfig(
            journal_directory=data / "journal",
            archive_directory=data / "archive",
            preallocated_files=1,
            flush_interval=0.0005,
        )
        log = TransactionLog(cfg, name, track_gaps=True)
        await log.open()
        for s, late in order:
            log.append(
                topic=TOPIC_PUB,
                message_type="json",
                pub_hash=pub_hash("pub-2"),
                pub_seq=s,
                body=b'{"s":%d}' % s,
                late=late,
            )
        await log.wait_durable(log.last_seq)
        await log.close()

    asyncio.run(body())


def _cluster(root: Path) -> Cluster:
    return Cluster(root, 3, "mixed", Network.build(NAMES, want_isolation=False))


def test_the_order_of_a_wiped_log_reaches_the_checker(tmp_path: Path) -> None:
    b = _cluster(tmp_path / "cluster").instances["b"]
    _write(b.data, "b", [(3, False), (4, False), (1, True), (2, True)])
    assert list((b.data / "journal").glob("*.prealloc.*"))
    b.keep_log("7")
    b.wipe()
    _write(b.data, "b", [(1, False), (2, False), (3, False), (4, False)])
    kept = b.wiped_logs()
    assert [d.parent.name for d in kept] == ["7"]
    assert not list((kept[0] / "journal").glob("*.prealloc.*"))
    h = pub_hash("pub-2")
    assert wiped_orders(_cluster(tmp_path / "cluster"), keep_data=True) == [
        {(h, 1): [(3, 4)], (h, 2): [(3, 4)]}
    ]
    assert wiped_orders(_cluster(tmp_path / "cluster"), keep_data=False) == [
        {(h, 1): [(3, 4)], (h, 2): [(3, 4)]}
    ]
    assert b.wiped_logs() == []
    assert wiped_orders(_cluster(tmp_path / "cluster"), keep_data=False) == []
