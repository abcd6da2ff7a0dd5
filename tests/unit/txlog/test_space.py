"""Preallocated files and MaxSize accounting (`DiskSpace`), alone, on real files.

The interesting part is a roll while a preallocation is under way in its thread: the
preallocation's room is counted already, so the new journal takes it (``void``) and the
file is deleted when done, instead of the roll failing with ``txlog full``.
"""

from __future__ import annotations

import asyncio
import errno
import threading
from pathlib import Path

import pytest

from spool.server.clock import VirtualClock
from spool.server.txlog import TxlogFull
from spool.server.txlog.append.space import DiskSpace
from spool.server.txlog.storage.files import FileSeam, OsFileSeam, journal_name, prealloc_name
from tests.unit.txlog.helpers import INSTANCE, FaultySeam, run

SIZE = 4096
Events = list[tuple[str, dict[str, object]]]


class GatedSeam(FaultySeam):
    """Allocations of preallocated files wait for ``gate`` while ``gating`` is set."""

    def __init__(self, operation: str = "write", fail_at: int = 1 << 62) -> None:
        super().__init__(operation, fail_at, errno.ENOSPC)
        self.gating = False
        self.gate = threading.Event()
        self.waiting = threading.Event()

    def check(self, operation: str, path: Path) -> None:
        if operation == "allocate" and self.gating:
            self.waiting.set()
            assert self.gate.wait(10)
        super().check(operation, path)


def space(
    tmp: Path, *, want: int = 1, max_files: int = 0, seam: FileSeam | None = None,
    events: Events | None = None,
) -> DiskSpace:  # fmt: skip
    """A DiskSpace of ``SIZE``-byte journals; ``max_files`` journals fit (0: unlimited)."""
    tmp.mkdir(parents=True, exist_ok=True)
    seen: Events = events if events is not None else []
    return DiskSpace(
        tmp, INSTANCE, journal_size=SIZE, max_size=max_files * SIZE, want=want,
        seam=seam or OsFileSeam(), emit=lambda name, fields: seen.append((name, fields)),
        clock=VirtualClock(),
    )  # fmt: skip


def preallocated(tmp: Path) -> list[str]:
    return sorted(p.name for p in tmp.glob("*.prealloc.*"))


def roll(disk: DiskSpace, tmp: Path) -> Path | None:
    """A roll as the log makes it: account the journal; a preallocated file it takes is
    renamed into a journal (by the flusher, in the log)."""
    taken = disk.room_for_roll()
    if taken is not None:
        taken.rename(tmp / journal_name(INSTANCE, len(list(tmp.glob("*.journal"))) + 1))
    return taken


def test_prepare_keeps_wanted_files_and_makes_missing_ones_while_they_fit(tmp_path: Path) -> None:
    big = tmp_path / prealloc_name(INSTANCE, 1)
    tmp_path.mkdir(exist_ok=True)
    big.write_bytes(b"\0" * (SIZE + 1))  # larger than a journal: not reusable
    small = tmp_path / prealloc_name(INSTANCE, 2)
    small.write_bytes(b"")
    disk = space(tmp_path, want=3, max_files=3)
    disk.prepare([big, small], 3, journal_bytes=SIZE)  # the active journal takes one
    # kept the small one (allocated to full size), made one more; a third would not fit
    assert preallocated(tmp_path) == [prealloc_name(INSTANCE, 2), prealloc_name(INSTANCE, 3)]
    assert small.stat().st_size == SIZE
    assert disk.files == (small, tmp_path / prealloc_name(INSTANCE, 3))
    assert disk.used == 3 * SIZE


def test_a_roll_takes_a_preallocated_file_then_counts_new_ones_up_to_max_size(
    tmp_path: Path,
) -> None:
    disk = space(tmp_path, want=1, max_files=3)
    disk.prepare([], 1, journal_bytes=SIZE)
    assert disk.used == 2 * SIZE
    assert roll(disk, tmp_path) == tmp_path / prealloc_name(INSTANCE, 1)
    assert disk.files == () and disk.used == 2 * SIZE  # its room was counted already
    assert roll(disk, tmp_path) is None and disk.used == 3 * SIZE  # created on demand
    with pytest.raises(TxlogFull):
        roll(disk, tmp_path)
    assert disk.used == 3 * SIZE
    disk.resize(SIZE, 1000)  # a journal finished with 1000 bytes of data
    disk.release(1000)  # and removed
    assert disk.used == 2 * SIZE
    assert roll(disk, tmp_path) is None and disk.used == 3 * SIZE


def test_replenish_refills_while_files_fit(tmp_path: Path) -> None:
    async def body() -> None:
        disk = space(tmp_path, want=2, max_files=4)
        disk.prepare([], 1, journal_bytes=SIZE)
        assert len(disk.files) == 2 and disk.used == 3 * SIZE
        roll(disk, tmp_path)
        roll(disk, tmp_path)
        await disk.replenish()  # one fits beside three journals, not two
        assert len(preallocated(tmp_path)) == len(disk.files) == 1 and disk.used == 4 * SIZE
        disk.release(SIZE)  # an old journal removed: room for the second one
        await disk.replenish()
        assert len(preallocated(tmp_path)) == len(disk.files) == 2 and disk.used == 4 * SIZE
        assert (disk.busy, disk.void) == (0, 0)

    run(body)


