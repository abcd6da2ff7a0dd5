"""What a reconnect costs when the destination's holdings lack records it acknowledged.

Run: ``python -m tests.bench.bench_recheck [--quick]``; prints a JSON dict of metrics.

When a destination with the same log as at its last acknowledgment comes back and its
holdings lack a record at or before that acknowledgment, the source examines the last
``RECHECK_RECORDS`` records it acknowledged again (server/replication/outbound.py): it
may have lost a tail cut at a record boundary. A destination that takes only some topics
always looks so (it never held the other topics' publishers), so **every reconnect** of
it re-reads those records, skipping what is not for it. This measures that against a
destination that takes every topic (nothing re-read), both fed by one source, in process
on one virtual clock (tests/support/fabric.py), each link cut and healed in turn:

- ``filtered_reexamined_records`` / ``all_topics_reexamined_records``: records before
  the end of what the destination acknowledged that the resync starts at;
- ``filtered_reconnect_cpu_ms`` / ``all_topics_reconnect_cpu_ms``: the process's CPU time
  from the heal to the destination acknowledging the end of the log again (reads, routing,
  the link; virtual time moving costs both alike);
- ``recheck_cpu_ms``: the difference, the re-examination's own cost.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

from spool.server.clock import VirtualClock
from tests.support.engine import EngineHarness
from tests.support.fabric import A, C, drive, fabric_of, persisted, publish, xml
from tests.support.replication import MemoryFabric, destination

#: the source's log: this many records on each of two topics, by two publishers
PER_TOPIC = 20_000
BATCH = 500
_RESYNC = re.compile(r"resync from (\d+)")


def _acked_end(source: EngineHarness, name: str) -> bool:
    repl = source.broker.replication
    txlog = source.broker.txlog
    assert repl is not None and txlog is not None
    dest = repl.destinations[name]
    return bool(dest.connected) and dest.acked >= txlog.durable_seq


async def _reconnect(
    fabric: MemoryFabric,
    clock: VirtualClock,
    source: EngineHarness,
    name: str,
    address: tuple[str, int],
) -> dict[str, float]:
    """Cut the link to ``name``, heal it, until it acknowledged the end of the log again."""
    repl = source.broker.replication
    assert repl is not None
    dest = repl.destinations[name]
    acked = dest.acked
    seen = len(source.broker.events.recent(10_000))
    fabric.cut(address, source="b")
    await drive(clock, lambda: not dest.connected)
    fabric.heal(address, source="b")
    cpu = time.process_time()
    await drive(clock, lambda: _acked_end(source, name), timeout=300)
    spent = time.process_time() - cpu
    events = source.broker.events.recent(10_000)[seen:]
    starts = [
        int(m.group(1))
        for e in events
        if e.get("event") == "destination_connected" and e.get("destination") == name
        for m in [_RESYNC.search(str(e.get("detail", "")))]
        if m
    ]
    if not starts:
        raise RuntimeError(f"no reconnect of {name} seen")
    return {"reexamined": float(max(0, acked + 1 - starts[-1])), "cpu_ms": spent * 1000.0}


async def _measure(tmp: Path, per_topic: int) -> dict[str, float]:
    one_way = {"exclude": "replicate"}
    configs = {
        "b": xml(
            tmp, "b",
            destination("a", [A], topics=(("orders", None),), **one_way),
            destination("c", [C], **one_way),
        ),
        "a": xml(tmp, "a"),
        "c": xml(tmp, "c"),
    }  # fmt: skip
    async with fabric_of(tmp, configs) as (fabric, clock, hs):
        source = hs["b"]
        await drive(clock, lambda: _acked_end(source, "a") and _acked_end(source, "c"))
        orders, audit = await source.logon("pub-o"), await source.logon("pub-x")
        for first in range(1, per_topic + 1, BATCH):
            last = min(per_topic, first + BATCH - 1)
            publish(orders, "orders", range(first, last + 1))
            publish(audit, "audit", range(first, last + 1))
            await drive(clock, lambda n=last: persisted(orders) >= n and persisted(audit) >= n)  # type: ignore[misc]
        await drive(clock, lambda: _acked_end(source, "a") and _acked_end(source, "c"))
        filtered = await _reconnect(fabric, clock, source, "a", A)
        everything = await _reconnect(fabric, clock, source, "c", C)
    return {
        "filtered_reexamined_records": filtered["reexamined"],
        "all_topics_reexamined_records": everything["reexamined"],
        "filtered_reconnect_cpu_ms": filtered["cpu_ms"],
        "all_topics_reconnect_cpu_ms": everything["cpu_ms"],
        "recheck_cpu_ms": filtered["cpu_ms"] - everything["cpu_ms"],
    }


def run(quick: bool = False) -> dict[str, float]:
    tmp = Path(tempfile.mkdtemp(prefix="spool-bench-recheck-"))
    try:
        return asyncio.run(_measure(tmp, PER_TOPIC // 4 if quick else PER_TOPIC))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    print(json.dumps(run(quick="--quick" in sys.argv[1:]), indent=2))
