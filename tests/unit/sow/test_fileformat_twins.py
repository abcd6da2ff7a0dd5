"""The SOW file's compiled loops against their pure-Python oracles: the writer's batch
encoder (same bytes; a field that does not fit raises the same error) and the compaction's
walk (same live offsets, same last sequence, same damage and reason on valid, damaged and
adversarial files)."""

from __future__ import annotations

import random
import struct

import google_crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spool.server.ports import SowRecord
from spool.server.sow.fileformat import (
    SowDamage,
    encode_delete,
    encode_header,
    encode_puts_py,
    live_changes_py,
)
from spool.server.sow.memory import new_record
from tests.support.twins import compiled, outcome, typed

_c = compiled("spool.server.sow._fileformat_c")

U64 = 1 << 64
edge_ints = st.one_of(
    st.integers(min_value=0, max_value=1000),
    st.integers(min_value=U64 - 2, max_value=U64 + 1),
    st.integers(min_value=-2, max_value=-1),
    st.integers(min_value=(1 << 63) - 1, max_value=(1 << 63) + 1),
    st.integers(min_value=-(1 << 63) - 1, max_value=-(1 << 63) + 1),
)
keys = st.one_of(st.sampled_from(["k1", "k2", "", "é€", "k3"]), st.text(max_size=6))
records = st.builds(
    new_record, keys, st.binary(max_size=40), edge_ints, edge_ints, edge_ints, edge_ints,
    edge_ints, st.just(0),
)  # fmt: skip


def _compiled_puts(recs: list[SowRecord]) -> bytes:
    return _c.encode_puts(recs, encode_puts_py)  # type: ignore[no-any-return]


@given(st.lists(records, max_size=12))
def test_encode_puts_twins_agree(recs: list[SowRecord]) -> None:
    assert typed(outcome(_compiled_puts, recs)) == typed(outcome(encode_puts_py, recs))


def _live_c(buf: bytes, pos: int, base: int) -> object:
    live, top, damage = _c.live_changes(buf, pos, base)
    return live, top, (SowDamage(*damage) if damage is not None else None)


changes = st.lists(
    st.tuples(st.booleans(), st.sampled_from(["a", "b", "c", "é"]), st.binary(max_size=20),
              st.integers(min_value=0, max_value=U64 - 1)),
    max_size=20,
)  # fmt: skip


def _file(script: list[tuple[bool, str, bytes, int]]) -> tuple[bytes, int]:
    head = encode_header("orders", ("/id",), 7)
    parts = [head]
    for put, key, body, seq in script:
        if put:
            parts.append(encode_puts_py([new_record(key, body, seq, 1, 2, 3, 0, 0)]))
        else:
            parts.append(encode_delete(key, seq))
    return b"".join(parts), len(head)


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(changes, st.integers(min_value=0, max_value=2**40), st.randoms(use_true_random=False))
def test_live_changes_twins_agree_on_valid_and_damaged_files(
    script: list[tuple[bool, str, bytes, int]], base: int, rnd: random.Random
) -> None:
    buf, start = _file(script)
    variants = [buf, buf[: rnd.randrange(start, len(buf) + 1)]]
    if len(buf) > start:
        flipped = bytearray(buf)
        at = rnd.randrange(start, len(buf))
        flipped[at] ^= 1 << rnd.randrange(8)
        variants.append(bytes(flipped))
    for v in variants:
        assert typed(outcome(_live_c, v, start, base)) == typed(
            outcome(live_changes_py, v, start, base)
        )


@given(st.binary(max_size=200), st.integers(min_value=0, max_value=50))
def test_live_changes_twins_agree_on_arbitrary_bytes(buf: bytes, pos: int) -> None:
    assert typed(outcome(_live_c, buf, pos, 0)) == typed(outcome(live_changes_py, buf, pos, 0))


def _sealed(change: bytes) -> bytes:
    """``change`` (without its CRC) with a correct CRC: damage the CRC does not catch."""
    return change + struct.pack("<I", google_crc32c.value(change))


def test_each_damage_reason_is_the_same_in_both() -> None:
    """One file per reason, so none depends on hypothesis finding it."""
    good = encode_puts_py([new_record("k", b"v", 5, 1, 2, 3, 0, 0)])
    put = struct.Struct("<IBBHQqQQqI")
    bad_utf8 = _sealed(put.pack(put.size + 1 + 1 + 4, 1, 0, 1, 5, 1, 2, 3, 0, 1) + b"\xffv")
    mismatch = _sealed(put.pack(put.size + 1 + 1 + 4, 1, 0, 1, 5, 1, 2, 3, 0, 9) + b"kv")
    cases = {
        "torn change": good + good[:10],
        "zero length": good + b"\x00" * 16,
        "bad op": bytes([*good[:4], 9, *good[5:]]),
        "crc mismatch": good[:-1] + bytes([good[-1] ^ 1]),
        "bad length": (20).to_bytes(4, "little") + good[4:20],
        "bad utf-8": bad_utf8,
        "length mismatch": mismatch,
        "": good + encode_delete("k", 6),
    }
    for reason, buf in cases.items():
        want = live_changes_py(buf, 0, 0)
        assert (want[2].reason if want[2] else "") == reason
        assert typed(outcome(_live_c, buf, 0, 0)) == typed(outcome(live_changes_py, buf, 0, 0))
