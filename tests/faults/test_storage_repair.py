"""A damaged copy is found, fenced and repaired from its replication peers.

Real processes: a sync pair A <-> B (each the other's destination), every message acked
(persisted, so on both copies), both stopped, one copy's files damaged as storage does it
(tests/support/damage.py), both started again. Then the exact oracle: every acked message
once on both logs, and a replay from EPOCH on either instance returning the same messages.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter
from pathlib import Path

import pytest

from server.bookmarks import pub_hash
from server.client import Client, ClientError, Disconnected
from tests.support.damage import flip_byte, journals, records_of, zero_end_of_last_record
from tests.support.replication import Cluster, publish_resending, read_log
from tests.support.wait import wait_until

pytestmark = [pytest.mark.faults]

TOPIC = "orders"
_names = itertools.count()

#: (publisher, its sequence, body) of a message
Message = tuple[int, int, bytes]


def _journal_dir(cluster: Cluster, name: str) -> Path:
    return cluster.data_dir(name) / "journal"


def _publish(cluster: Cluster, name: str, publisher: str, seqs: range, size: int = 0) -> None:
    pad = b"x" * size

    async def run() -> None:
        await publish_resending(
            [cluster.procs[name].ws_url], publisher, TOPIC, seqs, batch=500, timeout=300
        )

    if not pad:
        asyncio.run(run())
        return

    async def padded() -> None:
        async with Client(cluster.procs[name].ws_url, publisher) as client:
            for start in range(seqs.start, seqs.stop, 500):
                end = min(seqs.stop, start + 500)
                for s in range(start, end):
                    client.publish(TOPIC, b'{"n":%d,"pad":"%s"}' % (s, pad), seq=s, persisted=True)
                await client.wait_persisted(end - 1, timeout=60)

    asyncio.run(padded())


async def _replay(url: str) -> list[Message] | None:
    """Every message of the topic from EPOCH, or None when the replay fails (or does not
    complete within a minute)."""
    try:
        return await asyncio.wait_for(_replay_all(url), 60)
    except (ClientError, Disconnected, OSError, TimeoutError):
        return None


async def _replay_all(url: str) -> list[Message]:
    async with Client(url, f"oracle-{next(_names)}") as client:
        sub = await client.subscribe(TOPIC, bookmark="0", completed=True)
        out: list[Message] = []
        while not (sub.completed.is_set() and sub.queue.empty()):
            if client.failures:  # the replay failed (e.g. on damaged bytes)
                raise ClientError(str(client.failures[0]))
            try:
                msg = await sub.get(timeout=1.0)
            except TimeoutError:
                continue
            h, s, _ = (msg.bookmark or "").split("|")
            out.append((int(h), int(s), msg.data))
        return out


def _replays_to(cluster: Cluster, name: str, want: Counter[Message]) -> bool:
    got = asyncio.run(_replay(cluster.procs[name].ws_url))
    return got is not None and Counter(got) == want


def _started_pair(tmp_path: Path) -> Cluster:
    cluster = Cluster.both_ways(tmp_path, journal_size="1MB")
    cluster.start()
    for name, other in (("a", "b"), ("b", "a")):
        wait_until(lambda n=name, o=other: cluster.destination(n, o)["connected"], 30)
    return cluster


def _settle(cluster: Cluster) -> None:
    for name in ("a", "b"):
        wait_until(lambda n=name: cluster.caught_up(n), 60, message=f"{name} caught up")


def _check_logs(cluster: Cluster, want: Counter[Message]) -> None:
    """Stopped instances: every acked message exactly once in each log."""
    for name in ("a", "b"):
        records = asyncio.run(read_log(cluster.procs[name]))
        got = Counter((h, s, body) for h, s, body, _path in records)
        assert got == want, name


def _sent(publisher: str, seqs: range, size: int = 0) -> Counter[Message]:
    pad = b"x" * size
    if pad:
        return Counter((pub_hash(publisher), s, b'{"n":%d,"pad":"%s"}' % (s, pad)) for s in seqs)
    return Counter((pub_hash(publisher), s, b'{"n":%d}' % s) for s in seqs)


@pytest.mark.xfail(strict=True, reason="a torn tail is cut and never given back")
def test_a_torn_tail_on_the_publishing_instance_is_given_back_by_its_peer(
    tmp_path: Path,
) -> None:
    """The last record of A (published at A, acked, fsynced, on B) is torn while A is
    stopped: after the restart A holds it again, under its own local seq, and a replay from
    EPOCH on A returns every message, as on B."""
    cluster = _started_pair(tmp_path)
    try:
        _publish(cluster, "a", "pub-a", range(1, 301))
        _publish(cluster, "b", "pub-b", range(1, 301))
        _publish(cluster, "a", "pub-a", range(301, 401))
        _settle(cluster)
        cluster.stop()
        torn = zero_end_of_last_record(journals(_journal_dir(cluster, "a"), "a")[-1])
        assert (torn.pub_hash, torn.pub_seq) == (pub_hash("pub-a"), 400)
        cluster.start()
        want = _sent("pub-a", range(1, 401)) + _sent("pub-b", range(1, 301))
        wait_until(lambda: _replays_to(cluster, "a", want), 90, message="a replays everything")
        assert _replays_to(cluster, "b", want)
        # the next publish gets a new local seq: the torn record's seq holds the same
        # message again, never a different one
        _publish(cluster, "a", "pub-a", range(401, 411))
        want += _sent("pub-a", range(401, 411))
        _settle(cluster)
    finally:
        cluster.stop()
    _check_logs(cluster, want)
    at_seq = {r.seq: (r.pub_hash, r.pub_seq) for j in journals(_journal_dir(cluster, "a"), "a")
              for r in records_of(j)}  # fmt: skip
    assert at_seq[torn.seq] == (torn.pub_hash, torn.pub_seq)


@pytest.mark.xfail(strict=True, reason="damage in a finished journal is not found or repaired")
def test_a_flipped_byte_in_a_finished_journal_is_found_and_repaired(tmp_path: Path) -> None:
    """Six 1 MB journals on A, a byte in the middle of the first flipped while A is
    stopped: A finds the damage, keeps every intact record after it, gets the damaged
    record back from B, and a replay from EPOCH on A returns every message."""
    cluster = _started_pair(tmp_path)
    try:
        _publish(cluster, "a", "pub-a", range(1, 12_001), size=200)
        _publish(cluster, "b", "pub-b", range(1, 8_001), size=200)
        _settle(cluster)
        cluster.stop()
        files = journals(_journal_dir(cluster, "a"), "a")
        assert len(files) >= 6
        flip_byte(files[0], 500_000)
        cluster.start()
        want = _sent("pub-a", range(1, 12_001), 200) + _sent("pub-b", range(1, 8_001), 200)
        wait_until(lambda: _replays_to(cluster, "a", want), 120, message="a replays everything")
        assert _replays_to(cluster, "b", want)
        _settle(cluster)
    finally:
        cluster.stop()
    _check_logs(cluster, want)
