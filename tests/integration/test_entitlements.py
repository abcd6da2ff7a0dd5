"""Websocket logons against <Users>: auth failure, name in use across users, and the
Read/Write topic entitlements (not entitled), each tested both ways."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from spool.server.client import Client
from spool.server.protocol import errors
from tests.support.server import SpoolProcess, config_xml

FEED = "feed-token-0123456789"
AUDIT = "audit-token-0123456789"
OPS = "ops-token-0123456789ab"
USERS = (
    f"<User><Name>ops</Name><Token>{OPS}</Token><Write>.*</Write></User>"
    f"<User><Name>feed</Name><Token>{FEED}</Token>"
    "<Read>^orders$</Read><Write>^orders$</Write></User>"
    f"<User><Name>audit</Name><Token>{AUDIT}</Token><Read>^orders$</Read>"
    "<Read>^audit/</Read></User>"
)


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SpoolProcess]:
    work = tmp_path_factory.mktemp("entitled")
    proc = SpoolProcess(work, config_xml(work / "data", users=USERS))
    proc.start()
    yield proc
    proc.stop()


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_auth_failure_for_wrong_or_missing_credentials(secured: SpoolProcess) -> None:
    async def scenario() -> None:
        for user, secret in (("feed", "wrong-token-0123456789"), ("nobody", FEED), (None, None)):
            c = Client(secured.ws_url, f"bad-{user}", user_id=user, password=secret)
            with pytest.raises(errors.AuthFailure):
                await c.connect()
            await c.close()

    run(scenario())


def test_write_entitlement_both_ways(secured: SpoolProcess) -> None:
    async def scenario() -> None:
        async with (
            Client(secured.ws_url, "w-feed", user_id="feed", password=FEED) as feed,
            Client(secured.ws_url, "w-audit", user_id="audit", password=AUDIT) as audit,
        ):
            await feed.publish_acked("orders", {"ok": 1})  # allowed
            with pytest.raises(errors.NotEntitled):
                await feed.publish_acked("audit/x", {"no": 1})
            with pytest.raises(errors.NotEntitled):
                await audit.publish_acked("orders", {"no": 1})  # audit may only read

    run(scenario())


def test_read_entitlement_both_ways_including_regex_and_replay(secured: SpoolProcess) -> None:
    async def scenario() -> None:
        async with (
            Client(secured.ws_url, "r-feed", user_id="feed", password=FEED) as feed,
            Client(secured.ws_url, "r-audit", user_id="audit", password=AUDIT) as audit,
        ):
            with pytest.raises(errors.NotEntitled):
                await feed.subscribe("audit/login")
            ok = await audit.subscribe("orders")
            # a regex subscription sees only the topics the user may read
            rx = await feed.subscribe("^(orders|audit/)", sub_id="rx")
            replay = await feed.subscribe("^(orders|audit/)", bookmark="0", sub_id="rp")
            async with Client(secured.ws_url, "r-ops", user_id="ops", password=OPS) as ops:
                await ops.publish_acked("audit/login", {"secret": 1})  # feed may not read
            await feed.publish_acked("orders", {"n": 1})
            assert (await ok.get(5)).topic == "orders"
            assert (await rx.get(5)).topic == "orders"
            assert (await replay.get(5)).topic == "orders"
            await feed.flush()
            assert rx.queue.empty()

    run(scenario())


def test_name_in_use_by_another_user_refuses_the_newcomer(secured: SpoolProcess) -> None:
    async def scenario() -> None:
        first = Client(secured.ws_url, "shared-name", user_id="feed", password=FEED)
        await first.connect()
        intruder = Client(secured.ws_url, "shared-name", user_id="audit", password=AUDIT)
        with pytest.raises(errors.NameInUse):
            await intruder.connect()
        await intruder.close()
        # the first connection is untouched
        await first.publish_acked("orders", {"still": "here"})
        assert not first.closed.is_set()
        await first.close()

    run(scenario())
