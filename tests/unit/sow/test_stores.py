"""One test suite over both TopicStore backends (memory and file), an oracle, and the
persistent backend's crash, repair, compaction and re-keying.

The suite runs every scenario over both backends (nats-server's
``testFileStoreAllPermutations``); what only a file can do (survive a reopen, be torn,
be compacted) has its own tests below, still against the dict oracle.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spool.server.clock import VirtualClock
from spool.server.ports import SowRecord, TopicStore
from spool.server.sow.fileformat import SowDamage, decode_header, read_changes
from spool.server.sow.filestore import FileStore, read_sow_file, write_sow_file
from spool.server.sow.memory import MemoryStore, new_record

CLOCK = VirtualClock()


def run(coro: Awaitable[Any]) -> Any:
    return asyncio.run(coro)  # type: ignore[arg-type]


class Backend:
    """Makes stores of one kind; ``reopen`` is a restart (a memory store starts empty)."""

    def __init__(self, kind: str, tmp: Path) -> None:
        self.kind = kind
        self.path = tmp / "orders.sow"
        self.stores: list[TopicStore] = []

    async def open(self, *, recorded: bool = False, keys: tuple[str, ...] = ("/id",)) -> Any:
        if self.kind == "memory":
            store: Any = MemoryStore("orders")
        else:
            store = FileStore("orders", self.path, keys, recorded=recorded, clock=CLOCK,
                              rekey=_rekey)  # fmt: skip
            await store.open()
        self.stores.append(store)
        return store

    async def close(self, store: Any) -> None:
        if isinstance(store, FileStore):
            await store.close()


def _rekey(body: bytes) -> str | None:
    doc = orjson.loads(body)
    value = doc.get("sym")
    return str(value) if value is not None else None


@pytest.fixture(params=["memory", "file"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    return Backend(request.param, tmp_path)


def state(store: Any) -> dict[str, tuple[bytes, int, int, int, int, int]]:
    return {
        r.key: (r.body, r.seq, r.timestamp_us, r.pub_hash, r.pub_seq, r.expires_us)
        for r in store.records()
    }


# -- the suite over both backends --------------------------------------------------------


def test_put_get_delete_and_changes(backend: Backend) -> None:
    async def body() -> None:
        s = await backend.open()
        ch = s.put("a", b'{"id":"a","v":1}', seq=1, timestamp_us=10, pub_hash=7, pub_seq=1)
        assert ch.old is None and ch.new is not None and ch.new.version == 1
        ch2 = s.put("a", b'{"id":"a","v":2}', seq=2, timestamp_us=11, pub_hash=7, pub_seq=2,
                    expires_us=99)  # fmt: skip
        assert ch2.old == ch.new and ch2.new is not None and ch2.new.version == 2
        assert ch2.new.bookmark == "7|2|" and ch2.new.expires_us == 99
        s.put("b", b"x", seq=3)
        assert len(s) == 2 and s.version == 3
        assert [r.key for r in s.records()] == ["a", "b"]  # first-stored order
        assert s.body_bytes == len(b'{"id":"a","v":2}') + 1
        gone = s.delete("a", seq=4)
        assert gone is not None and gone.new is None and gone.old == ch2.new
        assert s.delete("a", seq=5) is None
        assert s.get("a") is None and len(s) == 1 and s.body_bytes == 1
        # a snapshot does not see later changes
        snap = s.records()
        s.put("b", b"y", seq=6)
        assert [r.body for r in snap] == [b"x"]
        await backend.close(s)

    run(body())


def test_a_record_put_again_keeps_its_place(backend: Backend) -> None:
    async def body() -> None:
        s = await backend.open()
        for key in "cab":
            s.put(key, key.encode())
        s.put("c", b"again")
        s.delete("a")
        s.put("a", b"back")
        assert [r.key for r in s.records()] == ["c", "b", "a"]
        await backend.close(s)

    run(body())


ops = st.lists(
    st.tuples(
        st.sampled_from(["put", "delete"]), st.sampled_from("abcdefgh"), st.binary(max_size=20)
    ),
    max_size=60,
)


@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture],
          deadline=None)  # fmt: skip
@given(ops)
def test_the_store_agrees_with_a_dict(
    backend: Backend, script: list[tuple[str, str, bytes]]
) -> None:
    async def body() -> None:
        if backend.path.exists():
            backend.path.unlink()
        s = await backend.open()
        oracle: dict[str, bytes] = {}
        for seq, (op, key, data) in enumerate(script, 1):
            if op == "put":
                before = oracle.get(key)
                ch = s.put(key, data, seq=seq)
                assert (ch.old.body if ch.old else None) == before
                oracle[key] = data
            else:
                ch2 = s.delete(key, seq=seq)
                assert (ch2 is None) == (key not in oracle)
                oracle.pop(key, None)
            assert {r.key: r.body for r in s.records()} == oracle
            assert len(s) == len(oracle) and s.body_bytes == sum(map(len, oracle.values()))
        await backend.close(s)

    run(body())


# -- the file backend ------------------------------------------------------------------


def test_a_file_store_survives_a_restart(tmp_path: Path) -> None:
    async def body() -> None:
        b = Backend("file", tmp_path)
        s = await b.open()
        s.put("a", b"1", seq=1, timestamp_us=5, pub_hash=9, pub_seq=1, expires_us=77)
        s.put("b", b"2", seq=2)
        s.delete("b", seq=3)
        s.put("c", b"3", seq=4)
        before = state(s)
        await s.close()
        s2 = await b.open()
        assert state(s2) == before
        assert s2.file_seq == 4
        await s2.close()

    run(body())


def test_a_recorded_topic_writes_only_what_the_log_made_durable(tmp_path: Path) -> None:
    async def body() -> None:
        b = Backend("file", tmp_path)
        s = await b.open(recorded=True)
        s.put("a", b"1", seq=1)
        s.put("b", b"2", seq=2)
        s.put("a", b"3", seq=3)
        s.durable(2)
        await s.flush()
        assert s.file_seq == 2 and s.unwritten == 1
        # a crash now: the file holds the state as of seq 2
        read = read_sow_file(b.path)
        assert {k: c.body for k, c in read.records.items()} == {"a": b"1", "b": b"2"}
        assert read.file_seq == 2
        s.durable(3)
        await s.flush()
        assert s.unwritten == 0 and s.file_seq == 3
        await s.close()

    run(body())


def test_a_torn_tail_is_cut_off_and_the_prefix_kept(tmp_path: Path) -> None:
    async def body() -> None:
        b = Backend("file", tmp_path)
        s = await b.open()
        for i in range(5):
            s.put(f"k{i}", b"v" * 10, seq=i + 1)
            await s.flush()  # one change per write
        await s.close()
        size = b.path.stat().st_size
        with open(b.path, "r+b") as f:
            f.truncate(size - 7)
        s2 = await b.open()
        assert sorted(state(s2)) == ["k0", "k1", "k2", "k3"]
        assert s2.file_seq == 4
        assert b.path.stat().st_size < size - 7  # the torn change was cut off
        await s2.close()

    run(body())


def test_open_reports_repairs_and_damage_in_the_middle(tmp_path: Path) -> None:
    async def body() -> None:
        path = tmp_path / "t.sow"
        s = FileStore("t", path, ("/id",), recorded=True, clock=CLOCK)
        assert (await s.open()).status == "created"
        for i in range(4):
            s.put(f"k{i}", b"v" * 10, seq=i + 1)
            s.durable(i + 1)
            await s.flush()
        await s.close()
        buf = bytearray(path.read_bytes())
        header = decode_header(bytes(buf))
        assert not isinstance(header, str)
        offsets = []
        pos = header.size
        for c in read_changes(bytes(buf), header.size):
            assert not isinstance(c, SowDamage)
            offsets.append(pos)
            pos += c.size
        buf[offsets[2] + 20] ^= 0xFF  # damage the third change
        path.write_bytes(bytes(buf))
        s2 = FileStore("t", path, ("/id",), recorded=True, clock=CLOCK)
        report = await s2.open()
        assert report.status == "repaired"
        assert report.damage is not None and report.damage.offset == offsets[2]
        assert report.damage.reason == "crc mismatch"
        assert report.records == 2 and report.file_seq == 2  # the log replays from seq 3
        await s2.close()

    run(body())


def test_a_file_of_another_topic_is_moved_aside(tmp_path: Path) -> None:
    async def body() -> None:
        path = tmp_path / "x.sow"
        a = FileStore("a", path, (), recorded=False, clock=CLOCK)
        await a.open()
        a.put("k", b"v")
        await a.close()
        b = FileStore("b", path, (), recorded=False, clock=CLOCK)
        report = await b.open()
        assert report.status == "replaced" and len(b) == 0
        assert report.moved_to is not None and report.moved_to.exists()
        await b.close()
        path.write_bytes(b"not a sow file at all")
        c = FileStore("c", path, (), recorded=False, clock=CLOCK)
        report = await c.open()
        assert report.status == "replaced"
        await c.close()

    run(body())


def test_hot_keys_cost_one_change_per_write_and_compaction_keeps_the_state(
    tmp_path: Path,
) -> None:
    async def body() -> None:
        b = Backend("file", tmp_path)
        s = await b.open()
        for i in range(1000):
            s.put(f"k{i % 10}", b"%d" % i, seq=i + 1)
        await s.flush()
        one_write = s.file_bytes
        buf = b.path.read_bytes()
        header = decode_header(buf)
        assert not isinstance(header, str)
        assert len(list(read_changes(buf, header.size))) == 10
        for round_ in range(20):
            for k in range(10):
                s.put(f"k{k}", b"r%d" % round_, seq=2000 + round_ * 10 + k)
            await s.flush()
        assert s.file_bytes > 10 * one_write
        before = state(s)
        report = await s.compact()
        assert report.records == 10 and report.after < report.before
        assert report.at_us == int(CLOCK.time() * 1_000_000)
        # writes after a compaction go to the new file
        s.put("new", b"n", seq=5000)
        await s.flush()
        after = {**before, "new": (b"n", 5000, 0, 0, 0, 0)}
        await s.close()
        s2 = await b.open()
        assert state(s2) == after and s2.file_seq == 5000
        await s2.close()

    run(body())


def test_changed_key_paths_derive_the_keys_again(tmp_path: Path) -> None:
    async def body() -> None:
        path = tmp_path / "t.sow"
        s = FileStore("t", path, ("/id",), recorded=False, clock=CLOCK)
        await s.open()
        s.put("1", b'{"id":1,"sym":"IBM"}')
        s.put("2", b'{"id":2,"sym":"MSFT"}')
        s.put("3", b'{"id":3}')
        await s.close()
        s2 = FileStore("t", path, ("/sym",), recorded=False, clock=CLOCK, rekey=_rekey)
        report = await s2.open()
        assert report.rekeyed and report.dropped == 1
        assert sorted(r.key for r in s2.records()) == ["IBM", "MSFT"]
        await s2.close()
        header = decode_header(path.read_bytes())
        assert not isinstance(header, str) and header.keys == ("/sym",)

    run(body())


def test_a_write_failure_is_latched_and_reported(tmp_path: Path) -> None:
    async def body() -> None:
        events: list[tuple[str, str, dict[str, object]]] = []
        path = tmp_path / "t.sow"
        s = FileStore("t", path, (), recorded=False, clock=CLOCK,
                      on_event=lambda *e: events.append(e))  # fmt: skip
        await s.open()
        assert s._fd is not None
        os.close(s._fd)  # the descriptor goes bad under the writer
        s.put("a", b"1")
        await s.flush()
        assert isinstance(s.write_error, OSError)
        assert events and events[0][1] == "sow_write_failed"
        s.put("b", b"2")  # still answered from memory
        await s.flush()
        assert s.unwritten == 0 and s.get("b") is not None
        s._fd = None
        await s.close()

    run(body())


@settings(max_examples=30, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("put"), st.sampled_from("abcde"), st.binary(max_size=8)),
            st.tuples(st.just("delete"), st.sampled_from("abcde"), st.just(b"")),
            st.tuples(st.just("durable"), st.just(""), st.just(b"")),
            st.tuples(st.just("crash"), st.just(""), st.just(b"")),
            st.tuples(st.just("compact"), st.just(""), st.just(b"")),
        ),
        max_size=40,
    )
)
def test_crashes_and_compactions_keep_the_durable_state(tmp_path_factory: Any, script: Any) -> None:
    """A state machine over a recorded topic: after a crash the store holds exactly the
    changes the log had made durable (and the writer had written)."""

    async def body() -> None:
        path: Path = tmp_path_factory.mktemp("sm") / "t.sow"
        s = FileStore("t", path, (), recorded=True, clock=CLOCK)
        await s.open()
        oracle: dict[str, bytes] = {}
        durable_oracle: dict[str, bytes] = {}
        log: list[tuple[int, str, str, bytes]] = []
        seq = s.file_seq
        for op, key, data in script:
            if op in ("put", "delete"):
                seq += 1
                if op == "put":
                    s.put(key, data, seq=seq)
                    oracle[key] = data
                else:
                    s.delete(key, seq=seq)
                    oracle.pop(key, None)
                log.append((seq, op, key, data))
            elif op == "durable":
                s.durable(seq)
                await s.flush()
                durable_oracle = dict(oracle)
            elif op == "compact":
                await s.compact()
            else:  # crash: the writer stops, the file is read back by a new store
                s._closing = True
                s._wake.set()
                await s.flush()
                if s._fd is not None:
                    os.close(s._fd)
                s = FileStore("t", path, (), recorded=True, clock=CLOCK)
                await s.open()
                assert {r.key: r.body for r in s.records()} == durable_oracle
                # the log replays what the file does not hold
                for lseq, lop, lkey, ldata in log:
                    if lseq > s.file_seq:
                        if lop == "put":
                            s.put(lkey, ldata, seq=lseq)
                        else:
                            s.delete(lkey, seq=lseq)
                assert {r.key: r.body for r in s.records()} == oracle
        await s.close()

    run(body())


def test_records_are_immutable() -> None:
    s = MemoryStore("t")
    rec = s.put("a", b"1").new
    assert isinstance(rec, SowRecord)
    with pytest.raises(AttributeError):
        rec.body = b"2"  # type: ignore[misc]


@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    script=st.lists(
        st.tuples(
            st.sampled_from(["put", "put", "put", "delete"]),
            st.integers(min_value=0, max_value=12),
            st.binary(max_size=40),
            st.integers(min_value=0, max_value=2**40),
        ),
        max_size=60,
    )
)
def test_a_compaction_copies_exactly_what_decoding_and_encoding_again_would_write(
    tmp_path_factory: Any, script: list[tuple[str, int, bytes, int]]
) -> None:
    """The compaction copies the live puts' bytes instead of decoding and re-encoding
    them; the oracle is the decode + encode it replaced (read_sow_file, then write_sow_file
    of those records): the same changes, in the same order, the same last sequence."""
    tmp = tmp_path_factory.mktemp("compact")

    async def body() -> None:
        b = Backend("file", tmp)
        s = await b.open()
        for seq, (op, k, payload, expires) in enumerate(script, start=1):
            if op == "put":
                s.put(f"k{k}", payload, seq=seq, expires_us=expires)
            else:
                s.delete(f"k{k}", seq=seq)
        await s.flush()
        oracle_path = tmp / "oracle.sow"
        read = read_sow_file(b.path)
        assert read.header is not None
        live = [
            new_record(c.key, c.body or b"", c.seq, c.timestamp_us, c.pub_hash, c.pub_seq,
                       c.expires_us, 0)
            for c in read.records.values()
        ]  # fmt: skip
        write_sow_file(oracle_path, "orders", ("/id",), read.file_seq, live)
        await s.compact()
        got, want = b.path.read_bytes(), oracle_path.read_bytes()
        head_got, head_want = decode_header(got), decode_header(want)
        assert not isinstance(head_got, str) and not isinstance(head_want, str)
        assert head_got.base_seq == head_want.base_seq == read.file_seq
        assert got[head_got.size :] == want[head_want.size :]
        await s.close()

    run(body())
