"""Finding an instance's files: one journal per base, its index, leftovers sorted out."""

from __future__ import annotations

from pathlib import Path

from spool.server.txlog.recovery.discovery import discover
from spool.server.txlog.storage.files import index_name, journal_name, prealloc_name


def touch(directory: Path, name: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_bytes(b"")
    return path


def test_journals_indexes_and_preallocated_files(tmp_path: Path) -> None:
    jdir, adir = tmp_path / "j", tmp_path / "a"
    j1 = touch(adir, journal_name("spool", 1))
    i1 = touch(adir, index_name("spool", 1))
    j5 = touch(jdir, journal_name("spool", 5, "zstd"))
    j9 = touch(jdir, journal_name("spool", 9))
    i9 = touch(jdir, index_name("spool", 9))
    p3 = touch(jdir, prealloc_name("spool", 3))
    p12 = touch(jdir, prealloc_name("spool", 12))
    touch(jdir, journal_name("spool-b", 1))  # another instance sharing the directory
    touch(jdir, "notes.txt")
    found = discover(jdir, adir, "spool")
    got = [(c.base, c.path, c.compression, c.archived, c.index_path) for c in found.journals]
    assert got == [
        (1, j1, None, True, i1),
        (5, j5, "zstd", False, None),
        (9, j9, None, False, i9),
    ]
    assert found.preallocated == [p3, p12]
    assert found.next_prealloc_number == 13
    assert found.duplicates == [] and found.leftovers == []


def test_an_interrupted_archive_or_compress_keeps_the_most_advanced_copy(tmp_path: Path) -> None:
    jdir, adir = tmp_path / "j", tmp_path / "a"
    plain = touch(jdir, journal_name("spool", 1))
    zst = touch(jdir, journal_name("spool", 1, "zstd"))
    plain_index = touch(jdir, index_name("spool", 1))
    archived = touch(adir, journal_name("spool", 1, "zstd"))
    archived_index = touch(adir, index_name("spool", 1))
    found = discover(jdir, adir, "spool")
    [cand] = found.journals
    assert (cand.path, cand.archived, cand.index_path) == (archived, True, archived_index)
    assert sorted(found.duplicates) == sorted([plain, zst])
    assert found.leftovers == [plain_index]  # beside a copy that was dropped


def test_temporary_files_and_orphaned_indexes_are_leftovers(tmp_path: Path) -> None:
    jdir = tmp_path / "j"
    tmp = touch(jdir, index_name("spool", 1) + ".tmp")
    orphan = touch(jdir, index_name("spool", 7))
    touch(jdir, index_name("other", 7) + ".tmp")  # not ours: left alone
    found = discover(jdir, None, "spool")
    assert found.journals == []
    assert sorted(found.leftovers) == sorted([tmp, orphan])
    assert found.next_prealloc_number == 1


def test_missing_directories_hold_nothing(tmp_path: Path) -> None:
    found = discover(tmp_path / "none", tmp_path / "neither", "spool")
    assert (found.journals, found.preallocated, found.duplicates) == ([], [], [])
