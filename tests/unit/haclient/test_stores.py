"""Publish and bookmark stores: the same behaviour in memory and on file; the file's torn
tail, crash-safe compaction, and one owner per store."""

from __future__ import annotations

import asyncio
import functools
import os
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any, ParamSpec

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spool.server.client.ha.bookmarkstore import FileBookmarkStore, MemoryBookmarkStore
from spool.server.client.ha.errors import StoreLocked
from spool.server.client.ha.publishstore import (
    FilePublishStore,
    MemoryPublishStore,
    PublishStore,
    StoredPublish,
)
from spool.server.client.ha.recordlog import decode_records, encode_record

Factory = Callable[[Path], PublishStore]
P = ParamSpec("P")


def run_async(fn: Callable[P, Coroutine[Any, Any, None]]) -> Callable[P, None]:
    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> None:
        asyncio.run(asyncio.wait_for(fn(*args, **kwargs), 30))

    return wrapper


@pytest.fixture(params=["memory", "file"])
def make_store(request: pytest.FixtureRequest) -> Factory:
    if request.param == "memory":
        return lambda path: MemoryPublishStore()
    return lambda path: FilePublishStore(path / "pub.store")


@run_async
async def test_publish_store_keeps_what_is_not_persisted(
    make_store: Factory, tmp_path: Path
) -> None:
    store = make_store(tmp_path)
    await store.open()
    for seq in range(1, 11):
        store.store(StoredPublish(seq, "t", b"%d" % seq, {"k": "x"} if seq == 3 else None))
    assert store.unpersisted_count() == 10
    assert store.discard_up_to(4) == 4
    assert store.discard_up_to(2) == 0
    assert [e.seq for e in store.entries_after(4)] == list(range(5, 11))
    assert [e.seq for e in store.entries_after(6, upto=8)] == [7, 8]
    assert store.last_seq == 10 and store.last_discarded == 4
    with pytest.raises(ValueError):
        store.store(StoredPublish(10, "t", b""))
    await store.sync()
    await store.close()


@run_async
async def test_file_publish_store_reopens_with_what_was_left(tmp_path: Path) -> None:
    store = FilePublishStore(tmp_path / "pub.store")
    await store.open()
    for seq in range(1, 6):
        store.store(StoredPublish(seq, "orders", b"body%d" % seq, {"x": "c"} if seq == 5 else None))
    store.discard_up_to(2)
    await store.close()
    again = FilePublishStore(tmp_path / "pub.store")
    await again.open()
    assert [(e.seq, e.body) for e in again.entries_after(0)] == [
        (3, b"body3"),
        (4, b"body4"),
        (5, b"body5"),
    ]
    assert again.entries_after(0)[-1].extra == {"x": "c"}
    assert again.last_discarded == 2 and again.last_seq == 5
    await again.close()


