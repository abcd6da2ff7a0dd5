"""Finding an instance's files: journals (one per base), their indexes, preallocated files.

The first step of recovery, and all of it that looks at directory listings. Only files
named by the prefix rule of this instance (:func:`~spool.server.txlog.storage.files.parse_name`) are
considered, in the journal directory and the archive directory. What an interrupted
operation can leave behind is sorted out here, without touching anything:

- the same journal twice (an archive or compress that stopped between writing the new
  copy and deleting the old): the most advanced copy is kept (archived > compressed >
  plain), the other is listed in :attr:`Discovered.duplicates`;
- ``*.tmp`` files of an atomic write, index files without their journal or beside a copy
  that was dropped: listed in :attr:`Discovered.leftovers`.

Recovery deletes both lists when it may change the disk.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from spool.server.txlog.storage.files import Compression, parse_name

__all__ = ["Candidate", "Discovered", "discover"]


@dataclass(slots=True)
class Candidate:
    """A journal file found on disk, before it is checked.

    Attributes:
        base: its base sequence (from its name).
        path: where it is.
        compression: ``zstd``/``gzip`` or None.
        archived: it lives in the archive directory.
        index_path: its index file, in the same directory, if there is one.
    """

    base: int
    path: Path
    compression: Compression | None
    archived: bool
    index_path: Path | None = None

    @property
    def rank(self) -> int:
        """How far along archive / compress this copy is (the higher one is kept)."""
        return 2 if self.archived else 1 if self.compression else 0


@dataclass(slots=True)
class Discovered:
    """An instance's files as found.

    Attributes:
        journals: one candidate per base, sorted by base.
        preallocated: the preallocated files, by number.
        next_prealloc_number: the number the next preallocated file takes.
        duplicates: copies of a journal that a more advanced copy replaces.
        leftovers: ``*.tmp`` files and orphaned index files.
    """

    journals: list[Candidate]
    preallocated: list[Path] = field(default_factory=list)
    next_prealloc_number: int = 1
    duplicates: list[Path] = field(default_factory=list)
    leftovers: list[Path] = field(default_factory=list)


def discover(journal_dir: Path, archive_dir: Path | None, instance: str) -> Discovered:
    """List ``instance``'s files in both directories (a missing directory holds none)."""
    cands: dict[int, Candidate] = {}
    indexes: dict[int, list[Path]] = {}
    preallocs: list[tuple[int, Path]] = []
    found = Discovered([])
    for directory, archived in ((journal_dir, False), (archive_dir, True)):
        if directory is None:
            continue
        try:
            names = sorted(os.listdir(directory))
        except FileNotFoundError:
            continue
        for name in names:
            path = directory / name
            if name.endswith(".tmp"):
                if parse_name(name[:-4], instance) is not None:
                    found.leftovers.append(path)  # an interrupted atomic write
                continue
            parsed = parse_name(name, instance)
            if parsed is None:
                continue
            if parsed.kind == "index":
                indexes.setdefault(parsed.base, []).append(path)
            elif parsed.kind == "prealloc" and not archived:
                preallocs.append((parsed.number, path))
            elif parsed.kind == "journal":
                cand = Candidate(parsed.base, path, parsed.compression, archived)
                old = cands.get(parsed.base)
                if old is None:
                    cands[parsed.base] = cand
                elif cand.rank > old.rank:
                    found.duplicates.append(old.path)
                    cands[parsed.base] = cand
                else:
                    found.duplicates.append(path)
    for base, paths in indexes.items():
        owner = cands.get(base)
        for path in paths:
            if owner is not None and path.parent == owner.path.parent:
                owner.index_path = path
            else:
                found.leftovers.append(path)  # no journal, or beside a copy that was dropped
    preallocs.sort()
    found.journals = [cands[base] for base in sorted(cands)]
    found.preallocated = [p for _, p in preallocs]
    found.next_prealloc_number = preallocs[-1][0] + 1 if preallocs else 1
    return found
