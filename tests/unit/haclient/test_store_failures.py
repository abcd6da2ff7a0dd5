"""File stores on a disk that fills up (a real tmpfs, root only): a failed close still
releases the file and its lock, a failed store keeps its state in memory and refuses
nothing it cannot keep, a rewrite from memory recovers it once the disk has room, and
what a killed process leaves at any moment reopens without losing a discard."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import shutil
import time
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spool.server.bookmarks import pub_hash
from spool.server.client import DefaultServerChooser, FixedDelayStrategy, HAClient
from spool.server.client.ha.bookmarkstore import FileBookmarkStore, Writes
from spool.server.client.ha.errors import StoreIOError
from spool.server.client.ha.publishstore import FilePublishStore, StoredPublish
from tests.support.disk import fill, tmpfs
from tests.support.wait import async_wait_until, run_turns
from tests.unit.haclient.fakebroker import FakeBroker

#: records a full disk may still take before a write fails: the file's last page has room
#: for a few (a tmpfs counts whole pages)
SLACK = 5_000


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    with tmpfs(tmp_path / "disk", "512k") as path:
        yield path


#: Seconds a wait may take before the test calls it a hang: a guard, never a measure. A
#: store's recovery is a thread's rewrite and a retry timer; on a loaded machine a starved
#: test process needs tens of seconds for what takes a fraction of one alone.
GUARD = 60.0


def run(coro: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(asyncio.wait_for(coro(), 3 * GUARD))


def bm(n: int) -> str:
    return f"7|{n}|"


class Reader:
    """A bookmark subscriber's side of the store: receive one message, discard it."""

    def __init__(self, store: FileBookmarkStore) -> None:
        self.store = store
        self.n = 0

    def step(self) -> None:
        self.n += 1
        self.store.receive("s", [bm(self.n)])
        self.store.discard("s", bm(self.n))

    async def until_failed(self) -> None:
        """Go on until the disk refuses a write (the store says so)."""
        for _ in range(SLACK):
            self.step()
            if self.store.writes == "batched":
                await asyncio.sleep(0)
                with contextlib.suppress(StoreIOError):  # the store says so below
                    await self.store.sync()
            if self.store.failure is not None:
                return
        raise AssertionError("the full disk took every write")


@pytest.mark.parametrize("writes", ["each", "batched"])
def test_a_failed_close_releases_the_bookmark_store(disk: Path, writes: Writes) -> None:
    async def go() -> None:
        path = disk / "bm.store"
        store = FileBookmarkStore(path, writes=writes)
        told: list[StoreIOError] = []
        store.on_failure = told.append
        await store.open()
        store.register("s", "0")
        reader = Reader(store)
        for _ in range(20):
            reader.step()
        await store.sync()
        durable = reader.n
        fill(disk)
        await reader.until_failed()
        # the failure names the store and the errno, once, and holds the next message
        assert len(told) == 1 and told[0].errno == errno.ENOSPC
        assert str(path) in str(told[0]) and "ENOSPC" in str(told[0])
        assert store.holding_discards()
        for _ in range(5):  # kept in memory, not lost for this process
            reader.step()
        assert store.resume_bookmark("s") == bm(reader.n)
        with pytest.raises(StoreIOError) as raised:
            await store.close()  # the disk is still full: the last writes are not there
        assert raised.value.errno == errno.ENOSPC
        # the file and its lock are free: this process opens the store again
        again = FileBookmarkStore(path)
        await again.open()
        # what is durable reads back: every discard before the disk filled; those after
        # may come again (never one that was not discarded)
        assert all(again.is_discarded("s", bm(n)) for n in range(1, durable + 1))
        assert not any(again.is_discarded("s", bm(n)) for n in range(reader.n + 1, reader.n + 3))
        assert durable <= _seq(again.resume_bookmark("s")) <= reader.n
        await again.close()

    run(go)


def _seq(bookmark: str) -> int:
    return int(bookmark.split("|")[1])


