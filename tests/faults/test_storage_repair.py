"""A damaged copy is found, fenced and repaired from its replication peers.

Real processes: a sync pair A <-> B (each the other's destination), every message acked
(persisted, so on both copies), both stopped, A's files damaged as storage does it
(tests/support/damage.py), both started again. Then the exact oracle: A has no fenced
record left, every acked message is once in both logs, a replay from EPOCH on either
instance returns the same messages, and the seqs of the damaged records hold the same
messages again (never other ones).

Each kind of damage is tried with the lost records published at A itself (B's copies
carry A on their path: loop protection alone would never send them back) and at B.
Then a chain A -> B -> C where A and B both lost the records and only C holds them, a
repair over a mutual-TLS link, and an instance wiped and started empty.
"""

from __future__ import annotations

import asyncio
import itertools
import shutil
import ssl
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from spool.server.bookmarks import broker_pub_hash, pub_hash
from spool.server.client import Client, ClientError, Disconnected
from spool.server.client.queue import subscribe_queue
from spool.server.replication.state import state_path
from spool.server.txlog.publishers.incarnation import read_incarnation
from spool.server.txlog.storage.files import clients_ack_name
from tests.support.certs import TestCA
from tests.support.damage import (
    RecordAt,
    cut_last_records,
    flip_byte,
    flip_index_byte,
    journals,
    records_of,
    remove_journal,
    truncate_inside_last_record,
    zero_end_of_last_record,
)
from tests.support.replication import (
    Cluster,
    destination,
    free_ports,
    publish_resending,
    read_log,
    replication_xml,
)
from tests.support.server import SpoolProcess, sow_topic
from tests.support.wait import wait_until

pytestmark = [pytest.mark.faults]

TOPIC = "orders"
PAD = 200
_names = itertools.count()

#: (publisher, its sequence, body) of a message
Message = tuple[int, int, bytes]


def _body(s: int, pad: int) -> bytes:
    return b'{"n":%d,"pad":"%s"}' % (s, b"x" * pad) if pad else b'{"n":%d}' % s


def _publish(url: str, publisher: str, seqs: range, pad: int = 0) -> None:
    async def run() -> None:
        async with Client(url, publisher) as client:
            for start in range(seqs.start, seqs.stop, 500):
                end = min(seqs.stop, start + 500)
                for s in range(start, end):
                    client.publish(TOPIC, _body(s, pad), seq=s, persisted=True)
                await client.wait_persisted(end - 1, timeout=60)

    if pad:
        asyncio.run(run())
    else:
        asyncio.run(
            publish_resending([url], publisher, TOPIC, seqs, batch=500, timeout=300)
        )  # fmt: skip


def _sent(publisher: str, seqs: range, pad: int = 0) -> Counter[Message]:
    return Counter((pub_hash(publisher), s, _body(s, pad)) for s in seqs)


async def _replay(url: str, verify: ssl.SSLContext | None = None) -> list[Message] | None:
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
            if client.failures:  # the replay failed (e.g. at a fenced range)
                raise ClientError(str(client.failures[0]))
            try:
                msg = await sub.get(timeout=1.0)
            except TimeoutError:
                continue
            h, s, _ = (msg.bookmark or "").split("|")
            out.append((int(h), int(s), msg.data))
        return out


def _replays_to(proc: SpoolProcess, want: Counter[Message]) -> bool:
    got = asyncio.run(_replay(proc.ws_url))
    return got is not None and Counter(got) == want


def _fences(proc: SpoolProcess, **kw: object) -> list[dict[str, object]]:
    info = httpx.get(f"{proc.http_url}/api/transaction_log", timeout=10, **kw).json()  # type: ignore[arg-type]
    fences: list[dict[str, object]] = info["fences"]
    return fences


def _seqs(journal_dir: Path, name: str) -> dict[int, tuple[int, int]]:
    """Local seq -> bookmark of every record of a stopped instance's journals."""
    return {
        r.seq: (r.pub_hash, r.pub_seq) for j in journals(journal_dir, name) for r in records_of(j)
    }


def _check_logs(procs: list[SpoolProcess], want: Counter[Message]) -> None:
    """Stopped instances: every acked message exactly once in each log."""
    for proc in procs:
        records = asyncio.run(read_log(proc))
        got = Counter((h, s, body) for h, s, body, _path in records)
        assert got == want, proc.workdir.name