def test_a_roll_during_a_preallocation_takes_its_room_and_the_file_goes(tmp_path: Path) -> None:
    async def body() -> None:
        seam = GatedSeam()
        disk = space(tmp_path, want=1, max_files=2, seam=seam)
        disk.prepare([], 1, journal_bytes=SIZE)  # active + one preallocated: full
        roll(disk, tmp_path)  # the roll takes the preallocated file
        disk.release(SIZE)  # an old journal removed: room for one file
        seam.gating = True
        making = asyncio.ensure_future(disk.replenish())
        await asyncio.to_thread(seam.waiting.wait, 10)
        assert (disk.busy, disk.void, disk.used) == (1, 0, 2 * SIZE)
        assert roll(disk, tmp_path) is None  # no file, no room: takes the reserved room
        assert (disk.busy, disk.void, disk.used) == (1, 1, 2 * SIZE)
        with pytest.raises(TxlogFull):  # nothing reserved is left to take
            roll(disk, tmp_path)
        seam.gate.set()
        await making
        assert (disk.busy, disk.void, disk.used) == (0, 0, 2 * SIZE)
        assert disk.files == () and preallocated(tmp_path) == []  # deleted when done

    run(body)


@pytest.mark.parametrize("taken", [False, True])
def test_a_failed_preallocation_gives_its_room_back_once(tmp_path: Path, taken: bool) -> None:
    """The room goes back to ``used`` unless a roll already took it."""

    async def body() -> None:
        events: Events = []
        seam = GatedSeam("allocate", fail_at=2)  # 1st: prepare's file; 2nd: fails
        disk = space(tmp_path, want=1, max_files=2, seam=seam, events=events)
        disk.prepare([], 1, journal_bytes=SIZE)
        roll(disk, tmp_path)
        disk.release(SIZE)
        seam.gating = True
        making = asyncio.ensure_future(disk.replenish())
        await asyncio.to_thread(seam.waiting.wait, 10)
        if taken:
            assert roll(disk, tmp_path) is None
        seam.gate.set()
        await making
        assert (disk.busy, disk.void) == (0, 0)
        assert disk.used == 2 * SIZE if taken else SIZE
        assert disk.files == () and preallocated(tmp_path) == []
        assert [name for name, _ in events] == ["preallocation_failed"]
        assert disk.shortfall is not None and disk.shortfall.ready == 0

    run(body)


def test_prepare_on_a_disk_without_room_starts_short_instead_of_failing(tmp_path: Path) -> None:
    """Preallocation is an optimisation: a disk without room for the files at open is a
    shortfall (reported once, on the loop), not an error."""
    events: Events = []
    seam = FaultySeam("allocate", fail_at=2, err=errno.ENOSPC)  # the second file fails
    disk = space(tmp_path, want=3, seam=seam, events=events)
    disk.prepare([], 1, journal_bytes=SIZE)
    assert len(disk.files) == 1 and preallocated(tmp_path) == [prealloc_name(INSTANCE, 1)]
    assert disk.used == 2 * SIZE  # the journal and the one file: the failed one gave back
    shortfall = disk.shortfall
    assert shortfall is not None and (shortfall.wanted, shortfall.ready) == (3, 1)
    assert "No space left" in shortfall.error or "injected" in shortfall.error
    assert events == []  # prepare runs in open's thread: nothing is emitted there
    disk.report()
    disk.report()
    assert [name for name, _ in events] == ["preallocation_failed"]


def test_after_a_failed_preallocation_no_file_is_tried_until_a_roll_or_room(
    tmp_path: Path,
) -> None:
    """Replenish runs after every commit; after a failure it must not claim and give back
    ``JournalSize`` bytes at each of them. A roll, or :meth:`retry` (journals removed),
    allows one more attempt; success clears the shortfall."""

    async def body() -> None:
        events: Events = []
        seam = FaultySeam("allocate", fail_at=1, err=errno.ENOSPC)
        disk = space(tmp_path, want=1, seam=seam, events=events)
        disk.prepare([], 1, journal_bytes=SIZE)
        assert seam.calls["allocate"] == 1 and disk.files == ()
        for _ in range(5):  # five commits
            await disk.replenish()
        assert seam.calls["allocate"] == 1
        disk.retry()
        await disk.replenish()
        assert seam.calls["allocate"] == 2 and disk.files == ()
        seam.heal()
        await disk.replenish()
        assert seam.calls["allocate"] == 2  # blocked again by that failure
        roll(disk, tmp_path)  # a roll without a file: worth another try
        await disk.replenish()
        assert len(disk.files) == 1 and disk.shortfall is None
        assert [name for name, _ in events] == ["preallocation_failed", "preallocation_restored"]

    run(body)
