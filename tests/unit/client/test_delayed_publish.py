"""Delayed publishes from the Python clients (docs/python-client.md, delayed delivery): the
``o`` header :func:`publish_options` writes, what ``Client.publish`` refuses, and, against
a broker on a virtual clock (the in-process engine), that a delayed publish of the client
and of the HA client (from its store, also a file store reopened) is delivered at its time
and not before."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import orjson
import pytest

from spool.server.client import (
    Client,
    DefaultServerChooser,
    FilePublishStore,
    FixedDelayStrategy,
    HAClient,
    MemoryPublishStore,
    Subscription,
)
from spool.server.client.state import SessionState, publish_options
from spool.server.protocol.frame import parse_frame
from spool.server.protocol.options import parse_publish_options
from tests.support.engine import EngineHarness, scenario

URL = "ws://engine/amps/json"


# -- the option text ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("after", "text"),
    [
        (30, "deliver_after=30s"),
        (2.0, "deliver_after=2s"),
        (0.5, "deliver_after=500ms"),
        (1.5, "deliver_after=1500ms"),
        (0.1, "deliver_after=100ms"),
        (0.0005, "deliver_after=0.0005s"),
        (timedelta(minutes=1.5), "deliver_after=90s"),
        (timedelta(milliseconds=2500), "deliver_after=2500ms"),
        (timedelta(microseconds=1500), "deliver_after=0.0015s"),
    ],
)
def test_deliver_after_is_written_exactly_in_the_broker_s_grammar(
    after: float | timedelta, text: str
) -> None:
    assert publish_options(deliver_after=after) == text
    seconds = after.total_seconds() if isinstance(after, timedelta) else after
    parsed = parse_publish_options(text).deliver_after_s
    assert parsed is not None and parsed == pytest.approx(seconds, rel=1e-15)


def test_deliver_at_is_written_in_utc_to_the_microsecond() -> None:
    at = datetime(2030, 1, 2, 3, 4, 5, 678901, tzinfo=timezone(timedelta(hours=2)))
    text = publish_options(deliver_at=at)
    assert text == "deliver_at=20300102T010405.678901Z"
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    assert parse_publish_options(text).deliver_at_us == (at - epoch) // timedelta(microseconds=1)
    assert publish_options() is None


@pytest.mark.parametrize(
    ("kwargs", "why"),
    [
        ({"deliver_at": datetime(2030, 1, 1)}, "naive datetime"),
        ({"deliver_after": 0}, "> 0"),
        ({"deliver_after": -1.5}, "> 0"),
        ({"deliver_after": float("nan")}, "> 0"),
        ({"deliver_after": float("inf")}, "> 0"),
        ({"deliver_after": timedelta(0)}, "greater than zero"),
        ({"deliver_after": True}, "not bool"),
        ({"deliver_after": "30s"}, "not str"),
        ({"deliver_at": "20300101T000000Z"}, "must be a datetime"),
        ({"deliver_at": datetime.now(UTC), "deliver_after": 1}, "contradict"),
    ],
)
def test_the_client_refuses_bad_delivery_options_and_queues_nothing(
    kwargs: dict[str, Any], why: str
) -> None:
    client = Client(URL, "pub")
    with pytest.raises(ValueError, match=why):
        client.publish("t", b"{}", **kwargs)
    assert client.seq == 0


def test_a_delayed_publish_takes_the_keyed_path_with_its_options() -> None:
    state: SessionState[object] = SessionState("pub")
    state.publish_keyed("t", b"{}", options="deliver_after=30s", persisted=True)
    (message,) = parse_frame(state.data_to_send()).messages
    assert message.header == {"c": "publish", "t": "t", "s": 1, "o": "deliver_after=30s",
                              "a": "persisted", "l": 2}  # fmt: skip


def test_options_text_and_the_typed_options_are_not_given_together() -> None:
    with pytest.raises(ValueError, match="not both"):
        Client(URL, "pub").publish("t", b"{}", deliver_after=1, options="deliver_after=1s")


def test_the_ha_client_refuses_bad_delivery_options_before_storing() -> None:
    store = MemoryPublishStore()
    client = HAClient("pub", publish_store=store, chooser=DefaultServerChooser([URL]))
    with pytest.raises(ValueError, match="naive"):
        client.publish("t", b"{}", deliver_at=datetime(2030, 1, 1))
    assert store.unpersisted_count() == 0


# -- against a broker ---------------------------------------------------------------------


def moment(h: EngineHarness, seconds: float) -> datetime:
    """The broker's (virtual) now plus ``seconds``, as an aware datetime."""
    return datetime.fromtimestamp(h.clock.time() + seconds, UTC)