@run_async
async def test_file_publish_store_drops_a_torn_tail(tmp_path: Path) -> None:
    path = tmp_path / "pub.store"
    store = FilePublishStore(path)
    await store.open()
    for seq in range(1, 4):
        store.store(StoredPublish(seq, "t", b"x" * 100))
    await store.close()
    whole = path.read_bytes()
    for cut in (1, 7, 50):  # a SIGKILL mid-write leaves part of the last record
        path.write_bytes(whole[:-cut])
        again = FilePublishStore(path)
        await again.open()
        assert [e.seq for e in again.entries_after(0)] == [1, 2]
        assert again.dropped_bytes == len(whole) - cut - (len(whole) * 2 // 3)
        await again.close()
        assert len(path.read_bytes()) == len(whole) * 2 // 3
        path.write_bytes(whole)
    # a flipped bit in the last record: its CRC fails, it is dropped too
    path.write_bytes(whole[:-1] + bytes([whole[-1] ^ 1]))
    again = FilePublishStore(path)
    await again.open()
    assert [e.seq for e in again.entries_after(0)] == [1, 2]
    await again.close()


@run_async
async def test_file_publish_store_compacts_and_keeps_the_last_sequence(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("spool.server.client.ha.publishstore.COMPACT_MIN_BYTES", 10_000)
    path = tmp_path / "pub.store"
    store = FilePublishStore(path)
    await store.open()
    for seq in range(1, 501):
        store.store(StoredPublish(seq, "t", b"y" * 100))
        if seq % 50 == 0:
            store.discard_up_to(seq - 10)
    await store.sync()
    size_with_dead = 500 * 130
    assert path.stat().st_size < size_with_dead // 2  # compacted along the way
    store.discard_up_to(500)
    await store.close()
    again = FilePublishStore(path)
    await again.open()
    # nothing left to resend, yet the numbering goes on after 500 (no reused sequence)
    assert again.unpersisted_count() == 0 and again.last_seq == 500
    await again.close()
    assert not (tmp_path / "pub.store.tmp").exists()


@run_async
async def test_a_compaction_cut_before_its_rename_leaves_the_old_file(tmp_path: Path) -> None:
    path = tmp_path / "pub.store"
    store = FilePublishStore(path)
    await store.open()
    store.store(StoredPublish(1, "t", b"a"))
    await store.close()
    # the crash left a half-written temporary file: it is ignored and removed
    (tmp_path / "pub.store.tmp").write_bytes(encode_record(b"garbage")[:5])
    again = FilePublishStore(path)
    await again.open()
    assert [e.seq for e in again.entries_after(0)] == [1]
    assert not (tmp_path / "pub.store.tmp").exists()
    await again.close()


@run_async
async def test_one_owner_per_store_file(tmp_path: Path) -> None:
    first = FilePublishStore(tmp_path / "pub.store")
    await first.open()
    second = FilePublishStore(tmp_path / "pub.store")
    with pytest.raises(StoreLocked, match=f"held by {os.getpid()}"):
        await second.open()
    await first.close()
    await second.open()  # free again once the owner closed it
    await second.close()
    b1 = FileBookmarkStore(tmp_path / "bm.store")
    await b1.open()
    with pytest.raises(StoreLocked):
        await FileBookmarkStore(tmp_path / "bm.store").open()
    await b1.close()


def test_record_codec() -> None:
    data = encode_record(b"one") + encode_record(b"") + encode_record(b"three")
    assert decode_records(data) == ([b"one", b"", b"three"], len(data))
    assert decode_records(data[:-1]) == ([b"one", b""], len(data) - 13)


BookmarkFactory = Callable[[Path], Awaitable[MemoryBookmarkStore]]


@pytest.mark.parametrize("kind", ["memory", "file"])
@run_async
async def test_bookmark_store_tracks_resume_points(kind: str, tmp_path: Path) -> None:
    store = MemoryBookmarkStore() if kind == "memory" else FileBookmarkStore(tmp_path / "bm")
    await store.open()
    assert store.resume_bookmark("s") == "0"
    assert store.register("s", "0") == "0"
    assert store.receive("s", ["1|1|", "1|2|", "1|1|"]) == [True, True, False]
    store.discard("s", "1|1|")
    assert store.resume_bookmark("s") == "1|1|"
    assert store.is_discarded("s", "1|1|") and not store.is_discarded("s", "1|2|")
    store.purge("s")
    assert store.resume_bookmark("s") == "0"
    await store.close()


def _three_gaps(store: MemoryBookmarkStore, sub: str) -> None:
    """Publisher 1's 2, 4 and 6, discarded: gaps at 1, 3 and 5."""
    store.register(sub, "0")
    assert store.receive(sub, ["1|2|", "1|4|", "1|6|"]) == [True] * 3
    for b in ("1|2|", "1|4|", "1|6|"):
        store.discard(sub, b)


@pytest.mark.parametrize("kind", ["memory", "file"])
@run_async
async def test_a_bookmark_store_passes_max_gaps_to_its_subscriptions(
    kind: str, tmp_path: Path
) -> None:
    """Past ``max_gaps`` gaps of a publisher the oldest (1) is forgotten: its sequence
    counts as received."""
    store = (
        MemoryBookmarkStore(max_gaps=2)
        if kind == "memory"
        else FileBookmarkStore(tmp_path / "bm", max_gaps=2)
    )
    await store.open()
    _three_gaps(store, "s")
    assert store.receive("s", ["1|1|", "1|3|", "1|5|"]) == [False, True, True]
    await store.close()
    with pytest.raises(ValueError, match="max_gaps"):
        MemoryBookmarkStore(max_gaps=0)


@pytest.mark.parametrize("compacted", [False, True])
@run_async
async def test_a_file_bookmark_store_reopened_with_a_smaller_max_gaps(
    compacted: bool, tmp_path: Path
) -> None:
    """Written with the default bound, reopened with ``max_gaps=2``: replaying its records,
    or loading its ``snap`` record, keeps the newest two gaps."""
    path = tmp_path / "bm"
    store = FileBookmarkStore(path)
    await store.open()
    _three_gaps(store, "s")
    if compacted:
        store.prune()
    await store.close()
    kinds = [orjson.loads(p)["k"] for p in decode_records(path.read_bytes())[0]]
    assert ("snap" in kinds) is compacted
    again = FileBookmarkStore(path, max_gaps=2)
    await again.open()
    assert again.receive("s", ["1|1|", "1|3|", "1|5|"]) == [False, True, True]
    await again.close()


@run_async
async def test_file_bookmark_store_survives_a_restart_and_compacts(tmp_path: Path) -> None:
    path = tmp_path / "bm.store"
    store = FileBookmarkStore(path, compact_every=100)
    await store.open()
    store.register("s", "0")
    for n in range(1, 301):
        store.receive("s", [f"9|{n}|"])
        if n != 150:
            store.discard("s", f"9|{n}|")
    await store.sync()
    store.prune()
    await store.close()
    again = FileBookmarkStore(path)
    await again.open()
    # resumes after 149 (150 was received, not discarded); 150 comes again once
    assert again.resume_bookmark("s") == "9|149|"
    assert again.receive("s", ["9|150|", "9|151|", "9|150|"]) == [True, False, False]
    await again.close()
    payloads, _ = decode_records(path.read_bytes())
    assert len(payloads) < 20  # the snapshot, not 600 records


def _records_in(path: Path) -> list[dict[str, Any]]:
    payloads, _ = decode_records(path.read_bytes())
    return [orjson.loads(p) for p in payloads]


@run_async
async def test_each_discard_is_in_the_file_when_discard_returns(tmp_path: Path) -> None:
    path = tmp_path / "bm.store"
    store = FileBookmarkStore(path, fsync=False)
    await store.open()
    assert store.writes == "each"
    store.register("s", "0")
    store.receive("s", ["9|1|", "9|2|"])
    store.discard("s", "9|1|")
    # no await since: what a process killed now leaves behind has the discard
    kinds = [(r["k"], r["v"]) for r in _records_in(path)]
    assert kinds == [("start", "0"), ("r", ["9|1|", "9|2|"]), ("d", ["9|1|"])]
    assert not store.holding_discards()
    await store.close()


@run_async
async def test_a_batched_store_writes_the_discards_of_a_loop_turn_later(tmp_path: Path) -> None:
    path = tmp_path / "bm.store"
    store = FileBookmarkStore(path, fsync=False, writes="batched")
    await store.open()
    store.register("s", "0")
    store.receive("s", ["9|1|"])
    store.discard("s", "9|1|")
    assert ("d", ["9|1|"]) not in [(r["k"], r["v"]) for r in _records_in(path)]
    await store.sync()
    assert ("d", ["9|1|"]) in [(r["k"], r["v"]) for r in _records_in(path)]
    await store.close()
    with pytest.raises(ValueError, match="'each' or 'batched'"):
        FileBookmarkStore(path, writes="sometimes")  # type: ignore[arg-type]


@run_async
async def test_a_compaction_holds_the_records_and_the_subscription_waits_for_them(
    tmp_path: Path,
) -> None:
    path = tmp_path / "bm.store"
    store = FileBookmarkStore(path, fsync=False, compact_every=10)
    await store.open()
    store.register("s", "0")
    n = 0
    while not store.holding_discards():  # the 10th record starts a compaction
        n += 1
        store.receive("s", [f"9|{n}|"])
        store.discard("s", f"9|{n}|")
    n += 1
    store.receive("s", [f"9|{n}|"])
    store.discard("s", f"9|{n}|")  # held in memory while the thread rewrites the file
    assert ("d", [f"9|{n}|"]) not in [(r["k"], r["v"]) for r in _records_in(path)]
    await store.discards_written()
    assert not store.holding_discards()
    assert ("d", [f"9|{n}|"]) in [(r["k"], r["v"]) for r in _records_in(path)]
    await store.close()
    again = FileBookmarkStore(path)
    await again.open()
    assert again.resume_bookmark("s") == f"9|{n}|"
    await again.close()


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    steps=st.lists(st.tuples(st.integers(1, 4), st.lists(st.integers(0, 5), max_size=4)),
                   min_size=1, max_size=25),
    compact_every=st.integers(3, 40),
)  # fmt: skip
def test_what_a_killed_process_leaves_resumes_after_every_discard(
    tmp_path: Path, steps: list[tuple[int, list[int]]], compact_every: int
) -> None:
    """The oracle: after any discard, the file as it is (what a process killed at that
    moment leaves, the page cache surviving it) reopens with every discard so far: the
    same resume point, nothing discarded delivered again."""

    async def run() -> None:
        root = tmp_path / f"case-{os.urandom(4).hex()}"
        path = root / "bm.store"
        store = FileBookmarkStore(path, fsync=False, compact_every=compact_every)
        await store.open()
        store.register("s", "0")
        seq = 0
        outstanding: list[str] = []
        discarded: list[str] = []
        for run_len, picks in steps:
            run = [f"7|{seq + i + 1}|" for i in range(run_len)]
            seq += run_len
            store.receive("s", run)
            outstanding.extend(run)
            for pick in picks:
                if not outstanding:
                    break
                bm = outstanding.pop(pick % len(outstanding))
                store.discard("s", bm)
                discarded.append(bm)
                if store.holding_discards():
                    await store.discards_written()  # as the subscription does
                copy = root / f"killed-{len(discarded)}.store"
                copy.write_bytes(path.read_bytes())
                killed = FileBookmarkStore(copy)
                await killed.open()
                assert killed.resume_bookmark("s") == store.resume_bookmark("s")
                assert all(killed.is_discarded("s", d) for d in discarded)
                assert not any(killed.is_discarded("s", o) for o in outstanding)
                await killed.close()
        await store.close()

    asyncio.run(asyncio.wait_for(run(), 60))
