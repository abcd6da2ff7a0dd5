"""One connection's frame yields the event loop when its turn's budget is spent, and its
commands keep their order."""

from __future__ import annotations

import asyncio
from pathlib import Path

from spool.server.dispatch import Dispatcher
from tests.support.engine import EngineHarness, FakeClient


def _no_budget(h: EngineHarness, c: FakeClient) -> None:
    """Give ``c`` a dispatcher whose turn ends after every command."""
    b = h.broker
    c.session.handler = Dispatcher(
        c.session, b.pipeline, b.commands, b.lifecycle, b.events, h.clock, turn_budget=0.0
    )


def test_a_frame_past_its_budget_lets_others_in_and_keeps_its_order(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with EngineHarness(tmp_path) as h:
            a = await h.logon("a")
            other = await h.logon("other")
            _no_budget(h, a)
            a.send(
                ({"c": "subscribe", "t": "t", "sub_id": "s1", "cid": "1", "a": "processed"}, b""),
                ({"c": "publish", "t": "t", "cid": "2", "a": "processed"}, b'{"n":1}'),
                ({"c": "publish", "t": "t", "cid": "3", "a": "processed"}, b'{"n":2}'),
                ({"c": "unsubscribe", "sub_id": "s1", "cid": "4", "a": "processed"}, b""),
                ({"c": "publish", "t": "t", "cid": "5", "a": "processed"}, b'{"n":3}'),
            )
            # the receive returned after its first command: the rest waits for a turn
            assert "s1" in a.session.subs
            assert h.last_seq == 0
            other.send(({"c": "publish", "t": "t"}, b'{"from":"other"}'))
            assert h.last_seq == 1  # the other connection went first
            await h.until(lambda: len(a.acks("processed")) == 5)
            assert [x["cid"] for x in a.acks("processed")] == ["1", "2", "3", "4", "5"]
            assert all(x["status"] == "success" for x in a.acks("processed"))
            # in order: both publishes before the unsubscribe reached s1, the last one not
            assert [b for _, b in a.deliveries("s1")] == [b'{"from":"other"}', b'{"n":1}',
                                                         b'{"n":2}']  # fmt: skip
            assert h.last_seq == 4

    asyncio.run(scenario())


def test_frames_that_arrive_meanwhile_wait_behind_the_backlog(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with EngineHarness(tmp_path) as h:
            a = await h.logon("a")
            _no_budget(h, a)
            for n in range(3):
                a.send(
                    *(
                        (
                            {"c": "publish", "t": f"t{k}", "cid": f"{n}.{k}", "a": "processed"},
                            b"{}",
                        )
                        for k in range(4)
                    )
                )
            await h.until(lambda: len(a.acks("processed")) == 12)
            assert [x["cid"] for x in a.acks("processed")] == [
                f"{n}.{k}" for n in range(3) for k in range(4)
            ]

    asyncio.run(scenario())
