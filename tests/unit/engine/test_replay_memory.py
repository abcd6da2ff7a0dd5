"""What replays cost: one connection's replays hold at most its buffer's limit in memory,
however many it runs, while it reads nothing; the memory returns when it goes."""

from __future__ import annotations

import asyncio
import gc
import tracemalloc
from pathlib import Path

import orjson

from tests.support.engine import EngineHarness

LIMIT = 2 << 20  # SlowClientBufferLimit
RECORD = 20_000
RECORDS = 600  # a 12 MB log: six times the limit
REPLAYS = 20


def _held() -> int:
    gc.collect()
    return tracemalloc.get_traced_memory()[0]


def test_many_replays_on_a_connection_that_reads_nothing_hold_at_most_its_limit(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with EngineHarness(
            tmp_path,
            tuning="<SlowClientBufferLimit>2MB</SlowClientBufferLimit>",
            transport_extra="<MaxMessageSize>256KB</MaxMessageSize>",
        ) as h:
            pub = await h.logon("pub")
            body = orjson.dumps({"pad": "x" * RECORD})
            for _ in range(RECORDS):
                pub.send(({"c": "publish", "t": "public.big"}, body))
            await h.commit()
            del body
            tracemalloc.start()
            try:
                before = _held()
                c = await h.logon("alice")
                c.transport.stop_reading()
                c.send(
                    *(
                        ({"c": "subscribe", "t": "public.big", "sub_id": f"s{i}", "bm": "0"}, b"")
                        for i in range(REPLAYS)
                    )
                )
                # every replay has read what it could: each waits for the connection's
                # turn or for room in its buffer, which a reader that takes nothing never
                # makes
                await h.settle()
                assert c.session.traffic.msgs_out > 0, "no replay delivered anything"
                assert c.session.queue_depth <= LIMIT
                held = _held() - before
                assert held <= LIMIT, f"{REPLAYS} replays hold {held} bytes"
                await c.session.close("done")
                await h.settle()
                c.transport.frames.clear()  # what the test's client kept
                assert _held() - before <= LIMIT // 4
            finally:
                tracemalloc.stop()

    asyncio.run(scenario())
