"""Filters a client sends cannot hold the event loop: long ones compile off it, in order."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from spool.server.dispatch import INLINE_FILTER_MAX
from spool.server.expr import is_known
from tests.support.engine import EngineHarness


def _long_filter(n: int = 5000) -> str:
    return "/v IN (" + ",".join(str(i) for i in range(n)) + ")"


def test_a_long_filter_compiles_off_the_loop_and_its_command_keeps_its_place(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with EngineHarness(tmp_path) as h:
            c = await h.logon("sub")
            text = _long_filter()
            assert len(text) > INLINE_FILTER_MAX
            c.send(
                ({"c": "subscribe", "t": "t", "sub_id": "s", "f": text, "a": "processed",
                  "cid": "1"}, b""),
                ({"c": "unsubscribe", "sub_id": "s", "a": "processed", "cid": "2"}, b""),
                ({"c": "subscribe", "t": "t", "sub_id": "s", "f": "/v = 1",
                  "a": "processed", "cid": "3"}, b""),
            )  # fmt: skip
            # nothing ran yet: the subscribe waits for its filter, the rest behind it
            assert not is_known(text, clock=h.clock)
            assert "s" not in c.session.subs and not c.acks()
            await h.until(lambda: len(c.acks("processed")) == 3)
            assert [a["cid"] for a in c.acks("processed")] == ["1", "2", "3"]
            assert all(a["status"] == "success" for a in c.acks("processed"))
            sub = c.session.subs["s"]
            assert sub.filter is not None and sub.filter.text == "/v = 1"
            assert is_known(text, clock=h.clock)
            assert any(t.name.startswith("filter-compile") for t in threading.enumerate())

    asyncio.run(scenario())


def test_a_long_bad_filter_is_refused_and_the_refusal_is_remembered(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with EngineHarness(tmp_path) as h:
            c = await h.logon("sub")
            text = _long_filter() + " AND"
            for cid in ("1", "2"):
                c.send(
                    ({"c": "subscribe", "t": "t", "sub_id": "s" + cid, "f": text,
                      "a": "processed", "cid": cid}, b""),
                )  # fmt: skip
                await h.until(lambda cid=cid: any(a["cid"] == cid for a in c.acks()))
            failures = c.acks("processed")
            assert [(a["cid"], a["status"], a["reason"]) for a in failures] == [
                ("1", "failure", "bad filter"),
                ("2", "failure", "bad filter"),
            ]
            assert failures[0].get("detail") == failures[1].get("detail")
            assert not c.session.subs
            # the second one never went to the compiling thread: the cache knew it
            assert is_known(text, clock=h.clock)

    asyncio.run(scenario())


def test_the_issue_filter_is_answered_at_once_on_the_loop(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with EngineHarness(tmp_path) as h:
            c = await h.logon("sub")
            c.send(
                ({"c": "subscribe", "t": "public.x", "sub_id": "r1", "a": "processed",
                  "cid": "1",
                  "f": "REGEXP_MATCH('aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!', '^(a+)+$')"}, b""),
                ({"c": "subscribe", "t": "public.x", "sub_id": "r2", "a": "processed",
                  "cid": "2", "f": "/v LIKE '(a)\\\\1'"}, b""),
            )  # fmt: skip
            # both answered in the call that received the frame (sent by the writer task)
            assert "r1" in c.session.subs and "r2" not in c.session.subs
            await h.until(lambda: len(c.acks("processed")) == 2)
            acks = {a["cid"]: a for a in c.acks("processed")}
            assert acks["1"]["status"] == "success"
            assert acks["2"]["status"] == "failure" and acks["2"]["reason"] == "bad filter"
            assert "backreference" in acks["2"]["detail"]

    asyncio.run(scenario())
