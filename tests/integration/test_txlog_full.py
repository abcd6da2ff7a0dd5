"""`txlog full`: a publish that the transaction log cannot take fails alone; nothing else is hurt."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from spool.server.client import Client
from spool.server.protocol import errors


def test_txlog_full_fails_publishes_and_keeps_serving(spool_server_factory: Any) -> None:
    proc = spool_server_factory(
        journal_size="1MB",
        txlog_extra="<PreallocatedJournalFiles>1</PreallocatedJournalFiles><MaxSize>2MB</MaxSize>",
    )

    async def scenario() -> None:
        async with Client(proc.ws_url, "filler") as c, Client(proc.ws_url, "reader") as r:
            sub = await r.subscribe("orders", bookmark="0")
            body = b'{"pad":"' + b"x" * 2000 + b'"}'
            stored = 0
            with pytest.raises(errors.TxlogFull):
                for _ in range(5000):
                    await c.publish_acked("orders", body)
                    stored += 1
            assert stored > 100
            # what was stored is intact and replayable; the connection still works
            for _ in range(stored):
                m = await sub.get(10)
                assert m.data == body
            await c.flush()
            with pytest.raises(errors.TxlogFull):
                await c.publish_acked("orders", body)

    asyncio.run(scenario())
    assert "txlog" in proc.log()
