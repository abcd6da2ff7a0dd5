"""The nemesis: each period of the schedule injected into the cluster, then healed.

Every fault is recorded in the ``nemesis`` history: ``info start`` with the period
(kind, shape, targets, parameters) when it is injected, ``info bit`` when it had its
effect (a disk that refused a write; the damage done to a file), ``info end`` when it is
healed, and ``info skipped`` with the reason when it could not run here. After each
period the nemesis waits, measured in the clients' progress, until the publishers move
again (``recovered`` with the seconds it took, or ``stalled``).

Steps that need the traffic still close the clients' gate first (a restart of every
instance; damage to a stopped instance's files, which first waits until its peers hold
everything it has, so the damage is to records a peer can give back; a bootstrap from
empty; a SOW snapshot at a quiet point).
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.nemesis import damage
from tests.nemesis.cluster import TOPIC_SOW, Cluster, Instance
from tests.nemesis.history import Recorder
from tests.nemesis.schedule import Period
from tests.nemesis.workloads import Endpoints, sow_rows
from tests.soak.faults import fill

__all__ = ["FILLER", "TOPIC_FILL", "Nemesis", "progress_wait"]

#: the disk-full fault's publisher and topic (large messages that make the log roll)
FILLER = "disk-filler"
TOPIC_FILL = "nem.fill"

#: The journal file seam's control-file line (tests/support/faults.py ``ControlledSeam``)
#: that holds every write until its file is fsynced, so the next SIGKILL loses what a
#: power cut would.
UNSYNCED_LOSS_LINE = "volatile"
#: how long the workload writes under that mode before the crash (seconds, at most)
UNSYNCED_WINDOW_S = 2.0


async def progress_wait(
    done: Callable[[], Awaitable[bool] | bool],
    progress: Callable[[], Awaitable[int] | int],
    *,
    stall: float,
    cap: float,
    interval: float = 0.25,
) -> tuple[bool, float]:
    """Wait until ``done()``; give up when ``progress()`` did not grow for ``stall``
    seconds (or after ``cap`` in all). Returns (done, seconds waited)."""
    loop = asyncio.get_running_loop()
    start = last_move = loop.time()
    best: int | None = None
    while True:
        r = done()
        if r if isinstance(r, bool) else await r:
            return True, loop.time() - start
        p = progress()
        value = p if isinstance(p, int) else await p
        now = loop.time()
        if best is None or value > best:
            best, last_move = value, now
        if now - last_move > stall or now - start > cap:
            return False, now - start
        await asyncio.sleep(interval)


@dataclass
class Nemesis:
    cluster: Cluster
    ends: Endpoints
    rec: Recorder
    #: how the clients are doing: a number that grows while publishers get acks
    acked: Callable[[], int]
    #: whether every publisher has nothing in flight (the gate is closed)
    settled: Callable[[], bool]
    rng: random.Random
    #: how long a fault may take to bite, and the clients to move again (no progress)
    stall: float = 120.0
    injected: Counter[str] = field(default_factory=Counter)
    skipped: dict[str, str] = field(default_factory=dict)
    #: faults that did not have their effect (a disk that never filled)
    misses: list[str] = field(default_factory=list)
    recovery_s: dict[str, list[float]] = field(default_factory=dict)
    snapshots: int = 0
    #: the disk-full fault's own publisher (its history), and how many it sent
    filler: Recorder | None = None
    filled: int = 0
    #: the directory of the HA clients' file stores, and why it is not a disk of its own
    #: to fill (None: a tmpfs)
    stores: Path | None = None
    stores_tmpfs: str | None = "no store directory"
    #: whether an HA client reports a store that writes nothing (its disk refused)
    store_failed: Callable[[], bool] = lambda: False

    def _skip(self, period: Period, why: str) -> None:
        self.skipped.setdefault(period.kind, why)
        self.rec.info("skipped", {"index": period.index, "kind": period.kind, "why": why})

    async def run_period(self, period: Period) -> None:
        if period.quiet:
            await self.quiet(period)
            return
        why = self._why_not(period)
        if why is not None:
            self._skip(period, why)
            return
        self.rec.info("start", period.to_json())
        fault = getattr(self, "_" + period.kind.replace("-", "_"))
        try:
            await fault(period)
        finally:
            self.ends.gate.set()
        self.injected[period.kind] += 1
        self.rec.info("end", {"index": period.index, "kind": period.kind})
        mark = self.acked()
        ok, took = await progress_wait(
            lambda: self.acked() > mark, self.acked, stall=self.stall, cap=self.stall * 3
        )
        if ok:
            self.recovery_s.setdefault(period.kind, []).append(round(took, 2))
            self.rec.info("recovered", {"index": period.index, "seconds": round(took, 2)})
        else:
            self.rec.info("stalled", {"index": period.index, "seconds": round(took, 2)})

    def _why_not(self, period: Period) -> str | None:
        c = self.cluster
        if period.kind in ("partition", "loss") and not c.net.isolated:
            return c.net.why_not or "no network namespaces"
        if period.kind == "disk-full":
            reason = c.instances[period.targets[0]].tmpfs
            if reason is not None:
                return reason
        if period.kind == "client-disk-full":
            return self.stores_tmpfs
        return None

    # -- quiet periods: a SOW snapshot at a quiet point ---------------------------------

    async def quiet(self, period: Period) -> None:
        self.rec.info("quiet", {"index": period.index, "duration": period.duration})
        half = period.duration / 2
        await asyncio.sleep(half)
        await self.snapshot(period.index)
        await asyncio.sleep(half)

    async def snapshot(self, index: int) -> bool:
        """Stop traffic, wait until every copy caught up, read every instance's SOW with
        the log position it reflects; ``sow-snapshot`` events for the checker's fold."""
        self.ends.gate.clear()
        try:
            if not await self._quiesce():
                self.rec.info("snapshot-skipped", {"index": index, "why": "copies not caught up"})
                return False
            for inst in self.cluster:
                before = (await inst.api("/api/replication"))["durable_seq"]
                client = self.ends.client(inst.ws_url, "nemesis-sow")
                try:
                    await client.connect(timeout=10)
                    result = await client.sow(TOPIC_SOW, timeout=30)
                finally:
                    await client.close()
                after = (await inst.api("/api/replication"))["durable_seq"]
                self.rec.ok(
                    "sow-snapshot",
                    {"index": index, "rows": sow_rows(result.records), "s1": before, "s2": after},
                    inst.name,
                )
            self.snapshots += 1
            return True
        except Exception as exc:
            self.rec.info("snapshot-skipped", {"index": index, "why": repr(exc)[:200]})
            return False
        finally:
            self.ends.gate.set()

    async def _quiesce(self) -> bool:
        """With the gate closed: wait until the publishers have nothing in flight, then
        until every copy holds what every instance held at that moment. False when
        either stalls."""
        ok, _ = await progress_wait(self.settled, self.acked, stall=self.stall, cap=self.stall * 2)
        marks = await self.cluster.durable_marks() if ok else None
        if marks is None:
            return False
        ok, _ = await progress_wait(
            lambda: self.cluster.caught_up(marks),
            lambda: self.cluster.catch_up_progress(marks),
            stall=self.stall, cap=self.stall * 2,
        )  # fmt: skip
        return ok

    # -- helpers ------------------------------------------------------------------------

    def _insts(self, period: Period) -> list[Instance]:
        return [self.cluster.instances[n] for n in period.targets]

    async def _threads(self, *calls: Callable[[], object]) -> None:
        await asyncio.gather(*(asyncio.to_thread(c) for c in calls))

    async def _restart(self, insts: list[Instance]) -> None:
        """Start ``insts`` again; one that fails is a liveness failure and is tried once
        more (a second failure ends the run: the checks need every instance)."""
        results = await asyncio.gather(
            *(asyncio.to_thread(inst.start) for inst in insts), return_exceptions=True
        )
        for inst, result in zip(insts, results, strict=True):
            if isinstance(result, BaseException):
                self.rec.fail(
                    "liveness",
                    {"what": f"{inst.name} did not start again: {str(result)[-300:]}"},
                )
                await asyncio.to_thread(inst.kill)
                await asyncio.to_thread(inst.start)

    async def _stop_quiesced(self, insts: list[Instance], how: str = "KILL") -> bool:
        """Close the gate, wait until the peers hold everything (bounded), stop
        ``insts``, open the gate. False when the copies never caught up."""
        self.ends.gate.clear()
        try:
            ok = await self._quiesce()
            await self._threads(*((i.kill if how == "KILL" else i.stop) for i in insts))
        finally:
            self.ends.gate.set()
        return ok

    # -- the faults ---------------------------------------------------------------------

    async def _kill(self, period: Period) -> None:
        insts = self._insts(period)
        await self._threads(*(i.kill for i in insts))
        await asyncio.sleep(period.duration)
        await self._restart(insts)

    async def _pause(self, period: Period) -> None:
        insts = self._insts(period)
        for i in insts:
            i.pause()
        try:
            await asyncio.sleep(period.duration)
        finally:
            for i in insts:
                i.resume()

    async def _partition(self, period: Period) -> None:
        net = self.cluster.net
        side = set(period.targets)
        rest = [n for n in self.cluster.names if n not in side]
        for a in side:
            for b in rest:
                net.cut(a, b)
                if period.shape != "one-way":
                    net.cut(b, a)
        try:
            await asyncio.sleep(period.duration)
        finally:
            net.heal()

    async def _hold(self, period: Period, control: str, on: str, off: str) -> None:
        """Write ``on`` to each target's control file (``delay_control``,
        ``clock_control``) for the period, then ``off``."""
        files = [getattr(i, control) for i in self._insts(period)]
        for f in files:
            f.write_text(on)
        try:
            await asyncio.sleep(period.duration)
        finally:
            for f in files:
                f.write_text(off)

    async def _delay(self, period: Period) -> None:
        p = period.params
        await self._hold(period, "delay_control", f"{p['delay_ms']} {p['jitter_ms']}\n", "")

    async def _loss(self, period: Period) -> None:
        for n in period.targets:
            self.cluster.net.lose(n, period.params["percent"])
        try:
            await asyncio.sleep(period.duration)
        finally:
            self.cluster.net.heal()

    async def _disk_full(self, period: Period) -> None:
        """Fill the target's tmpfs, then write to it until its log refuses a write (its
        journal has preallocated room: only a roll needs more), hold, free."""
        inst = self._insts(period)[0]
        filler = await asyncio.to_thread(fill, inst.disk)
        refusing = asyncio.Event()
        burst = asyncio.create_task(self._burst(inst, refusing))
        try:

            async def outage() -> bool:
                try:
                    info = await inst.api("/api/transaction_log")
                except Exception:
                    return False
                return info.get("write_outage") is not None

            bit, took = await progress_wait(
                outage, lambda: self.filled, stall=self.stall, cap=self.stall * 2
            )
            refusing.set()
            if bit:
                self.rec.info("bit", {"index": period.index, "seconds": round(took, 2)})
                await asyncio.sleep(period.duration)
            else:
                self.misses.append(f"#{period.index} disk-full: {inst.name} never refused a write")
        finally:
            refusing.set()
            await burst
            filler.unlink()

    async def _client_disk_full(self, period: Period) -> None:
        """Fill the tmpfs of the HA clients' file stores until a client reports a store
        that writes nothing, hold, free. Each client writes its store again from memory
        once the disk takes writes (docs/ha-client.md "When a store's disk fails")."""
        assert self.stores is not None
        filler = await asyncio.to_thread(fill, self.stores)
        try:
            # the stores write as the clients publish and discard: the traffic fills it
            bit, took = await progress_wait(
                self.store_failed, self.acked, stall=self.stall, cap=self.stall * 2
            )
            if bit:
                self.rec.info("bit", {"index": period.index, "seconds": round(took, 2)})
                await asyncio.sleep(period.duration)
            else:
                self.misses.append(f"#{period.index} client-disk-full: no store refused a write")
        finally:
            filler.unlink()

    async def _burst(self, inst: Instance, done: asyncio.Event) -> None:
        """Publish 16 KB messages to ``nem.fill`` on ``inst`` until ``done``, 8 MB at
        most (the other instances' disks take them too); no acks asked: the log takes
        them until it refuses. ``filled`` counts them."""
        rec = self.filler
        assert rec is not None, "the nemesis was made without a filler's recorder"
        body = b'{"fill":"' + b"x" * 16_000 + b'"}'
        client = self.ends.client(inst.ws_url, FILLER)
        try:
            await client.connect(timeout=10)
            limit = self.filled + 500
            while not done.is_set() and self.filled < limit:
                first = self.filled + 1
                rec.invoke("publish", {"topic": TOPIC_FILL, "first": first, "last": first + 19},
                           inst.name)  # fmt: skip
                for seq in range(first, first + 20):
                    client.publish(TOPIC_FILL, body, seq=seq)
                self.filled += 20
                await asyncio.sleep(0.1)
        except Exception as exc:  # the connection refused or dropped: the log is full
            rec.info("broken", {"error": repr(exc)[:200]}, inst.name)
        finally:
            await client.close()

    async def _damage(
        self, period: Period, act: Callable[[Instance], dict[str, Any] | None]
    ) -> None:
        insts = self._insts(period)
        if not await self._stop_quiesced(insts):
            self.rec.info("not-quiesced", {"index": period.index})
        for inst in insts:
            done = await asyncio.to_thread(act, inst)
            self.rec.info("bit", {"index": period.index, "instance": inst.name, "damage": done})
        await asyncio.sleep(period.duration)
        await self._restart(insts)

    async def _torn_tail(self, period: Period) -> None:
        n = period.params["bytes"]
        await self._damage(period, lambda i: damage.torn_tail(i.data / "journal", i.name, n))

    async def _truncate(self, period: Period) -> None:
        n = period.params["bytes"]
        await self._damage(period, lambda i: damage.truncate_tail(i.data / "journal", i.name, n))

    async def _bit_flip(self, period: Period) -> None:
        rng = random.Random(period.params["salt"])
        which = period.params["file"]
        await self._damage(
            period, lambda i: damage.bit_flip(i.data / "journal", i.name, which, rng)
        )

    async def _missing_journal(self, period: Period) -> None:
        rng = random.Random(period.params["salt"])
        await self._damage(
            period,
            lambda i: damage.missing_journal(
                i.data / "journal", i.name, rng, keep=i.earlier_log(str(period.index)) / "journal"
            ),
        )

    async def _lost_writes(self, period: Period) -> None:
        insts = self._insts(period)
        for i in insts:
            i.seam_control.write_text(UNSYNCED_LOSS_LINE + "\n")
        # the workload writes under the mode for a while, so the crash has something that
        # was written but not fsynced to lose
        await asyncio.sleep(min(UNSYNCED_WINDOW_S, period.duration / 2))
        await self._threads(*(i.kill for i in insts))
        for i in insts:
            i.seam_control.write_text("")
        await asyncio.sleep(period.duration)
        await self._restart(insts)

    async def _clock_jump(self, period: Period) -> None:
        await self._hold(period, "clock_control", f"{period.params['offset_s']}\n", "0\n")

    async def _downgrade(self, period: Period) -> None:
        done: list[tuple[Instance, str]] = []
        for inst in self._insts(period):
            try:
                info = await inst.api("/api/replication")
            except Exception as exc:
                self.rec.info("rest-failed", {"index": period.index, "error": repr(exc)[:200]})
                continue
            for d in info["destinations"]:
                if d["effective_sync_type"] == "sync":
                    try:
                        await inst.api(f"/api/replication/{d['name']}/downgrade", "POST")
                        done.append((inst, d["name"]))
                    except Exception as exc:
                        self.rec.info("rest-failed", {"dest": d["name"], "error": repr(exc)[:200]})
        self.rec.info("bit", {"index": period.index, "downgraded": [[i.name, d] for i, d in done]})
        await asyncio.sleep(period.duration)
        for inst, dest in done:
            try:
                await inst.api(f"/api/replication/{dest}/upgrade", "POST")
            except Exception as exc:  # a restart since made it sync again
                self.rec.info("rest-failed", {"dest": dest, "error": repr(exc)[:200]})

    async def _remove_link(self, period: Period) -> None:
        a, b = period.targets
        c = self.cluster
        if (a, b) not in c.links:  # a chain: the link from a towards b's side
            b = next(dst for (src, dst) in sorted(c.links) if src == a)
        ia, ib = c.instances[a], c.instances[b]
        ia.peers.discard(b)
        ib.peers.discard(a)
        self.rec.info("bit", {"index": period.index, "removed": [a, b]})
        await self._threads(ia.stop, ib.stop)
        await self._restart([ia, ib])
        await asyncio.sleep(period.duration)
        ia.peers.add(b)
        ib.peers.add(a)
        await self._threads(ia.stop, ib.stop)
        await self._restart([ia, ib])

    async def _join_empty(self, period: Period) -> None:
        inst = self._insts(period)[0]
        others = [n for n in self.cluster.names if n != inst.name]
        first = period.params["source_salt"] % len(others)
        # every peer, as an operator lists them, from a salted first: one whose log waits
        # for a repair refuses to be copied, and the bootstrap goes on to the next
        sources = others[first:] + others[:first]
        if not await self._stop_quiesced([inst], "TERM"):
            self.rec.info("not-quiesced", {"index": period.index})
        await asyncio.to_thread(inst.keep_log, str(period.index))
        await asyncio.to_thread(inst.wipe)
        inst.bootstrap_from = sources
        self.rec.info("bit", {"index": period.index, "wiped": inst.name, "sources": sources})
        await asyncio.sleep(period.duration)
        await asyncio.to_thread(inst.launch)

        async def copied() -> int:
            return int((await inst.bootstrap()).get("records") or 0)

        ok, took = await progress_wait(inst.ready, copied, stall=self.stall, cap=self.stall * 10)
        if ok:
            self.rec.info("joined", {"index": period.index, "seconds": round(took, 2)})
            return
        state = await inst.bootstrap()
        self.rec.fail(
            "liveness",
            {"what": f"{inst.name}, started empty, never finished its bootstrap from "
                     f"{', '.join(sources)}: {state.get('state')} {state.get('error')}"},
        )  # fmt: skip
        # it joins without one instead (the links' resync fills it), so the run goes on
        await asyncio.to_thread(inst.kill)
        await asyncio.to_thread(inst.keep_log, f"{period.index}-unfinished")
        await asyncio.to_thread(inst.wipe)
        inst.bootstrap_from = None
        await self._restart([inst])

    async def _restart_all(self, period: Period) -> None:
        insts = list(self.cluster)
        self.ends.gate.clear()
        try:
            # stop traffic first (what the clients sent is acknowledged), then every
            # instance within a second
            await progress_wait(lambda: self.settled(), self.acked, stall=30, cap=60)
            sig = signal.SIGKILL if period.params.get("signal") == "KILL" else signal.SIGTERM
            for i in insts:
                i.resume()
                if i.running:
                    os.kill(i.proc.pid, sig)
            await self._threads(*(i.stop for i in insts))
            await asyncio.sleep(period.duration)
            await self._restart(insts)
        finally:
            self.ends.gate.set()
