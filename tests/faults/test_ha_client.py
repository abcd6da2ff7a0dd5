"""The Python HA client with real broker processes and SIGKILL.

- a publisher with a FilePublishStore sends 100,000 messages while its broker is SIGKILLed
  and restarted three times: the log holds each exactly once, in order;
- a publisher process with a FilePublishStore is SIGKILLed and restarted three times: it
  resumes from its store, and the log holds each message once, in order;
- a bookmark subscriber process with a FileBookmarkStore is SIGKILLed twice while its
  broker is SIGKILLed three times, the workload gated on that schedule: it processes each
  message once, in order, except at most the one in process at each of its own kills;
- failover between two independent brokers in the chooser;
- a broker frozen with SIGSTOP is noticed by the heartbeat within two intervals;
- a consumer slower than the heartbeat window stays connected;
- a publisher and a subscriber process whose stores fill their disk wait, and carry on
  with nothing lost or repeated once there is room.
"""

from __future__ import annotations

import asyncio
import functools
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from spool.server.bookmarks import pub_hash
from spool.server.client import (
    ConnectionState,
    ConnectionStateEvent,
    DefaultServerChooser,
    FilePublishStore,
    FixedDelayStrategy,
    HAClient,
    MemoryBookmarkStore,
)
from tests.support.disk import fill, tmpfs
from tests.support.haclient import fixed_port_server
from tests.support.server import ROOT, SpoolProcess, read_records
from tests.support.wait import wait_until

pytestmark = [pytest.mark.faults]


def _restart(proc: SpoolProcess) -> None:
    proc.kill()
    proc.start()


