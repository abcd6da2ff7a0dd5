"""An on-publish action derives one message per matching source across SIGKILL.

A publisher sends 5,000 messages with persisted acks, half of them matching the action's
filter, while the broker is killed with SIGKILL part way (at a seeded point); after the
restart it resends everything after its last acked sequence. Sources the action had not
run, or whose derived messages were not durable, when the process died are run again by
the start-up catch-up from the checkpoint; what a re-run derives again is a duplicate the
log drops. At the end the log holds exactly one derived message per matching source, and
none for the others.
"""

from __future__ import annotations

import asyncio
import random
import signal
import threading

import orjson
import pytest

from spool.server.bookmarks import derived_pub_hash, pub_hash
from spool.server.client import Client, Disconnected
from tests.conftest import ServerFactory
from tests.support.server import read_records

pytestmark = [pytest.mark.faults, pytest.mark.slow]

TOTAL = 5_000
BATCH = 250
PUBLISHER = "trigger-publisher"
ACTIONS = """
<Action><Name>hot</Name>
  <On><Module>amps-action-on-publish-message</Module><Options>
    <Topic>orders</Topic><Filter>/hot = true</Filter></Options></On>
  <Do><Module>amps-action-do-publish-message</Module><Options>
    <Topic>derived</Topic><Data>{"src":{{AMPS_DATA}}}</Data></Options></Do>
</Action>"""


def body(n: int) -> bytes:
    return orjson.dumps({"n": n, "hot": n % 2 == 0})


def test_sigkill_while_publishing_leaves_one_derived_message_per_matching_source(
    spool_server_factory: ServerFactory,
) -> None:
    rng = random.Random(20261201)
    proc = spool_server_factory(name="a", journal_size="8MB", actions=ACTIONS)
    kill_at = rng.randrange(TOTAL // 5, TOTAL * 3 // 5)
    acked = 0
    killed: list[int] = []
    lock = threading.Lock()

    def killer(stop: threading.Event) -> None:
        while acked < kill_at:
            if stop.wait(0.005):
                return
        with lock:
            killed.append(acked)
            proc.kill()
            proc.start()

    async def publish_until_done() -> None:
        nonlocal acked
        while acked < TOTAL:
            with lock:
                url = proc.ws_url
            client = Client(url, PUBLISHER, reused_seq="allow")  # resends after a kill
            try:
                await client.connect(timeout=5)
                nxt = acked + 1
                while nxt <= TOTAL:
                    end = min(TOTAL, nxt + BATCH - 1)
                    for s in range(nxt, end + 1):
                        client.publish("orders", body(s), seq=s, persisted=True)
                    await client.wait_persisted(end, timeout=10)
                    acked = max(acked, client.persisted_seq)
                    nxt = end + 1
            except (Disconnected, OSError, TimeoutError):
                await asyncio.sleep(0.05)
            finally:
                acked = max(acked, client.persisted_seq)
                await client.close()

    stop = threading.Event()
    t = threading.Thread(target=killer, args=(stop,), daemon=True)
    t.start()
    try:
        asyncio.run(publish_until_done())
    finally:
        stop.set()
        t.join(30)
        # graceful: the action runs what its lane holds
        assert proc.stop() in (0, -signal.SIGTERM)
    assert killed and killed[0] < TOTAL, "the kill landed while the publisher was working"
    records = asyncio.run(read_records(proc.config_path))
    source = pub_hash(PUBLISHER)
    sources = [s for h, s, _ in records if h == source]
    assert sources == list(range(1, TOTAL + 1))
    derived_id = derived_pub_hash("hot", 1, source)
    derived = [(s, orjson.loads(b)) for h, s, b in records if h == derived_id]
    # one per matching source, with the source's sequence, in order; none for the others
    assert [s for s, _ in derived] == list(range(2, TOTAL + 1, 2))
    assert all(doc == {"src": {"n": s, "hot": True}} for s, doc in derived)