# -- the pair -------------------------------------------------------------------------------

#: damage done to A's stopped files: returns the records it hit (their seqs must hold the
#: same messages after the repair)
Damage = Callable[[Path, int], list[RecordAt]]


def _mine(records: list[RecordAt], publisher: int) -> list[RecordAt]:
    return [r for r in records if r.pub_hash == publisher]


def torn_tail(jdir: Path, publisher: int) -> list[RecordAt]:
    last = zero_end_of_last_record(journals(jdir, "a")[-1])
    assert last.pub_hash == publisher
    return [last]


def truncated_tail(jdir: Path, publisher: int) -> list[RecordAt]:
    last = truncate_inside_last_record(journals(jdir, "a")[-1], keep=48)
    assert last.pub_hash == publisher
    return [last]


def flipped_byte(jdir: Path, publisher: int) -> list[RecordAt]:
    first = journals(jdir, "a")[0]
    mine = _mine(records_of(first), publisher)
    target = mine[len(mine) // 2]
    return [flip_byte(first, target.offset + target.length // 2)]


def damaged_index(jdir: Path, publisher: int) -> list[RecordAt]:
    """Only the index of a finished journal: rebuilt from its journal, nothing lost."""
    flip_index_byte(journals(jdir, "a")[0], "a", 4000)
    return []


def damaged_index_and_data(jdir: Path, publisher: int) -> list[RecordAt]:
    """A finished journal's index and a record of it: what was lost is told by the intact
    records around it, not by the index."""
    hit = flipped_byte(jdir, publisher)
    flip_index_byte(journals(jdir, "a")[0], "a", 4000)
    return hit


def missing_journal(jdir: Path, publisher: int) -> list[RecordAt]:
    files = journals(jdir, "a")
    assert len(files) >= 3
    return remove_journal(files[1], "a")


#: each kind of damage, and how many journals A needs for it (the first one finished, or
#: one in the middle)
DAMAGE: dict[str, tuple[Damage, int]] = {
    "torn tail": (torn_tail, 1),
    "truncated tail": (truncated_tail, 1),
    "flipped byte in a finished journal": (flipped_byte, 2),
    "damaged index file": (damaged_index, 2),
    "damaged index and data": (damaged_index_and_data, 2),
    "missing journal in the middle": (missing_journal, 3),
}
SIDES = ["published at the damaged instance", "published at the peer"]
#: a body of about 1 KB: few messages fill a 1 MB journal
BIG = 1000


def _bulk(journals_needed: int) -> tuple[int, int]:
    """How many messages of which padding A's first journals take before the last ones."""
    return (300, PAD) if journals_needed == 1 else (1100 * (journals_needed - 1), BIG)


def _pair(tmp_path: Path) -> Cluster:
    cluster = Cluster.both_ways(tmp_path, journal_size="1MB")
    cluster.start()
    for name, other in (("a", "b"), ("b", "a")):
        wait_until(lambda n=name, o=other: cluster.destination(n, o)["connected"], 30)
    return cluster


def _settle(cluster: Cluster, *names: str) -> None:
    for name in names or ("a", "b"):
        wait_until(lambda n=name: cluster.caught_up(n), 90, message=f"{name} caught up")


def _damaged_pair_is_repaired(
    tmp_path: Path, damage: Damage, side: str, bulk: int, pad: int = PAD
) -> None:
    """Publish (the side's publisher fills A's first journals and writes its last record),
    damage A, restart both, check the oracle."""
    cluster = _pair(tmp_path)
    a, b = cluster.procs["a"], cluster.procs["b"]
    chosen = "pub-a" if side == "published at the damaged instance" else "pub-b"
    other = "pub-b" if chosen == "pub-a" else "pub-a"
    url = {"pub-a": a.ws_url, "pub-b": b.ws_url}
    want: Counter[Message] = Counter()
    try:
        _publish(url[chosen], chosen, range(1, bulk + 1), pad)
        want += _sent(chosen, range(1, bulk + 1), pad)
        _publish(url[other], other, range(1, 101))
        want += _sent(other, range(1, 101))
        _settle(cluster)
        _publish(url[chosen], chosen, range(bulk + 1, bulk + 21))  # A's last records
        want += _sent(chosen, range(bulk + 1, bulk + 21))
        _settle(cluster)
        cluster.stop()
        jdir = cluster.data_dir("a") / "journal"
        before = _seqs(jdir, "a")
        hit = damage(jdir, pub_hash(chosen))
        cluster.start()
        wait_until(lambda: not _fences(a), 120, message="a repaired: nothing fenced")
        wait_until(lambda: _replays_to(a, want), 60, message="a replays every message")
        assert _replays_to(b, want)
        # new messages get new seqs; the damaged ones hold the same messages again
        _publish(url[chosen], chosen, range(bulk + 21, bulk + 31))
        want += _sent(chosen, range(bulk + 21, bulk + 31))
        _settle(cluster)
    finally:
        cluster.stop()
    _check_logs([a, b], want)
    after = _seqs(cluster.data_dir("a") / "journal", "a")
    for r in hit:
        assert after[r.seq] == (r.pub_hash, r.pub_seq), r
    assert all(after[seq] == bm for seq, bm in before.items()), "a seq changed its message"


def test_a_torn_tail_on_the_publishing_instance_is_given_back_by_its_peer(
    tmp_path: Path,
) -> None:
    """A's last record (published at A, acked, fsynced, on B)
    is torn while A is stopped; after the restart A holds it again under its own local
    seq, and a replay from EPOCH on A returns every message, as on B."""
    _damaged_pair_is_repaired(
        tmp_path, torn_tail, "published at the damaged instance", bulk=300
    )  # fmt: skip


@pytest.mark.slow
@pytest.mark.long
@pytest.mark.parametrize(
    ("kind", "side"),
    [
        (kind, side)
        for kind in DAMAGE
        for side in SIDES
        if (kind, side) != ("torn tail", SIDES[0])  # the test above
    ],
)
def test_damage_is_repaired_from_a_sync_peer(tmp_path: Path, kind: str, side: str) -> None:
    damage, needed = DAMAGE[kind]
    bulk, pad = _bulk(needed)
    _damaged_pair_is_repaired(tmp_path, damage, side, bulk, pad)


@pytest.mark.slow
@pytest.mark.long
def test_a_flipped_byte_in_the_first_of_six_journals_is_found_and_repaired(
    tmp_path: Path,
) -> None:
    """Six 1 MB journals, byte 500,000 of the first flipped
    while A is stopped: A finds the damage after it starts (the scrub's first pass), fences
    the one record, keeps the intact records after it, gets the record back from B."""
    cluster = _pair(tmp_path)
    a, b = cluster.procs["a"], cluster.procs["b"]
    try:
        _publish(a.ws_url, "pub-a", range(1, 3_601), BIG)
        _publish(b.ws_url, "pub-b", range(1, 2_401), BIG)
        _settle(cluster)
        cluster.stop()
        files = journals(cluster.data_dir("a") / "journal", "a")
        assert len(files) >= 6
        hit = flip_byte(files[0], 500_000)
        cluster.start()
        want = _sent("pub-a", range(1, 3_601), BIG) + _sent("pub-b", range(1, 2_401), BIG)
        wait_until(lambda: _replays_to(a, want), 120, message="a replays everything")
        assert _replays_to(b, want) and not _fences(a)
        _settle(cluster)
    finally:
        cluster.stop()
    _check_logs([a, b], want)
    after = _seqs(cluster.data_dir("a") / "journal", "a")
    assert after[hit.seq] == (hit.pub_hash, hit.pub_seq)


def test_an_instance_wiped_and_started_empty_gets_back_what_its_peer_holds(
    tmp_path: Path,
) -> None:
    """A's data directory is deleted while it is stopped and A starts empty, without a
    bootstrap: B's link resyncs it from nothing, the records A published itself included
    (they carry A on their path at B); then A takes new messages of the same publisher
    after them, and both logs hold every acked message once."""
    cluster = _pair(tmp_path)
    a, b = cluster.procs["a"], cluster.procs["b"]
    try:
        _publish(a.ws_url, "pub-a", range(1, 201))
        _publish(b.ws_url, "pub-b", range(1, 101))
        want = _sent("pub-a", range(1, 201)) + _sent("pub-b", range(1, 101))
        _settle(cluster)
        a.stop()
        shutil.rmtree(cluster.data_dir("a"))
        a.start()
        wait_until(lambda: _replays_to(a, want), 60, message="a holds every message again")
        assert _replays_to(b, want)
        _publish(a.ws_url, "pub-a", range(201, 211))
        want += _sent("pub-a", range(201, 211))
        _settle(cluster)
    finally:
        cluster.stop()
    _check_logs([a, b], want)


# -- a repair killed midway ----------------------------------------------------------------

#: where A's repair is held (tests/support/faults.py ``hold``) and killed: the operation
#: on its rewrite's new journal, and whether the rewrite reached its commit point there
#: (server/txlog/recovery/rewrite.py: the new journal and its index written and fsynced)
KILL_POINTS: dict[str, tuple[str, bool]] = {
    "copying the new journal": ("write", False),
    "before the new journal's fsync": ("fsync", False),
    "swapping it in": ("rename", True),
}


@pytest.mark.slow
@pytest.mark.parametrize(
    "point",
    [
        # the same side of the commit point as the first: only in the long suite
        pytest.param(p, marks=[pytest.mark.long]) if p == "before the new journal's fsync" else p
        for p in KILL_POINTS
    ],
)
def test_a_repair_killed_midway_completes_after_the_restart(tmp_path: Path, point: str) -> None:
    """A's torn tail is being written back (a new journal under way) when A is killed
    (SIGKILL): at the next start A either finishes that rewrite on its own (past its
    commit point: B is stopped then) or drops it and asks B again. Either way the record
    comes back under its own seq, nothing else moves, and every acked message is once in
    A's log and in its replay."""
    operation, committed = KILL_POINTS[point]
    cluster = _pair(tmp_path)
    a, b = cluster.procs["a"], cluster.procs["b"]
    control = tmp_path / "a-seam"
    try:
        _publish(b.ws_url, "pub-b", range(1, 101))
        _settle(cluster)
        _publish(a.ws_url, "pub-a", range(1, 301), PAD)  # A's last record is pub-a's
        want = _sent("pub-b", range(1, 101)) + _sent("pub-a", range(1, 301), PAD)
        _settle(cluster)
        cluster.stop()
        jdir = cluster.data_dir("a") / "journal"
        before = _seqs(jdir, "a")
        (hit,) = torn_tail(jdir, pub_hash("pub-a"))
        a.control = control  # A now runs on the steered file seam
        a.start()  # A fences its torn tail (a rewrite too) and asks B, which is down
        control.write_text(f"hold {operation} .journal.new\n")
        b.start()
        httpx.post(f"{a.http_url}/api/transaction_log/repair", timeout=10)
        held = control.with_name(control.name + ".held")
        wait_until(held.exists, 60, message=f"a's repair reached its {operation}")
        new_journal = Path(held.read_text().split()[1])
        new_index = new_journal.with_name(new_journal.name.replace(".journal.", ".index."))
        assert new_index.exists() == committed, held.read_text()
        a.kill()
        control.unlink()  # a healthy disk from now on
        if committed:  # A finishes the rewrite itself: B is not there to ask again
            b.stop()
        a.start()
        wait_until(lambda: not _fences(a), 120, message="a repaired after the kill")
        wait_until(lambda: _replays_to(a, want), 60, message="a replays every message")
        if committed:
            b.start()
        assert _replays_to(b, want)
        assert not [p.name for p in jdir.iterdir() if ".new" in p.name]
    finally:
        cluster.stop()
    _check_logs([a, b], want)
    after = _seqs(jdir, "a")
    assert after[hit.seq] == (hit.pub_hash, hit.pub_seq)
    assert all(after[seq] == bm for seq, bm in before.items()), "a seq changed its message"


# -- a chain ----------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.long
def test_a_chain_repairs_from_the_last_instance_that_still_holds_the_records(
    tmp_path: Path,
) -> None:
    """A -> B -> C: A's last records are torn on A and on B; only C holds them. B asks C,
    A asks B (which finds them only once it repaired itself)."""
    cluster = Cluster(tmp_path, ["a", "b", "c"])
    one_way = {"exclude": "replicate"}
    # a does not wait at start for b to repair itself first: it serves, and asks again
    quick = "<JournalRepairWait>2s</JournalRepairWait>"
    cluster.add(
        "a", destinations=[destination("b", [cluster.address("b")], **one_way)],
        journal_size="1MB", tuning=quick,
    )  # fmt: skip
    cluster.add(
        "b",
        destinations=[destination("c", [cluster.address("c")], passthrough=(".*",), **one_way)],
        journal_size="1MB",
    )  # fmt: skip
    cluster.add("c", journal_size="1MB")
    a, b, c = (cluster.procs[n] for n in ("a", "b", "c"))
    cluster.start()
    try:
        for name, dest in (("a", "b"), ("b", "c")):
            wait_until(lambda n=name, d=dest: cluster.destination(n, d)["connected"], 30)
        _publish(a.ws_url, "pub-a", range(1, 301))
        want = _sent("pub-a", range(1, 301))
        wait_until(lambda: cluster.caught_up("a") and cluster.caught_up("b"), 60)
        cluster.stop()
        torn_a = zero_end_of_last_record(journals(cluster.data_dir("a") / "journal", "a")[-1])
        torn_b = zero_end_of_last_record(journals(cluster.data_dir("b") / "journal", "b")[-1])
        assert (torn_a.pub_hash, torn_a.pub_seq) == (torn_b.pub_hash, torn_b.pub_seq)
        cluster.start()
        wait_until(lambda: not _fences(b), 120, message="b repaired from c")
        wait_until(lambda: not _fences(a), 120, message="a repaired from b")
        for proc in (a, b, c):
            wait_until(lambda p=proc: _replays_to(p, want), 60, message=proc.workdir.name)
    finally:
        cluster.stop()
    _check_logs([a, b, c], want)
    assert _seqs(cluster.data_dir("a") / "journal", "a")[torn_a.seq] == (
        torn_a.pub_hash, torn_a.pub_seq,
    )  # fmt: skip


# -- over TLS ---------------------------------------------------------------------------------

TOKEN = "ops-token-for-storage-repair-0123"


@pytest.mark.slow
def test_a_repair_works_over_a_mutual_tls_link(tmp_path: Path) -> None:
    """A dials B over mutual TLS (B maps A's certificate to a user who may write and read
    the topic): A's torn tail comes back over that link."""
    ca = TestCA(tmp_path / "pki", "ca")
    server = ca.issue_server("server")
    client = ca.issue_client("spool-a")
    port_a, port_b = free_ports(2)
    tls = (
        f"<TLS>true</TLS><CACertificate>{ca.cert_path}</CACertificate>"
        f"<Certificate>{client.cert_path}</Certificate><PrivateKey>{client.key_path}</PrivateKey>"
    )
    a_xml = replication_xml(
        tmp_path / "a" / "data", "a", port=port_a,
        destinations=[destination("b", [("127.0.0.1", port_b)], exclude="replicate",
                                  transport_extra=tls)],
    )  # fmt: skip
    users = (
        f"<User><Name>ops</Name><Token>{TOKEN}</Token><Admin>true</Admin></User>"
        f"<User><Name>repl</Name><CertificateSubject>{client.subject}</CertificateSubject>"
        "<Write>.*</Write><Read>.*</Read></User>"
        f"<User><Name>reader</Name><Token>{TOKEN}-r</Token><Read>.*</Read></User>"
    )
    listener = (
        f"<Certificate>{server.cert_path}</Certificate><PrivateKey>{server.key_path}</PrivateKey>"
        f"<CACertificate>{ca.cert_path}</CACertificate><ClientAuth>optional</ClientAuth>"
    )
    b_xml = replication_xml(
        tmp_path / "b" / "data", "b", port=port_b, users=users, admin_extra=listener
    )
    a = SpoolProcess(tmp_path / "a", a_xml)
    b = SpoolProcess(tmp_path / "b", b_xml, tls=True)
    try:
        b.start()
        a.start()
        wait_until(
            lambda: httpx.get(f"{a.http_url}/api/replication", timeout=10).json()[
                "destinations"][0]["connected"], 30,
        )  # fmt: skip
        _publish(a.ws_url, "pub-a", range(1, 201))
        want = _sent("pub-a", range(1, 201))
        a.stop()
        torn = zero_end_of_last_record(journals(tmp_path / "a" / "data" / "journal", "a")[-1])
        a.start()
        wait_until(lambda: not _fences(a), 120, message="a repaired over TLS")
        # (the start-up goes on after the repair: a serves once it is ready)
        wait_until(lambda: _replays_to(a, want), 60, message="a replays every message")
    finally:
        a.stop()
        b.stop()
    _check_logs([a], want)
    assert _seqs(tmp_path / "a" / "data" / "journal", "a")[torn.seq] == (
        torn.pub_hash, torn.pub_seq,
    )  # fmt: skip


# -- the SOW and a queue, repaired after start-up ---------------------------------------

SOW_AND_QUEUE = sow_topic("state", "/k", durability="transient") + (
    "<Queue><Name>work</Name><MessageType>json</MessageType>"
    "<UnderlyingTopic>work-in</UnderlyingTopic><LeasePeriod>1h</LeasePeriod>"
    "<MaxPerSubscriptionBacklog>100</MaxPerSubscriptionBacklog></Queue>"
)


def _durable(proc: SpoolProcess) -> int:
    info = httpx.get(f"{proc.http_url}/api/replication", timeout=10).json()
    return int(info["durable_seq"])


async def _state(url: str) -> dict[str, int]:
    async with Client(url, f"sow-{next(_names)}") as client:
        result = await client.sow("state")
        return {doc["k"]: doc["v"] for doc in (m.json() for m in result.records)}


async def _drain(url: str, idle: float) -> list[str]:
    """What a new consumer of the queue gets (acking each) until ``idle`` seconds pass
    without a delivery."""
    got: list[str] = []
    async with Client(url, f"consumer-{next(_names)}") as client:
        sub = await subscribe_queue(client, "work", max_backlog=100)
        while True:
            try:
                msg = await sub.get(timeout=idle)
            except TimeoutError:
                return got
            got.append(msg.json()["m"])
            msg.ack()


@pytest.mark.parametrize("damage", ["flipped", "missing"])
def test_a_repair_after_start_up_reaches_the_sow_and_the_queue(tmp_path: Path, damage: str) -> None:
    """A byte of each record written between two fillers of A's second journal flipped
    (updates and a delete of SOW keys, queue messages, queue acks), or that journal
    deleted with its index (its fence then knows only the bookmark intervals around it),
    A started while B is down: A serves the SOW and the queue without them. Then B
    starts; its resync sends none of them back as new records: A's fences are repaired
    in place, and A takes the records in while it runs: the SOW holds what the whole log
    says (never a repaired update over a later one), a new consumer gets each message
    nobody acked once, and no acked one, and every local seq of A holds the message it
    held before, each bookmark once."""
    cluster = Cluster.both_ways(
        tmp_path, journal_size="1MB", sow=SOW_AND_QUEUE,
        txlog_extra="<PreallocatedJournalFiles>1</PreallocatedJournalFiles>",
        tuning="<JournalRepairWait>0s</JournalRepairWait>",
    )  # fmt: skip
    cluster.start()
    for name, other in (("a", "b"), ("b", "a")):
        wait_until(lambda n=name, o=other: cluster.destination(n, o)["connected"], 30)
    a = cluster.procs["a"]
    pad = b'{"pad":"' + b"x" * BIG + b'"}'

    async def first_life() -> tuple[int, int]:
        async with Client(a.ws_url, "pub") as pub, Client(a.ws_url, "worker") as worker:
            sub = await subscribe_queue(worker, "work", max_backlog=100)
            held = {}
            n = 0

            async def send(topic: str, bodies: list[bytes]) -> None:
                nonlocal n
                for body in bodies:
                    n += 1
                    pub.publish(topic, body, seq=n, persisted=True)
                await pub.wait_persisted(n, timeout=60)

            async def take(count: int) -> None:
                for _ in range(count):
                    msg = await sub.get(timeout=30)
                    held[msg.json()["m"]] = msg

            def jobs(*names: str) -> list[bytes]:
                return [b'{"m":"%s"}' % m.encode() for m in names]

            def order(k: str, v: int) -> bytes:
                return b'{"k":"%s","v":%d}' % (k.encode(), v)

            async def ack(*names: str) -> None:
                for m in names:
                    held.pop(m).ack()
                await sub.settled()

            await send("state", [order(k, 1) for k in ("k0", "k1", "k2")])
            await send("work-in", jobs("q1", "q2", "q3"))
            await take(3)
            await send("pad", [pad] * 1100)
            first = await asyncio.to_thread(_durable, a) + 1
            await ack("q1")
            await send("state", [order("k0", 2), order("k1", 2), order("k3", 2)])
            await pub.sow_delete("state", keys=["k2"])
            await send("work-in", jobs("r1", "r2", "r3"))
            await take(3)
            await ack("r1")
            last = await asyncio.to_thread(_durable, a)
            await send("pad", [pad] * 1100)
            await send("state", [order("k0", 3)])
            await ack("r2")
            return first, last

    try:
        first, last = asyncio.run(first_life())
        for name in ("a", "b"):
            wait_until(lambda n=name: cluster.caught_up(n), 90, message=f"{name} caught up")
        cluster.stop()
        jdir = cluster.data_dir("a") / "journal"
        before = _seqs(jdir, "a")
        middle = journals(jdir, "a")[1]
        damaged = [r for r in records_of(middle) if first <= r.seq <= last]
        assert [r.seq for r in damaged] == list(range(first, last + 1))
        if damage == "flipped":
            for rec in reversed(damaged):
                flip_byte(middle, rec.offset + rec.length // 2)
        else:
            remove_journal(middle, "a")
        (jdir / "a.queues.ack").unlink()  # as if A crashed before its queue checkpoint
        cluster.start("a")
        wait_until(lambda: _fences(a), 60, message="a started with fences")
        assert asyncio.run(_state(a.ws_url)) == {"k0": 3, "k1": 1, "k2": 1}
        cluster.start("b")
        wait_until(lambda: not _fences(a), 120, message="a repaired: nothing fenced")
        want = {"k0": 3, "k1": 2, "k3": 2}
        wait_until(lambda: asyncio.run(_state(a.ws_url)) == want, 30, message="a's SOW")
        assert asyncio.run(_state(cluster.procs["b"].ws_url)) == want
        assert sorted(asyncio.run(_drain(a.ws_url, idle=3.0))) == ["q2", "q3", "r3"]
    finally:
        cluster.stop()
    after = _seqs(jdir, "a")
    assert all(after[seq] == bm for seq, bm in before.items()), "a seq changed its message"
    assert len(set(after.values())) == len(after), "a bookmark is held twice"


# -- a queue ack lost on disk ---------------------------------------------------------------

QUEUE = (
    "<Queue><Name>work</Name><MessageType>json</MessageType>"
    "<UnderlyingTopic>work-in</UnderlyingTopic><LeasePeriod>1h</LeasePeriod></Queue>"
)


def _queue(proc: SpoolProcess) -> dict[str, object]:
    info: dict[str, object] = httpx.get(f"{proc.http_url}/api/queues/work", timeout=10).json()
    return info


def _instance(proc: SpoolProcess) -> dict[str, object]:
    info: dict[str, object] = httpx.get(f"{proc.http_url}/api/instance", timeout=10).json()
    return info


def test_a_queue_ack_torn_on_disk_is_never_delivered_again(tmp_path: Path) -> None:
    """A consumer at A acks a message; the ack, A's last record, is on B too. Both stop,
    the end of A's ack is torn, and A starts alone: B stays down past A's repair wait, so
    A serves its queue with the ack fenced. The message is held (shown as held, not as
    waiting) and a consumer that subscribes meanwhile gets nothing; B comes back, the ack
    is repaired, and that consumer's first delivery is new work published after it: the
    acked message never comes again, and the queue drains."""
    cluster = Cluster.both_ways(
        tmp_path, sow=QUEUE, tuning="<JournalRepairWait>1s</JournalRepairWait>"
    )
    cluster.start()
    for name, other in (("a", "b"), ("b", "a")):
        wait_until(lambda n=name, o=other: cluster.destination(n, o)["connected"], 30)
    a = cluster.procs["a"]

    async def first_life() -> None:
        async with Client(a.ws_url, "pub") as pub, Client(a.ws_url, "worker") as worker:
            sub = await subscribe_queue(worker, "work", max_backlog=10)
            pub.publish("work-in", b'{"m":"job"}', seq=1, persisted=True)
            await pub.wait_persisted(1, timeout=60)
            msg = await sub.get(timeout=30)
            msg.ack()
            await sub.settled()

    async def second_life() -> None:
        async with Client(a.ws_url, "late") as client:
            sub = await subscribe_queue(client, "work", max_backlog=10)
            held = await asyncio.to_thread(_queue, a)
            assert (held["depth"], held["held"], held["backlog"]) == (1, 1, 0)
            assert held["hold"], "the hold says why"
            await asyncio.to_thread(cluster.start, "b")
            await asyncio.to_thread(
                wait_until, lambda: not _fences(a) and _queue(a)["depth"] == 0, 120,
                message="a repaired and the ack taken in",
            )  # fmt: skip
            async with Client(a.ws_url, "pub-2") as pub:
                pub.publish("work-in", b'{"m":"new"}', seq=1, persisted=True)
                await pub.wait_persisted(1, timeout=60)
            msg = await sub.get(timeout=30)
            assert msg.json()["m"] == "new"  # the acked job did not come first: never
            msg.ack()
            await sub.settled()

    try:
        asyncio.run(first_life())
        for name in ("a", "b"):
            wait_until(lambda n=name: cluster.caught_up(n), 90, message=f"{name} caught up")
        cluster.stop()
        jdir = cluster.data_dir("a") / "journal"
        torn = zero_end_of_last_record(journals(jdir, "a")[-1])
        assert torn.pub_hash != pub_hash("pub")  # the queue's ack, not the publish
        (jdir / "a.queues.ack").unlink(missing_ok=True)  # the queue reads the whole log
        cluster.start("a")
        wait_until(lambda: _instance(a)["ready"], 60, message="a serves, b still down")
        assert _fences(a), "a started with its ack fenced"
        alerts = _instance(a)["alerts"]
        assert isinstance(alerts, list) and any(x["id"] == "queue-held" for x in alerts)
        health = httpx.get(f"{a.http_url}/healthz", timeout=10).json()
        assert health["status"] == "degraded"
        asyncio.run(second_life())
        wait_until(lambda: _queue(a)["depth"] == 0, 30, message="the queue drains")
    finally:
        cluster.stop()


def test_own_records_lost_whole_at_a_clean_end_are_never_numbered_again(
    tmp_path: Path,
) -> None:
    """A consumer at A acks a message; the ack, A's last record, is on B too. Both stop,
    and A's storage loses that record whole, at a record boundary, with everything that
    would vouch for it (the open index, ``clients.ack``, the replication state): A's
    recovery sees a clean end. A starts alone; its queue no longer knows of the ack, so
    the message goes again and its new ack is A's next own record. That record must
    not take the lost one's bookmark (B would drop it as a duplicate, and A the lost one
    when B sends it back): once B is back, both logs hold both acks, each once."""
    cluster = Cluster.both_ways(tmp_path, sow=QUEUE)
    cluster.start()
    for name, other in (("a", "b"), ("b", "a")):
        wait_until(lambda n=name, o=other: cluster.destination(n, o)["connected"], 30)
    a, b = cluster.procs["a"], cluster.procs["b"]

    async def ack_one(client_name: str, publish: bool) -> None:
        async with Client(a.ws_url, client_name) as worker:
            sub = await subscribe_queue(worker, "work", max_backlog=10)
            if publish:
                worker.publish("work-in", b'{"m":"job"}', seq=1, persisted=True)
                await worker.wait_persisted(1, timeout=60)
            msg = await sub.get(timeout=30)
            assert msg.json()["m"] == "job"
            msg.ack()
            await sub.settled()

    def settle() -> None:
        for name in ("a", "b"):
            wait_until(lambda n=name: cluster.caught_up(n), 90, message=f"{name} caught up")

    try:
        asyncio.run(ack_one("worker", publish=True))
        settle()
        cluster.stop()
        jdir = cluster.data_dir("a") / "journal"
        token = read_incarnation(jdir, "a")
        assert token is not None
        own = broker_pub_hash("a", token)
        last = journals(jdir, "a")[-1]
        (lost,) = cut_last_records(last, 1)
        assert lost.pub_hash == own  # the queue's ack
        last.with_suffix(".index").unlink()
        (jdir / clients_ack_name("a")).unlink()
        state_path(cluster.data_dir("a"), "a").unlink()
        (jdir / "a.queues.ack").unlink(missing_ok=True)  # the queue reads the whole log
        cluster.start("a")
        wait_until(lambda: _instance(a)["ready"], 60, message="a serves, b still down")
        assert not _fences(a)  # nothing says a record was lost
        # delivered again (at least once: nothing here knows of the ack), acked again
        asyncio.run(ack_one("worker-2", publish=False))
        cluster.start("b")
        settle()
        wait_until(lambda: _queue(a)["depth"] == 0, 30, message="a's queue is empty")
    finally:
        cluster.stop()
    logs = {name: asyncio.run(read_log(p)) for name, p in (("a", a), ("b", b))}
    acks = {name: sorted(s for h, s, _b, _p in log if h == own) for name, log in logs.items()}
    assert acks["a"] == acks["b"], acks
    assert lost.pub_seq in acks["a"]  # given back by B
    assert len(set(acks["a"])) == len(acks["a"])  # each once
    assert max(acks["a"]) > lost.pub_seq  # the new ack: a new bookmark