@pytest.mark.slow
def test_publisher_with_file_store_loses_nothing_across_three_broker_kills(tmp_path: Path) -> None:
    total, batch, kills = 100_000, 2_000, 3
    proc = fixed_port_server(tmp_path / "srv", journal_size="16MB").start()
    url = proc.ws_url
    kill_points = [total // 5, total // 2, total * 4 // 5]
    states: list[ConnectionState] = []
    killed_at: list[int] = []

    async def run() -> None:
        client = HAClient(
            "ha-publisher",
            publish_store=FilePublishStore(tmp_path / "pub.store"),
            chooser=DefaultServerChooser([url]),
            delay=FixedDelayStrategy(0.05),
            connect_timeout=5,
        )
        client.add_connection_state_listener(lambda e: states.append(e.state))
        await client.connect_and_logon()
        points = list(kill_points)
        for start in range(1, total + 1, batch):
            for n in range(start, min(total, start + batch - 1) + 1):
                client.publish("orders", b'{"n":%d}' % n)
            if points and start + batch > points[0]:
                points.pop(0)
                # the broker dies with publishes in flight (sent, some not yet acked)
                await asyncio.sleep(0)
                killed_at.append(client.unpersisted_count())
                await asyncio.to_thread(_restart, proc)
            while client.unpersisted_count() > 10 * batch:
                await client.publish_flush(60)
        await client.publish_flush(120)
        assert client.unpersisted_count() == 0
        await client.close()

    try:
        asyncio.run(run())
    finally:
        proc.stop()
    assert len(killed_at) == kills
    assert states.count(ConnectionState.DISCONNECTED) >= kills, states
    assert any(k > 0 for k in killed_at), killed_at  # kills landed with publishes pending
    records = asyncio.run(read_records(proc.config_path))
    mine = [(s, body) for h, s, body in records if h == pub_hash("ha-publisher")]
    assert [s for s, _ in mine] == list(range(1, total + 1)), "each once, in order"
    assert all(body == b'{"n":%d}' % s for s, body in mine)


def test_publisher_process_killed_three_times_resumes_from_its_file_store(tmp_path: Path) -> None:
    """The workload is gated on the kills, not on who is faster: the publisher may go a
    little past each kill's point (the kill lands mid-stream, or while it waits there),
    never to the end before the last kill."""
    total = 40_000
    rng = random.Random(16)
    proc = fixed_port_server(tmp_path / "srv").start()
    store, progress, log = tmp_path / "pub.store", tmp_path / "progress", tmp_path / "pub.log"
    gate = tmp_path / "gate"
    points = (total // 5, total * 2 // 5, total * 3 // 5)
    margin = total // 20

    def publisher() -> subprocess.Popen[bytes]:
        with log.open("ab") as err:
            return subprocess.Popen(
                [sys.executable, "-m", "tests.support.ha_publisher", proc.ws_url, str(store),
                 str(total), str(progress), str(gate)],
                cwd=ROOT, stderr=err, env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )  # fmt: skip

    def done() -> int:
        text = progress.read_text() if progress.exists() else ""
        return int(text) if text.strip() else 0

    pub = publisher()
    try:
        for point in points:
            gate.write_text(str(point + margin))
            wait_until(functools.partial(_progressed, done, point, pub), 120,
                       message=f"{point} published")  # fmt: skip
            assert pub.poll() is None, "the publisher stopped before its kill\n" + log.read_text()
            time.sleep(rng.uniform(0.0, 0.03))  # seeded: somewhere in the next few batches
            pub.send_signal(signal.SIGKILL)  # anywhere: mid-write of the store included
            pub.wait()
            pub = publisher()
        gate.write_text(str(total))
        assert pub.wait(120) == 0, log.read_text()
    finally:
        if pub.poll() is None:
            pub.kill()
        proc.stop()
    assert log.read_text().count("resuming after") == 4
    records = asyncio.run(read_records(proc.config_path))
    mine = [(s, body) for h, s, body in records if h == pub_hash("ha-crash-publisher")]
    assert [s for s, _ in mine] == list(range(1, total + 1)), "each once, in order"
    assert all(body == b'{"n":%d}' % s for s, body in mine)


def _subscriber(
    url: str, store: Path, output: Path, last: int, log: Path, delay: float
) -> subprocess.Popen[bytes]:
    with log.open("ab") as err:  # the child keeps its own descriptor
        return subprocess.Popen(
            [sys.executable, "-m", "tests.support.ha_subscriber", url, str(store), str(output),
             str(last), str(delay)],
            cwd=ROOT,
            stderr=err,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )  # fmt: skip


def _progressed(progress: Callable[[], int], point: int, proc: subprocess.Popen[bytes]) -> bool:
    """The process got to ``point``, or ended (the caller then says it ended too soon)."""
    return progress() >= point or proc.poll() is not None


def _lines(output: Path) -> int:
    return output.read_bytes().count(b"\n") if output.exists() else 0


def _kills_of_a_bookmark_subscriber(tmp_path: Path, total: int, faults: str) -> None:
    """A paced feeder and a slower subscriber process across a schedule of faults
    (``faults``: one letter per fault, ``s`` kills the subscriber, ``b`` the broker).

    The workload is gated on the schedule, not on who is faster: the feeder publishes
    up to a little past the next fault's point, then waits until that fault happened, so
    the subscriber can neither finish nor run dry before it. Each message must be
    processed once, in order, except the one in process at each of the subscriber's
    kills (processed, killed before its discard reached the store): at most one repeat
    per kill, right after itself."""
    proc = fixed_port_server(tmp_path / "srv").start()
    url = proc.ws_url
    n_faults = len(faults)
    points = [total * (i + 1) // (n_faults + 1) for i in range(n_faults)]
    margin = total // (4 * (n_faults + 1))
    released = [threading.Event() for _ in faults]
    feeder_error: list[BaseException] = []

    async def feed() -> None:
        async with HAClient(
            "ha-feeder", publish_store=FilePublishStore(tmp_path / "pub.store"),
            chooser=DefaultServerChooser([url]), delay=FixedDelayStrategy(0.05),
        ) as c:  # fmt: skip
            n = 0
            for i, stop in enumerate([*(p + margin for p in points), total]):
                while n < stop:
                    c.publish("orders", b'{"n":%d}' % n)
                    n += 1
                    if n % 200 == 0:
                        await asyncio.sleep(0.01)
                if i < n_faults:
                    while not released[i].is_set():  # the schedule gates the workload
                        await asyncio.sleep(0.01)
            await c.publish_flush(120)

    def feeder_main() -> None:
        try:
            asyncio.run(feed())
        except BaseException as exc:  # reported by the test
            feeder_error.append(exc)

    feeder = threading.Thread(target=feeder_main, daemon=True)
    feeder.start()
    store, output, log = tmp_path / "bm.store", tmp_path / "out.txt", tmp_path / "sub.log"
    delay = 0.0002  # per message: slower than the feeder
    sub = _subscriber(url, store, output, total - 1, log, delay)
    events: list[str] = []
    try:
        for fault, point, gate in zip(faults, points, released, strict=True):
            wait_until(functools.partial(_progressed, functools.partial(_lines, output), point, sub),
                       180, message=f"{point} processed")  # fmt: skip
            assert sub.poll() is None, "the subscriber stopped before its fault\n" + log.read_text()
            if fault == "s":
                sub.send_signal(signal.SIGKILL)
                sub.wait()
                events.append(f"subscriber killed at {_lines(output)}")
                sub = _subscriber(url, store, output, total - 1, log, delay)
            else:
                _restart(proc)
                events.append(f"broker killed at {_lines(output)}")
            gate.set()
        assert sub.wait(180) == 0, log.read_text()
        feeder.join(120)
        assert not feeder.is_alive() and not feeder_error, feeder_error
    finally:
        for gate in released:
            gate.set()
        if sub.poll() is None:
            sub.kill()
        proc.stop()
    numbers = [int(line.split()[0]) for line in output.read_text().splitlines()]
    repeats = [i for i in range(1, len(numbers)) if numbers[i] == numbers[i - 1]]
    once = [n for i, n in enumerate(numbers) if i not in repeats]
    assert once == list(range(total)), (events, _first_mismatch(once))
    assert len(repeats) <= faults.count("s"), (events, [numbers[i] for i in repeats])


@pytest.mark.slow
def test_bookmark_subscriber_processes_each_message_once_across_its_kills_and_the_brokers(
    tmp_path: Path,
) -> None:
    _kills_of_a_bookmark_subscriber(tmp_path, 30_000, "sbsbb")


def test_bookmark_subscriber_killed_once_with_its_broker_repeats_at_most_one(
    tmp_path: Path,
) -> None:
    _kills_of_a_bookmark_subscriber(tmp_path, 4_000, "sb")


def _first_mismatch(numbers: list[int]) -> tuple[int, list[int]] | None:
    for i, n in enumerate(numbers):
        if n != i:
            return i, numbers[max(0, i - 3) : i + 3]
    return None


def test_failover_between_two_independent_brokers(tmp_path: Path) -> None:
    a = fixed_port_server(tmp_path / "a", name="a").start()
    b = fixed_port_server(tmp_path / "b", name="b").start()
    events: list[ConnectionStateEvent] = []

    async def run() -> list[int]:
        client = HAClient(
            "ha-failover",
            publish_store=FilePublishStore(tmp_path / "pub.store"),
            bookmark_store=MemoryBookmarkStore(),
            chooser=DefaultServerChooser([a.ws_url, b.ws_url]),
            delay=FixedDelayStrategy(0.05),
            connect_timeout=3,
        )
        client.add_connection_state_listener(events.append)
        await client.connect_and_logon()
        assert client.uri == a.ws_url
        # B has never heard of A's bookmarks: replay B's log from its start
        sub = await client.subscribe("orders", bookmark="0", options="bookmark_not_found=epoch")
        for n in range(500):
            client.publish("orders", {"n": n})
        await client.publish_flush(30)
        seen: list[int] = []
        while len(seen) < 500:
            seen.append((await sub.get(30)).json()["n"])
        a.kill()
        for n in range(500, 1000):
            client.publish("orders", {"n": n})
        await client.publish_flush(30)
        assert client.uri == b.ws_url
        while seen[-1] != 999:
            seen.append((await sub.get(30)).json()["n"])
        await client.close()
        return seen

    try:
        seen = asyncio.run(run())
    finally:
        a.stop()
        b.stop()
    failed_over = [e for e in events if e.state is ConnectionState.FAILED_OVER]
    assert [e.uri for e in failed_over] == [b.ws_url]
    assert seen == list(range(1000)), "the iterator went on at B: no gap, no duplicate"
    records = asyncio.run(read_records(b.config_path))
    at_b = [s for h, s, _ in records if h == pub_hash("ha-failover")]
    assert at_b == list(range(501, 1001)), "B got what was published after the failover"


def test_heartbeat_notices_a_frozen_broker_within_two_intervals(tmp_path: Path) -> None:
    a = fixed_port_server(tmp_path / "a", name="a").start()
    b = fixed_port_server(tmp_path / "b", name="b").start()
    interval = 1.0
    events: list[tuple[float, ConnectionStateEvent]] = []

    async def run() -> float:
        client = HAClient(
            "ha-heartbeat",
            chooser=DefaultServerChooser([a.ws_url, b.ws_url]),
            delay=FixedDelayStrategy(0.05),
            connect_timeout=2,
        )
        client.set_heartbeat(interval)
        client.add_connection_state_listener(lambda e: events.append((time.monotonic(), e)))
        await client.connect_and_logon()
        assert client.uri == a.ws_url
        c = client.client
        assert c is not None
        # a beat arrived: the broker beats at our interval
        last = c.last_received
        await asyncio.wait_for(_until(lambda: c.last_received != last), 5 * interval)
        stopped = time.monotonic()
        a.signal(signal.SIGSTOP)
        try:
            await asyncio.wait_for(_until(lambda: client.uri == b.ws_url and client.client is not None
                                          and not client.client.closed.is_set()), 30)  # fmt: skip
        finally:
            a.signal(signal.SIGCONT)
        await client.close()
        return stopped

    try:
        stopped = asyncio.run(run())
    finally:
        a.stop()
        b.stop()
    lost = [
        t for t, e in events if e.state is ConnectionState.DISCONNECTED and e.detail == "heartbeat"
    ]
    assert lost, events
    # the last frame came at most one interval before the stop; the monitor looks every
    # idle / 8; a loaded machine gets half an interval of slack
    assert lost[0] - stopped <= 2 * interval + interval / 4 + 0.5, lost[0] - stopped
    assert any(e.state is ConnectionState.FAILED_OVER and e.uri == b.ws_url for _, e in events)


def test_a_consumer_slower_than_the_heartbeat_window_stays_connected(tmp_path: Path) -> None:
    """The application takes longer per message than the heartbeat's idle time, with the
    subscription's buffer full (the client's reader waits for it): neither the client's
    liveness check nor the broker takes it for dead. The rule for consumers
    (docs/ha-client.md "Heartbeats"): await (or hand to a thread) what takes long."""
    proc = fixed_port_server(tmp_path / "srv").start()
    url = proc.ws_url
    interval = 0.5
    events: list[ConnectionStateEvent] = []

    async def run() -> list[int]:
        async with HAClient("busy-feed", chooser=DefaultServerChooser([url]),
                            delay=FixedDelayStrategy(0.05)) as feed:  # fmt: skip
            pad = "x" * 1000  # a few MB: many frames, so the reader does wait for room
            for n in range(3000):
                feed.publish("orders", b'{"n":%d,"pad":"%s"}' % (n, pad.encode()))
            await feed.publish_flush(30)
        reader = HAClient("busy-reader", chooser=DefaultServerChooser([url]),
                          delay=FixedDelayStrategy(0.05), queue_size=20)  # fmt: skip
        reader.set_heartbeat(interval)  # dead after 2 intervals of silence
        reader.add_connection_state_listener(events.append)
        await reader.connect_and_logon()
        sub = await reader.subscribe("orders", bookmark="0", sub_id="busy")
        got: list[int] = []
        async for msg in sub:
            n = msg.json()["n"]
            got.append(n)
            if n < 3:
                await asyncio.sleep(4 * interval)  # twice the idle time, buffer full
            msg.discard()
            if n == 2999:
                break
        await reader.close()
        return got

    try:
        got = asyncio.run(asyncio.wait_for(run(), 120))
    finally:
        proc.stop()
    assert got == list(range(3000))
    lost = [e for e in events if e.state is ConnectionState.DISCONNECTED]
    assert lost == [], lost


async def _until(cond: object) -> None:
    assert callable(cond)
    while not cond():
        await asyncio.sleep(0.01)


def test_a_second_process_opening_the_same_store_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "pub.store"
    code = (
        "import asyncio, sys\n"
        "from spool.server.client import FilePublishStore, StoreLocked\n"
        "async def main():\n"
        f"    s = FilePublishStore({str(path)!r})\n"
        "    try:\n"
        "        await s.open()\n"
        "    except StoreLocked as exc:\n"
        "        print('refused:', exc); return 3\n"
        "    return 0\n"
        "sys.exit(asyncio.run(main()))\n"
    )

    async def hold() -> subprocess.CompletedProcess[str]:
        store = FilePublishStore(path)
        await store.open()
        try:
            return await asyncio.to_thread(
                subprocess.run, [sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                text=True, timeout=60,
            )  # fmt: skip
        finally:
            await store.close()

    done = asyncio.run(hold())
    assert done.returncode == 3, done.stderr
    assert (
        f"store {path}.lock is already open in another client (held by {os.getpid()}" in done.stdout
    )
    # once the owner closed it, the next process may open it
    again = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                           timeout=60)  # fmt: skip
    assert again.returncode == 0, again.stdout + again.stderr


def test_ha_processes_whose_stores_fill_their_disk_carry_on_once_there_is_room(
    tmp_path: Path,
) -> None:
    """A publisher and a bookmark subscriber process keep their file stores on a small
    tmpfs left with 64 KiB: both fill it mid-stream (the workload is larger than the room,
    so it is not a race), say so (``ENOSPC`` and the store's path on stderr) and wait;
    once the filler is deleted both finish: the subscriber processed each message once,
    in order, and the broker's log holds each publish once."""
    total = 10_000
    proc = fixed_port_server(tmp_path / "srv").start()
    out, pub_log, sub_log = tmp_path / "out", tmp_path / "pub.log", tmp_path / "sub.log"
    with tmpfs(tmp_path / "stores", "8m") as disk:
        filler = fill(disk, leave=64 << 10)
        pub_store, sub_store = disk / "pub.store", disk / "sub.store"
        sub = _subscriber(proc.ws_url, sub_store, out, total, sub_log, 0.0)
        with pub_log.open("ab") as err:
            pub = subprocess.Popen(
                [sys.executable, "-m", "tests.support.ha_publisher", proc.ws_url, str(pub_store),
                 str(total), str(tmp_path / "progress")],
                cwd=ROOT, stderr=err, env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )  # fmt: skip
        try:
            for log, store in ((pub_log, pub_store), (sub_log, sub_store)):
                wait_until(
                    lambda log=log, store=store: (
                        f"store {store}: write failed" in log.read_text()
                        and "(ENOSPC)" in log.read_text()
                    ),
                    120, message=f"{store.name} refused by the full disk",
                )  # fmt: skip
            assert pub.poll() is None and sub.poll() is None, "a client gave up on its store"
            assert _lines(out) < total
            filler.unlink()
            assert pub.wait(120) == 0, pub_log.read_text()
            assert sub.wait(120) == 0, sub_log.read_text()
        finally:
            for p in (pub, sub):
                if p.poll() is None:
                    p.kill()
                    p.wait()
            proc.stop()
    numbers = [int(line.split()[0]) for line in out.read_text().splitlines()]
    assert numbers == list(range(1, total + 1)), "each once, in order"
    records = asyncio.run(read_records(proc.config_path))
    mine = [s for h, s, _ in records if h == pub_hash("ha-crash-publisher")]
    assert mine == list(range(1, total + 1))