class Receiver:
    """A client subscribed to ``t``: :attr:`got` the ids of what it received, in order."""

    def __init__(self, h: EngineHarness) -> None:
        self.client = Client(URL, "sub", connector=h.client_connector)
        self.got: list[int] = []
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> Receiver:
        await self.client.connect()
        sub = await self.client.subscribe("t")
        self._task = asyncio.get_running_loop().create_task(self._collect(sub))
        return self

    async def _collect(self, sub: Subscription) -> None:
        async for m in sub:
            self.got.append(orjson.loads(m.data)["id"])

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.client.close()


async def advance(h: EngineHarness, seconds: float) -> None:
    await h.clock.advance(seconds)
    await h.settle()
    await asyncio.sleep(0.01)  # the client's reader hands the deliveries on


@scenario
async def test_a_delayed_publish_is_delivered_at_its_time_and_not_before(tmp_path: Path) -> None:
    async with EngineHarness(tmp_path, journal_size="1MB") as h:
        sub = await Receiver(h).start()
        got = sub.got
        pub = Client(URL, "pub", connector=h.client_connector)
        await pub.connect()
        pub.publish("t", {"id": 1}, deliver_after=30)
        pub.publish("t", {"id": 2}, deliver_at=moment(h, 10))
        pub.publish("t", {"id": 3}, deliver_after=timedelta(milliseconds=20_500))
        pub.publish("t", {"id": 4})
        await h.until(lambda: got == [4])  # the broker took the three before it
        await advance(h, 9.99)
        assert got == [4]
        await advance(h, 0.02)
        await h.until(lambda: got == [4, 2])
        await advance(h, 10.5)
        await h.until(lambda: got == [4, 2, 3])
        await advance(h, 9.47)
        assert got == [4, 2, 3]
        await advance(h, 0.05)
        await h.until(lambda: got == [4, 2, 3, 1])
        await pub.close()
        await sub.close()


@scenario
async def test_the_ha_client_stores_a_delayed_publish_with_its_options_and_sends_them(
    tmp_path: Path,
) -> None:
    """Published before any connection, the message waits in a file store (reopened by a
    second client, as after a restart) and is sent from it, options and all."""
    path = tmp_path / "pub.store"
    async with EngineHarness(tmp_path, journal_size="1MB") as h:
        sub = await Receiver(h).start()
        got = sub.got
        at = moment(h, 10)
        first = FilePublishStore(path, fsync=False)
        await first.open()
        offline = HAClient("ha-pub", publish_store=first, chooser=DefaultServerChooser([URL]))
        offline.publish("t", {"id": 1}, deliver_at=at)
        offline.publish("t", {"id": 2}, deliver_after=5)
        await first.close()

        store = FilePublishStore(path, fsync=False)
        await store.open()
        assert [e.extra for e in store.entries_after(0)] == [
            {"o": "deliver_at=" + at.strftime("%Y%m%dT%H%M%S.%fZ")},
            {"o": "deliver_after=5s"},
        ]
        client = HAClient(
            "ha-pub", publish_store=store, chooser=DefaultServerChooser([URL]),
            delay=FixedDelayStrategy(0.5, clock=h.clock.monotonic),
            connector=h.client_connector, sleep=h.clock.sleep,
        )  # fmt: skip
        await client.connect_and_logon()
        await h.commit()
        await h.until(lambda: store.unpersisted_count() == 0)
        await advance(h, 4.9)
        assert got == []
        await advance(h, 0.2)
        await h.until(lambda: got == [2])
        await advance(h, 4.8)
        assert got == [2]
        await advance(h, 0.2)
        await h.until(lambda: got == [2, 1])
        await client.close()
        await sub.close()
