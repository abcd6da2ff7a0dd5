"""A replicated queue across a restart of every instance at once, with real processes.

The operator's recipe: instances replicate a ``Queue`` to each other, publishers and
consumers on each; traffic stops, every instance is stopped within a second (SIGTERM, or
SIGKILL), every instance starts again, traffic starts again. What must hold:

- every message is delivered and acked, within 30 s of the restart;
- a message acked before the stop is never delivered again, and each message left is
  acked once (the leases held at the stop end with it: those messages are delivered
  again, at least once, as documented);
- the ownership traffic stays bounded (no request asked over and over), and the copies'
  transferred in / out counters agree;
- once every copy is drained and its queue checkpoint is past every transfer, another
  stop and start of every instance gives each the same counters (the replay reads none
  of the transfers: the checkpoint keeps the counters); in the default suite's SIGKILL
  variant and in every repeated run.

The stop is made to catch transfer requests in flight: on each instance a consumer holds
(never acks) some messages, and once the other instances' consumers have worked through
everything else they ask for those. The stop comes once every instance waits on such a
request (``requests_waiting`` of ``/api/queues``), so it is not left to timing.
"""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path
from typing import Any

import orjson
import pytest

from spool.server.client import Client, subscribe_queue
from spool.server.config import load_config
from spool.server.queues.checkpoint import checkpoint_name
from spool.server.queues.ownership import Grant
from spool.server.queues.records import decode_transfers
from spool.server.txlog import TransactionLog
from spool.server.txlog.format.record import RecordKind
from tests.support.replication import Cluster
from tests.support.wait import wait_until

QUEUE = (
    "<Queue><Name>work</Name><MessageType>json</MessageType>"
    "<UnderlyingTopic>work-in</UnderlyingTopic><LeasePeriod>120s</LeasePeriod>"
    "<MaxPerSubscriptionBacklog>8</MaxPerSubscriptionBacklog></Queue>"
)
#: messages each instance's holder keeps leased through the stop
HELD = 4
#: messages published on each instance after the holders are full (worked through)
WORK = 20
#: every message is acked within this long of the restart
DEADLINE = 30.0


def _queue(cluster: Cluster, name: str) -> Any:
    return cluster.api(name, "/api/queues/work")


def _checkpoint_covers(cluster: Cluster, name: str, info: dict[str, Any]) -> bool:
    """``name``'s queue checkpoint starts past its whole log and keeps the counters
    ``info`` shows (nothing was transferred since)."""
    cfg = load_config(cluster.procs[name].config_path)
    assert cfg.transaction_log is not None
    path = cfg.transaction_log.journal_directory / checkpoint_name(cfg.name)
    if not path.exists():
        return False
    doc = orjson.loads(path.read_bytes())
    work = doc["queues"]["work"]
    return bool(
        work["seq"] == doc["last"][0] + 1
        and doc["last"][0] >= cluster.replication(name)["durable_seq"]
        and work["transferred"] == [info["transferred_in"], info["transferred_out"]]
    )


def _linked(cluster: Cluster) -> None:
    names = list(cluster.procs)
    for name in names:
        for other in names:
            if other != name:
                wait_until(lambda n=name, o=other: cluster.destination(n, o)["connected"], 30,
                           message=f"{name} -> {other} connected")  # fmt: skip


async def _publish(url: str, client: str, origin: str, numbers: range) -> None:
    async with Client(url, client) as pub:
        for n in numbers:
            pub.publish("work-in", {"o": origin, "n": n})
        await pub.flush()


def _stop_all(cluster: Cluster, how: str) -> None:
    """Every instance within a second: the signals first, then the waits."""
    procs = list(cluster.procs.values())
    sig = signal.SIGKILL if how == "kill" else signal.SIGTERM
    for proc in procs:
        proc.signal(sig)
    for proc in procs:
        assert proc.proc is not None
        code = proc.proc.wait(30)
        proc.stop()  # closes its log file
        if how == "kill":
            assert code == -signal.SIGKILL
        else:  # a graceful stop (uvicorn raises the signal again once it is done)
            assert code in (0, -signal.SIGTERM) and '"event":"stopped"' in proc.log(), code


async def _transfer_items(cluster: Cluster) -> dict[str, tuple[int, int, int]]:
    """Per stopped instance, from its log: how many ownership changes (requests and
    grants) it logged itself, and the transfers in and out its grant records show (a
    grant it made: out; one to it: in)."""
    out: dict[str, tuple[int, int, int]] = {}
    for name, proc in cluster.procs.items():
        cfg = load_config(proc.config_path)
        assert cfg.transaction_log is not None
        log = TransactionLog(cfg.transaction_log, cfg.name)
        await log.open()
        n = grants_in = grants_out = 0
        seq = log.first_seq
        try:
            while batch := await log.read_batch(seq, max_count=10_000):
                for r in batch:
                    if r.kind != RecordKind.QUEUE_TRANSFER:
                        continue
                    changes = decode_transfers(r.body)
                    grants = [c for c in changes if type(c) is Grant]
                    if not r.path:
                        n += len(changes)
                        grants_out += len(grants)
                    else:
                        grants_in += sum(1 for g in grants if g.owner == cfg.name)
                seq = batch[-1].seq + 1
        finally:
            await log.close()
        out[name] = (n, grants_in, grants_out)
    return out