@pytest.mark.parametrize("writes", ["each", "batched"])
def test_a_failed_bookmark_store_recovers_once_the_disk_has_room(
    disk: Path, writes: Writes
) -> None:
    async def go() -> None:
        path = disk / "bm.store"
        store = FileBookmarkStore(path, writes=writes, compact_every=200)
        await store.open()
        store.register("s", "0")
        reader = Reader(store)
        filler = fill(disk)
        await reader.until_failed()
        with pytest.raises(StoreIOError):
            await store.recover()  # still full: still failed
        assert store.failure is not None
        store.receive("s", [bm(reader.n + 1), bm(reader.n + 2)])  # kept in memory
        reader.n += 2
        kept = reader.n  # received, never discarded: it holds the resume point back
        store.discard("s", bm(kept - 1))
        filler.unlink()
        await store.recover()
        assert store.failure is None and not store.holding_discards()
        await store.discards_written()
        for _ in range(300):  # writes again, compactions included
            reader.step()
        assert store.resume_bookmark("s") == bm(kept - 1)
        await store.close()
        assert not (disk / "bm.store.tmp").exists()
        again = FileBookmarkStore(path)
        await again.open()
        assert again.resume_bookmark("s") == bm(kept - 1)
        assert not again.is_discarded("s", bm(kept))
        assert all(again.is_discarded("s", bm(n)) for n in range(kept + 1, reader.n + 1))
        # kept comes again once; a replay of the rest is dropped as already processed
        assert again.receive("s", [bm(kept), bm(kept + 1)]) == [True, False]
        await again.close()

    run(go)


def test_a_compaction_refused_by_a_full_disk_leaves_the_old_file_and_no_temporary(
    disk: Path,
) -> None:
    async def go() -> None:
        path = disk / "bm.store"
        store = FileBookmarkStore(path)
        await store.open()
        store.register("s", "0")
        reader = Reader(store)
        for _ in range(50):
            reader.step()
        await store.sync()
        before = path.read_bytes()
        filler = fill(disk)
        store.prune()  # the rewrite needs room for a second file
        with pytest.raises(StoreIOError):
            await store.sync()
        assert not (disk / "bm.store.tmp").exists()  # its partial copy is gone
        assert path.read_bytes() == before
        filler.unlink()
        await store.recover()
        await store.close()
        again = FileBookmarkStore(path)
        await again.open()
        assert again.resume_bookmark("s") == bm(50)
        await again.close()

    run(go)


def test_a_failed_publish_store_refuses_publishes_closes_and_recovers(disk: Path) -> None:
    async def go() -> None:
        path = disk / "pub.store"
        store = FilePublishStore(path)
        told: list[StoreIOError] = []
        store.on_failure = told.append
        await store.open()
        body = b"x" * 200
        seq = 0
        for _ in range(10):
            seq += 1
            store.store(StoredPublish(seq, "t", body))
        await store.sync()
        synced = seq
        filler = fill(disk)
        for _ in range(SLACK):
            seq += 1
            store.store(StoredPublish(seq, "t", body))
            try:
                await store.sync()
            except StoreIOError as exc:
                assert exc.errno == errno.ENOSPC
                break
            synced = seq
        else:
            raise AssertionError("the full disk took every write")
        assert len(told) == 1 and str(path) in str(told[0])
        # a publish it cannot keep is refused, and not kept
        with pytest.raises(StoreIOError, match="ENOSPC"):
            store.store(StoredPublish(seq + 1, "t", body))
        assert store.last_seq == seq
        store.discard_up_to(3)  # acks still discard (in memory, written at recovery)
        filler.unlink()
        await store.recover()
        assert store.failure is None
        store.store(StoredPublish(seq + 1, "t", body))
        await store.sync()
        await store.close()
        again = FilePublishStore(path)
        await again.open()
        assert [e.seq for e in again.entries_after(0)] == list(range(4, seq + 2))
        assert again.last_discarded == 3
        # a close the full disk fails still releases the file and its lock
        filler = fill(disk)
        for n in range(seq + 2, seq + 2 + SLACK):
            again.store(StoredPublish(n, "t", body))
            if n % 20 == 0:
                await asyncio.sleep(0)
                if again.failure is not None:
                    break
        with pytest.raises(StoreIOError):
            await again.close()
        third = FilePublishStore(path)
        await third.open()  # not StoreLocked
        # what is durable: a prefix of what was stored, with everything synced before
        seqs = [e.seq for e in third.entries_after(0)]
        assert seqs == list(range(4, seqs[-1] + 1)) and seqs[-1] >= seq + 1
        await third.close()
        filler.unlink()
        assert synced >= 10

    run(go)


