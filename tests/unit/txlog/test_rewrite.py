"""A journal written anew survives an interruption at every step: the next open finishes
a rewrite that reached its commit point and drops one that did not, and the journal and
its index always match."""

from __future__ import annotations

from pathlib import Path

import pytest

from spool.server.txlog.format.codec import encode
from spool.server.txlog.format.record import RecordKind
from spool.server.txlog.index.fileformat import parse_sealed
from spool.server.txlog.recovery.rewrite import NEW_SUFFIX, adopt_pending, rewrite_journal
from spool.server.txlog.storage.files import OsFileSeam, index_name, journal_name
from spool.server.txlog.storage.source import PlainSource

INSTANCE = "spool-a"


def records(first: int, n: int, tag: bytes) -> bytes:
    return b"".join(
        encode(s, s, 7, s, "t", "json", RecordKind.PUBLISH, (), 0, tag * 10)
        for s in range(first, first + n)
    )


def written(tmp: Path, data: bytes) -> Path:
    path = tmp / journal_name(INSTANCE, 1)
    path.write_bytes(data)
    return path


def rewrite(
    tmp: Path, data: bytes, source: PlainSource | None = None, seam: OsFileSeam | None = None
) -> Path:
    return rewrite_journal(
        directory=tmp, instance=INSTANCE, base=1, parts=[data], source=source, replaces=None,
        seam=seam or OsFileSeam(), block_bytes=512,
    )  # fmt: skip


def matches(tmp: Path, data: bytes) -> bool:
    """The journal holds ``data`` and its index describes exactly that."""
    journal = tmp / journal_name(INSTANCE, 1)
    footer = parse_sealed((tmp / index_name(INSTANCE, 1)).read_bytes(), 1)
    return journal.read_bytes() == data and footer is not None and footer.data_len == len(data)


def test_a_rewrite_replaces_the_journal_and_its_index(tmp_path: Path) -> None:
    old = records(1, 50, b"a")
    written(tmp_path, old)
    new = records(1, 50, b"b")
    path = rewrite(tmp_path, new)
    assert path == tmp_path / journal_name(INSTANCE, 1)
    assert matches(tmp_path, new)
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(NEW_SUFFIX)]


class CrashingSeam(OsFileSeam):
    """The real seam, killed at the rename of a rewrite's ``.new`` file number ``at``."""

    def __init__(self, at: int) -> None:
        self.at = at
        self.swaps = 0

    def rename(self, src: Path, dst: Path) -> None:
        if src.name.endswith(NEW_SUFFIX):
            self.swaps += 1
            if self.swaps == self.at:
                raise KeyboardInterrupt("killed")
        super().rename(src, dst)


@pytest.mark.parametrize(("step", "at"), [("both written", 1), ("journal swapped", 2)])
def test_an_interrupted_rewrite_past_its_commit_point_is_finished_at_the_next_open(
    tmp_path: Path, step: str, at: int
) -> None:
    old = records(1, 50, b"a")
    written(tmp_path, old)
    (tmp_path / index_name(INSTANCE, 1)).write_bytes(b"an old index")
    new = records(1, 60, b"b")
    with pytest.raises(KeyboardInterrupt):
        rewrite(tmp_path, new, seam=CrashingSeam(at))
    assert adopt_pending(tmp_path, INSTANCE) == [1], step
    assert matches(tmp_path, new)
    assert adopt_pending(tmp_path, INSTANCE) == []  # nothing left to finish


def test_an_interrupted_rewrite_before_its_commit_point_leaves_the_old_journal(
    tmp_path: Path,
) -> None:
    old = records(1, 50, b"a")
    path = written(tmp_path, old)
    # the new journal was being written, its index not yet: no commit
    (tmp_path / (path.name + NEW_SUFFIX)).write_bytes(records(1, 10, b"b")[:-7])
    assert adopt_pending(tmp_path, INSTANCE) == []
    assert path.read_bytes() == old
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(NEW_SUFFIX)]


def test_a_new_index_whose_journal_is_short_is_not_a_commit(tmp_path: Path) -> None:
    old = records(1, 50, b"a")
    path = written(tmp_path, old)
    rewrite(tmp_path, records(1, 30, b"b"))
    # simulate a crash during the next rewrite: its index written, its journal torn
    new = records(1, 40, b"c")
    index = (tmp_path / index_name(INSTANCE, 1)).read_bytes()
    (tmp_path / (index_name(INSTANCE, 1) + NEW_SUFFIX)).write_bytes(index)
    (tmp_path / (path.name + NEW_SUFFIX)).write_bytes(new[:100])
    assert adopt_pending(tmp_path, INSTANCE) == []
    assert matches(tmp_path, records(1, 30, b"b"))
