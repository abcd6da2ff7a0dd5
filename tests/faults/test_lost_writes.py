"""Storage that loses un-fsynced writes at a crash: nothing acknowledged is lost.

Each broker runs under tests/support/faulty_serve.py with a control file saying
``volatile``: its journal writes and truncations reach the files only when they are
fsynced, and live in the process until then, so a SIGKILL loses exactly what a power cut
would (the page cache's unwritten data; what lazyfs does for Jepsen). A plain SIGKILL
loses nothing a broker wrote, so it cannot tell a missing fsync from a present one; this
can.

- One instance: a publisher asks for persisted acks while the broker is killed at points
  of its progress; at every logon the broker holds at least what was acked, and at the end
  its log holds every message exactly once.
- A sync pair (A -> B sync): the publisher's persisted acks from A mean both disks.
  Both instances are killed together (a power cut of the pair), then one at a time; after
  each cut of both, each one's log, read as it is on disk, holds every acked message.
"""

from __future__ import annotations

import asyncio
import random
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from spool.server.bookmarks import pub_hash
from spool.server.client import Client, Disconnected
from tests.support.replication import destination, free_ports, read_log, replication_xml
from tests.support.server import SpoolProcess, config_xml, read_records

pytestmark = [pytest.mark.faults]

BODY = b"x" * 400  # a 1 MB journal rolls every ~2,000 records: kills land near rolls too


def _volatile(workdir: Path) -> Path:
    control = workdir / "control"
    workdir.mkdir(parents=True, exist_ok=True)
    control.write_text("volatile\n")
    return control


class Publisher:
    """Persisted publishes of 1..total to ``url()``, resending after the last ack on every
    reconnect; checks at each logon that the broker holds at least what was acked."""

    def __init__(self, url: Callable[[], str], total: int, name: str = "volatile-pub") -> None:
        self.url = url
        self.total = total
        self.name = name
        self.acked = 0
        self.logons: list[tuple[int, int]] = []  # (acked before, last_seq the broker held)

    async def run(self, batch: int = 500) -> None:
        while self.acked < self.total:
            # it resends after its last ack: the broker may hold more than was acked
            client = Client(self.url(), self.name, reused_seq="allow")
            try:
                info = await client.connect(timeout=5)
                self.logons.append((self.acked, info.last_seq))
                assert info.last_seq >= self.acked, "an acked message was lost"
                nxt = self.acked + 1
                while nxt <= self.total:
                    end = min(self.total, nxt + batch - 1)
                    for s in range(nxt, end + 1):
                        client.publish("orders", b'{"n":%d,"p":"%s"}' % (s, BODY), seq=s,
                                       persisted=True)  # fmt: skip
                    await client.wait_persisted(end, timeout=20)
                    self.acked = max(self.acked, client.persisted_seq)
                    nxt = end + 1
            except (Disconnected, OSError, TimeoutError):
                await asyncio.sleep(0.05)
            finally:
                self.acked = max(self.acked, client.persisted_seq)
                await client.close()


def _kill_at(
    points: list[int], publisher: Publisher, crash: Callable[[int], None]
) -> threading.Thread:
    """Call ``crash(acked)`` once the publisher's acks pass each point (a thread)."""

    def run() -> None:
        for point in points:
            while publisher.acked < point:
                threading.Event().wait(0.005)
            crash(publisher.acked)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _mine(seqs: list[tuple[int, int]], name: str) -> list[int]:
    return [s for h, s in seqs if h == pub_hash(name)]


def test_one_instance_keeps_every_acked_message(tmp_path: Path) -> None:
    total = 12_000
    workdir = tmp_path / "a"
    proc = SpoolProcess(
        workdir,
        config_xml(workdir / "data", journal_size="1MB",
                   txlog_extra="<PreallocatedJournalFiles>1</PreallocatedJournalFiles>"),
        control=_volatile(workdir),
    )  # fmt: skip
    proc.start()
    publisher = Publisher(lambda: proc.ws_url, total)
    rng = random.Random(31)
    points = sorted(rng.sample(range(total // 10, total * 9 // 10), 4))
    lock = threading.Lock()
    cuts: list[int] = []

    def crash(acked: int) -> None:
        with lock:
            cuts.append(acked)
            proc.kill()
            proc.start()

    killer = _kill_at(points, publisher, crash)
    try:
        asyncio.run(publisher.run())
        killer.join(60)
    finally:
        proc.stop()
    assert len(cuts) == len(points) and all(c < total for c in cuts)
    assert len(publisher.logons) > len(points)  # it logged on again after every cut
    records = asyncio.run(read_records(proc.config_path))
    assert _mine([(h, s) for h, s, _ in records], publisher.name) == list(range(1, total + 1))


@pytest.mark.slow  # about 90 s: the one-instance test is the short variant
def test_a_sync_pair_keeps_every_acked_message_on_both_disks(tmp_path: Path) -> None:
    total = 12_000
    port_a, port_b = free_ports(2)
    procs: dict[str, SpoolProcess] = {}
    for name, port, dests in (
        ("a", port_a, [destination("b", [("127.0.0.1", port_b)], sync=True,
                                   exclude="replicate,cascade")]),
        ("b", port_b, []),
    ):  # fmt: skip
        workdir = tmp_path / name
        xml = replication_xml(
            workdir / "data", name, port=port, destinations=dests, journal_size="1MB",
            link_timeout="2s",
        )  # fmt: skip
        procs[name] = SpoolProcess(workdir, xml, control=_volatile(workdir))
    for proc in procs.values():
        proc.start()
    publisher = Publisher(lambda: procs["a"].ws_url, total)
    lock = threading.Lock()
    # both (a power cut of the pair), A alone, B alone, both again
    plan = [("a", "b"), ("a",), ("b",), ("a", "b")]
    points = [total * (i + 1) // (len(plan) + 1) for i in range(len(plan))]
    checked: list[tuple[int, int, int]] = []  # (acked at the cut, held by a, held by b)
    failures: list[str] = []

    def crash(acked: int) -> None:
        who = plan[len(checked)]
        with lock:
            for name in who:
                procs[name].kill()
            held = {"a": acked, "b": acked}
            if who == ("a", "b"):  # what each disk holds after the cut, as the next start
                for name in who:
                    log = asyncio.run(read_log(procs[name]))
                    mine = _mine([(h, s) for h, s, _, _ in log], publisher.name)
                    held[name] = len(set(mine) & set(range(1, acked + 1)))
                    if held[name] != acked:
                        failures.append(f"{name} lost acked messages: {held[name]} of {acked}")
            checked.append((acked, held["a"], held["b"]))
            for name in who:
                procs[name].start()

    killer = _kill_at(points, publisher, crash)
    try:
        asyncio.run(publisher.run())
        killer.join(120)
    finally:
        for proc in procs.values():
            proc.stop()
    assert not failures, failures
    assert len(checked) == len(plan) and all(0 < a < total for a, _, _ in checked), checked
    for name in ("a", "b"):
        log = asyncio.run(read_log(procs[name]))
        mine = _mine([(h, s) for h, s, _, _ in log], publisher.name)
        assert sorted(mine) == list(range(1, total + 1)), name
        assert len(mine) == total, name