def test_a_store_whose_open_fails_can_be_opened_again(tmp_path: Path) -> None:
    async def go() -> None:
        path = tmp_path / "bm.store"
        path.mkdir()  # opening it as a file fails after the lock was taken
        store = FileBookmarkStore(path)
        with pytest.raises(StoreIOError) as raised:
            await store.open()
        assert raised.value.operation == "open" and raised.value.errno == errno.EISDIR
        path.rmdir()
        await FileBookmarkStore(path).open()  # the failed open kept nothing
        pub = tmp_path / "pub.store"
        pub.mkdir()
        with pytest.raises(StoreIOError):
            await FilePublishStore(pub).open()
        pub.rmdir()
        await FilePublishStore(pub).open()

    run(go)


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    steps=st.lists(
        st.one_of(
            st.tuples(st.just("msgs"), st.integers(1, 30), st.lists(st.integers(0, 9), max_size=30)),
            st.tuples(st.just("fill"), st.just(0), st.just([])),
            st.tuples(st.just("room"), st.just(0), st.just([])),
        ),
        min_size=1, max_size=20,
    ),
    compact_every=st.integers(20, 400),
    writes=st.sampled_from(["each", "batched"]),
)  # fmt: skip
def test_what_a_killed_process_leaves_on_a_filling_disk_loses_no_discard(
    disk: Path, steps: list[tuple[str, int, list[int]]], compact_every: int, writes: Writes
) -> None:
    """The oracle: at every moment, the file as it is (what a process killed then leaves)
    reopens with every discard the store had written (each one made while it was not
    failed, in ``each`` mode; everything once it recovered) and nothing that was not
    discarded; once the disk has room and the store recovered, it holds everything."""

    async def go() -> None:
        root = disk / f"case-{os.urandom(4).hex()}"
        root.mkdir()
        path = root / "bm.store"
        store = FileBookmarkStore(path, fsync=False, compact_every=compact_every, writes=writes)
        failed = asyncio.Event()
        store.on_failure = lambda exc: failed.set()
        await store.open()
        store.register("s", "0")
        seq = 0
        outstanding: list[str] = []
        written: list[str] = []  # discards the file must have
        pending: list[str] = []  # discards made while failed (or not yet in a batch)
        filler: Path | None = None

        async def check() -> None:
            copy = disk.parent / "killed.store"
            copy.write_bytes(path.read_bytes())
            killed = FileBookmarkStore(copy)
            await killed.open()
            assert all(killed.is_discarded("s", d) for d in written)
            assert not any(killed.is_discarded("s", o) for o in outstanding)
            await killed.close()
            copy.unlink()

        async def settle() -> None:
            """As the subscription does before the next message: wait for the discards
            held by a compaction (or, here, for the failure that keeps them held)."""
            if not store.holding_discards() or failed.is_set():
                return
            waits = [asyncio.ensure_future(store.discards_written()),
                     asyncio.ensure_future(failed.wait())]  # fmt: skip
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            for w in waits:
                w.cancel()

        async def recover() -> None:
            await store.recover()
            failed.clear()
            await store.sync()
            written.extend(pending)
            pending.clear()
            await check()

        try:
            for kind, run_len, picks in steps:
                if kind == "fill" and filler is None:
                    filler = fill(disk, name=f"filler-{root.name}")
                elif kind == "room" and filler is not None:
                    filler.unlink()
                    filler = None
                    await recover()
                elif kind == "msgs":
                    run_ = [bm(seq + i + 1) for i in range(run_len)]
                    seq += run_len
                    store.receive("s", run_)
                    outstanding.extend(run_)
                    for pick in picks:
                        if not outstanding:
                            break
                        d = outstanding.pop(pick % len(outstanding))
                        store.discard("s", d)
                        await settle()
                        if writes == "each" and store.failure is None:
                            written.append(d)
                        else:
                            pending.append(d)
                        await check()
                    if writes == "batched" and store.failure is None:
                        with contextlib.suppress(StoreIOError):
                            await store.sync()
                        if store.failure is None:
                            written.extend(pending)
                            pending.clear()
                            await check()
            if filler is not None:
                filler.unlink()
                filler = None
            await recover()
            await store.close()
        finally:
            if filler is not None:
                filler.unlink()
            with contextlib.suppress(StoreIOError):
                await store.close()
            shutil.rmtree(root)

    run(go)


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    steps=st.lists(
        st.one_of(
            st.tuples(st.just("store"), st.integers(1, 40)),
            st.tuples(st.just("ack"), st.integers(0, 40)),
            st.tuples(st.just("fill"), st.just(0)),
            st.tuples(st.just("room"), st.just(0)),
        ),
        min_size=1, max_size=25,
    ),
)  # fmt: skip
def test_what_a_killed_publisher_leaves_on_a_filling_disk_has_every_synced_publish(
    disk: Path, steps: list[tuple[str, int]]
) -> None:
    """The oracle: at every moment, the file as it is (what a process killed then leaves)
    reopens with every publish a ``sync()`` confirmed and the broker has not acked, in
    order, with its body, and nothing the store was not given; a publish the failed store
    refused is nowhere; once the disk has room and the store recovered, the file holds
    exactly what memory holds."""

    async def go() -> None:
        root = disk / f"case-{os.urandom(4).hex()}"
        root.mkdir()
        path = root / "pub.store"
        store = FilePublishStore(path, fsync=False)
        await store.open()
        seq = 0
        acked = 0
        synced = 0  # every publish up to this one was confirmed written
        filler: Path | None = None

        def body(n: int) -> bytes:
            return b"%d:" % n + b"p" * (n % 97)

        async def check() -> None:
            copy = disk.parent / "killed.store"
            copy.write_bytes(path.read_bytes())
            killed = FilePublishStore(copy)
            await killed.open()
            got = killed.entries_after(0)
            assert all(e.body == body(e.seq) for e in got)
            seqs = [e.seq for e in got]
            assert seqs == sorted(set(seqs)) and all(n <= seq for n in seqs)
            assert set(range(max(acked, killed.last_discarded) + 1, synced + 1)) <= set(seqs)
            await killed.close()
            copy.unlink()

        try:
            for kind, n in steps:
                if kind == "store":
                    for _ in range(n):
                        if store.failure is not None:
                            with pytest.raises(StoreIOError):
                                store.store(StoredPublish(seq + 1, "t", body(seq + 1)))
                            break
                        seq += 1
                        store.store(StoredPublish(seq, "t", body(seq)))
                    try:
                        await store.sync()
                        synced = seq
                    except StoreIOError:
                        pass
                elif kind == "ack":
                    acked = min(seq, acked + n)
                    store.discard_up_to(acked)
                elif kind == "fill" and filler is None:
                    filler = fill(disk, name=f"filler-{root.name}")
                elif kind == "room" and filler is not None:
                    filler.unlink()
                    filler = None
                    await store.recover()
                    await store.sync()
                    synced = seq
                await check()
            if filler is not None:
                filler.unlink()
                filler = None
            await store.recover()
            await store.sync()
            await store.close()
            again = FilePublishStore(path)
            await again.open()
            assert [e.seq for e in again.entries_after(0)] == list(range(acked + 1, seq + 1))
            assert again.last_seq == seq and again.last_discarded == acked
            await again.close()
        finally:
            if filler is not None:
                filler.unlink()
            with contextlib.suppress(StoreIOError):
                await store.close()
            shutil.rmtree(root)

    run(go)


