"""Every refusal of a publish names its sequence: the failure ack carries the publish's
own ``s`` whichever check refused it (docs/protocol.md "Acks"), so a client waiting for
that sequence to persist learns at once that it will not."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.support.engine import EngineHarness
from tests.support.server import sow_topic


def test_a_publish_before_logon_and_a_delta_publish_to_a_plain_topic_carry_their_s(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with EngineHarness(tmp_path, sow=sow_topic("orders", "/id")) as h:
            anonymous = h.connect()
            anonymous.send(({"c": "publish", "t": "t", "s": 7, "cid": "early", "a": "processed"},
                            b'{"id":1}'))  # fmt: skip
            await h.until(lambda: anonymous.acks("processed"))
            (ack,) = anonymous.acks("processed")
            assert (ack["status"], ack["reason"], ack.get("s")) == ("failure", "logon required", 7)

            c = await h.logon("c")
            c.send(({"c": "delta_publish", "t": "plain", "s": 3, "cid": "delta", "a": "processed"},
                    b'{"id":1}'))  # fmt: skip
            await h.until(lambda: c.acks("processed"))
            (ack,) = c.acks("processed")
            assert (ack["status"], ack["reason"], ack.get("s")) == ("failure", "invalid topic", 3)

    asyncio.run(scenario())
