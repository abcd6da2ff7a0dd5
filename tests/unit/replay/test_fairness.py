"""A replay shares its event loop: it yields between batches even when nothing it awaits
suspends (records served from the log's memory tail, a client with room to spare).

Without that, a replay of 1M messages would stop sending for hundreds of milliseconds at
the log's tail: the cursor would read and encode the whole in-memory tail (about 200,000
records) in one turn of the loop, before the connection's writer could send any of it,
and every other task of the instance (other clients, acks, heartbeats) would wait as long.
"""

from __future__ import annotations

import asyncio

from spool.server.clock import VirtualClock
from tests.support.wait import turns_until
from tests.unit.replay.backends import LogFactory, run_async
from tests.unit.replay.fakes import FakeSink
from tests.unit.replay.test_cursor import cursor_for, fill


@run_async
async def test_a_replay_from_memory_lets_other_tasks_run_between_batches(
    logs: LogFactory,
) -> None:
    clock = VirtualClock()
    log = await logs.open(clock)
    await fill(log, 3500)  # recent and durable: the real log serves them from its tail
    sink = FakeSink(clock=clock)
    seen: list[int] = []
    done = asyncio.Event()

    async def probe() -> None:
        """Another task of the loop: what has been delivered each time it gets a turn."""
        while not done.is_set():
            seen.append(len(sink.seqs))
            await asyncio.sleep(0)

    watcher = asyncio.get_running_loop().create_task(probe())
    cursor = cursor_for(log, sink, "0", clock=clock, batch_count=1000)
    cursor.start()
    try:
        await turns_until(lambda: sink.count("caught_up") == 1)
    finally:
        done.set()
        await watcher
        cursor.close()
    assert sink.seqs == list(range(1, 3501))
    between = sorted({n for n in seen if 0 < n < 3500})
    # the probe ran after each batch of 1,000, not only before and after all of them
    assert between[:3] == [1000, 2000, 3000]