# -- the HA client over a store whose disk fills up (a scripted broker) -------------------


def ha_client(broker: FakeBroker, **stores: Any) -> tuple[HAClient, list[BaseException]]:
    client = HAClient(
        "c", chooser=DefaultServerChooser(["ws://a"]), connector=broker.connect,
        delay=FixedDelayStrategy(0.01), store_retry=0.02, **stores,
    )  # fmt: skip
    errors: list[BaseException] = []
    client.exception_listener = errors.append
    return client, errors


async def publish_until_refused(client: HAClient, body: bytes) -> tuple[int, StoreIOError]:
    """Publish until the client refuses one for its store's full disk; returns the last
    accepted sequence and the refusal."""
    accepted = client.publish("t", body)
    for _ in range(SLACK):
        await asyncio.sleep(0)  # the store's writer runs
        try:
            accepted = client.publish("t", body)
        except StoreIOError as exc:
            return accepted, exc
    raise AssertionError("the full disk took every publish")


def test_a_publisher_whose_store_fills_up_refuses_publishes_and_carries_on(disk: Path) -> None:
    async def go() -> None:
        broker = FakeBroker(time.monotonic)
        path = disk / "pub.store"
        client, errors = ha_client(broker, publish_store=FilePublishStore(path))
        await client.connect_and_logon()
        body = b"x" * 200
        for _ in range(10):
            client.publish("t", body)
        await client.publish_flush(GUARD)
        filler = fill(disk)
        accepted, refused = await publish_until_refused(client, body)
        # the application hears it (once), with the store's path and errno
        told = [e for e in errors if isinstance(e, StoreIOError)]
        assert len(told) == 1 and told[0].errno == errno.ENOSPC and told[0].path == str(path)
        assert refused.errno == errno.ENOSPC and client.store_failure is not None
        with pytest.raises(StoreIOError):
            client.publish_many("t", [body, body])
        # a lost connection meanwhile: one reconnect, no loop on the store's error, and
        # nothing the store did not write goes out
        broker.drop()
        await async_wait_until(lambda: len(broker.transports) == 2 and client._ready())
        room = asyncio.ensure_future(client.wait_for_room())
        await run_turns()
        assert not room.done() and len(broker.transports) == 2
        assert len(broker.log) < accepted
        filler.unlink()
        await asyncio.wait_for(room, GUARD)
        assert client.store_failure is None
        last = client.publish("t", body)
        assert last == accepted + 1  # a refused publish took no number
        await client.publish_flush(GUARD)
        # each accepted publish reached the broker once, in order; no refused one did
        assert [int(b.split("|")[1]) for b, _, _ in broker.log] == list(range(1, last + 1))
        assert len(broker.transports) == 2
        await client.close()
        again = FilePublishStore(path)
        await again.open()
        assert again.unpersisted_count() == 0 and again.last_seq == last
        await again.close()

    run(go)