def restart_scenario(tmp_path: Path, names: list[str], how: str, *, recount: bool = True) -> None:
    """The recipe; with ``recount``, then the second stop and start that must give each
    instance the same transfer counters from its checkpoint (about 10 s more)."""
    cluster = Cluster.mesh(tmp_path, names, sow=QUEUE)
    cluster.start()
    acked_before: list[tuple[str, int]] = []
    held: list[tuple[str, int]] = []
    acked_after: list[tuple[str, int]] = []
    try:
        _linked(cluster)

        async def run() -> None:
            holders = []
            subs = {}
            for name in names:
                c = Client(cluster.procs[name].ws_url, f"holder-{name}")
                await c.connect()
                holders.append(c)
                subs[name] = await subscribe_queue(c, "work", max_backlog=HELD)
            await asyncio.gather(*(
                _publish(cluster.procs[n].ws_url, f"pub-{n}", n, range(HELD)) for n in names
            ))  # fmt: skip
            for name in names:  # each holder fills up (with whatever reached it first)
                for _ in range(HELD):
                    doc = (await subs[name].get(30)).json()
                    held.append((doc["o"], doc["n"]))
            # more work, which nobody has room for yet; then workers on every instance
            await asyncio.gather(*(
                _publish(cluster.procs[n].ws_url, f"pub-{n}", n, range(HELD, HELD + WORK))
                for n in names
            ))  # fmt: skip
            await _work(cluster, names, acked_before, len(names) * WORK, ask_held=True)
            if how == "kill":
                # nothing in flight: every instance's log durable and at every destination
                for name in names:
                    await asyncio.to_thread(wait_until, lambda n=name: cluster.caught_up(n),
                                            30, message=f"{name} caught up")  # fmt: skip
            await asyncio.to_thread(_stop_all, cluster, how)
            for c in holders:
                await c.close()
            for name in names:
                await asyncio.to_thread(cluster.procs[name].start)
            await asyncio.to_thread(_linked, cluster)
            await asyncio.wait_for(
                _work(cluster, names, acked_after, len(held), ask_held=False), DEADLINE
            )

        asyncio.run(run())
        wait_until(lambda: all(_queue(cluster, n)["depth"] == 0 for n in names), 30,
                   message="every copy drained")  # fmt: skip
        for name in names:
            wait_until(lambda n=name: cluster.caught_up(n), 30, message=f"{name} caught up")
        infos = again = {n: _queue(cluster, n) for n in names}
        if recount:
            for name in names:
                wait_until(lambda n=name: _checkpoint_covers(cluster, n, infos[n]), 30,
                           message=f"{name}'s checkpoint past every transfer")  # fmt: skip
            _stop_all(cluster, how)
            cluster.start()
            _linked(cluster)
            again = {n: _queue(cluster, n) for n in names}
    finally:
        cluster.stop()
    assert len(set(acked_before)) == len(acked_before) == len(names) * WORK
    # what was acked before the stop never came back; the held ones, each acked once
    assert sorted(acked_after) == sorted(held), (acked_after, held)
    assert not set(acked_after) & set(acked_before)
    total_in = sum(i["transferred_in"] for i in infos.values())
    total_out = sum(i["transferred_out"] for i in infos.values())
    assert total_in == total_out, infos
    counters = {n: (i["transferred_in"], i["transferred_out"]) for n, i in infos.items()}
    assert {n: (i["transferred_in"], i["transferred_out"]) for n, i in again.items()} == counters
    items = asyncio.run(_transfer_items(cluster))
    # exactly the grants of each instance's log, through both restarts
    assert {n: (gin, gout) for n, (_, gin, gout) in items.items()} == counters
    messages = len(names) * (HELD + WORK)
    # a few changes a message at most (a request, a grant; asked again at most a few
    # times by each instance while its answer is delayed), never one a second
    assert sum(n for n, _, _ in items.values()) <= 4 * messages * len(names), items


async def _work(
    cluster: Cluster, names: list[str], out: list[tuple[str, int]], total: int, ask_held: bool
) -> None:
    """Workers on every instance ack what they get until ``total`` were acked; with
    ``ask_held``, then until every instance waits on a request for a held message."""
    stop = asyncio.Event()

    async def worker(name: str) -> None:
        async with Client(cluster.procs[name].ws_url, f"worker-{name}") as c:
            sub = await subscribe_queue(c, "work", max_backlog=4)
            while not stop.is_set():
                try:
                    m = await sub.get(0.2)
                except TimeoutError:
                    continue
                doc = m.json()
                out.append((doc["o"], doc["n"]))
                m.ack()
                if len(out) >= total and not ask_held:
                    stop.set()
            await sub.settled()

    workers = [asyncio.ensure_future(worker(n)) for n in names]
    try:
        while len(out) < total:
            await asyncio.sleep(0.05)
            for w in workers:
                if w.done():
                    w.result()  # a worker that failed fails the test
        if ask_held:
            await asyncio.to_thread(
                wait_until,
                lambda: all(_queue(cluster, n)["requests_waiting"] > 0 for n in names),
                30, message="every instance waits on a request for a held message",
            )  # fmt: skip
    finally:
        stop.set()
        await asyncio.gather(*workers)


# The default suite restarts a second time (the counters from the checkpoint) in the
# SIGKILL variant only, where the checkpoint is the periodic one; the repeated variants
# below do it in every run.
@pytest.mark.parametrize("how", ["term", "kill"])
def test_two_instances_stopped_together(tmp_path: Path, how: str) -> None:
    restart_scenario(tmp_path, ["a", "b"], how, recount=how == "kill")


def test_three_instances_stopped_together(tmp_path: Path) -> None:
    restart_scenario(tmp_path, ["a", "b", "c"], "term", recount=False)


@pytest.mark.slow
@pytest.mark.long
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.parametrize("how", ["term", "kill"])
def test_stopped_together_twenty_times(tmp_path: Path, n: int, how: str) -> None:
    for i in range(int(os.environ.get("SPOOL_RESTART_REPEAT", "20"))):
        restart_scenario(tmp_path / str(i), ["a", "b", "c"][:n], how)