def test_a_subscriber_whose_store_fills_up_waits_and_processes_each_message_once(
    disk: Path,
) -> None:
    async def go() -> None:
        broker = FakeBroker(time.monotonic)
        total = 400
        broker.log.extend(
            (f"{pub_hash('p')}|{n}|", "orders", b"%d" % n) for n in range(1, total + 1)
        )
        path = disk / "bm.store"
        client, errors = ha_client(broker, bookmark_store=FileBookmarkStore(path))
        await client.connect_and_logon()
        sub = await client.subscribe("orders", bookmark="0", sub_id="s")
        processed: list[int] = []

        async def process() -> None:
            msg = await sub.get(GUARD)
            processed.append(int(msg.data))
            msg.discard()

        for _ in range(20):
            await process()
        filler = fill(disk)
        while client.store_failure is None:
            assert len(processed) < total, "the full disk took every discard"
            await process()
        assert next(e for e in errors if isinstance(e, StoreIOError)).errno == errno.ENOSPC
        # the next message waits until the discards are written again
        following = asyncio.ensure_future(process())
        await run_turns()
        assert not following.done()
        broker.drop()  # a reconnect meanwhile resumes from what this process discarded
        await async_wait_until(lambda: len(broker.transports) == 2 and client._ready())
        await run_turns()
        assert not following.done()
        filler.unlink()
        await asyncio.wait_for(following, GUARD)
        while len(processed) < total:
            await process()
        assert processed == list(range(1, total + 1))  # nothing lost, nothing repeated
        await client.close()
        again = FileBookmarkStore(path)
        await again.open()
        assert again.resume_bookmark("s") == f"{pub_hash('p')}|{total}|"
        await again.close()

    run(go)


def test_closing_the_client_on_a_full_disk_releases_both_stores(disk: Path) -> None:
    async def go() -> None:
        broker = FakeBroker(time.monotonic)
        pub, bms = disk / "pub.store", disk / "bm.store"
        client, _errors = ha_client(
            broker, publish_store=FilePublishStore(pub), bookmark_store=FileBookmarkStore(bms)
        )
        await client.connect_and_logon()
        filler = fill(disk)
        await publish_until_refused(client, b"x" * 200)
        with pytest.raises(StoreIOError):
            await client.close()
        # both files and locks are free: the application makes its client again
        filler.unlink()
        again, _ = ha_client(
            broker, publish_store=FilePublishStore(pub), bookmark_store=FileBookmarkStore(bms)
        )
        await again.connect_and_logon()
        await again.close()

    run(go)
