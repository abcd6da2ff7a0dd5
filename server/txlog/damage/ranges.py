"""Damage found in a journal: which bytes, which local sequences, who found it and when.

A :class:`DamagedRange` is what every check reports, whoever runs it: recovery at open
(the edge checks of finished journals, the full check of the active one), the scrub
(every byte of every journal, paced, server/txlog/damage/scrub.py), a read that met a bad
record, ``spool journal verify``. The log keeps the ranges it found (``damage``), the admin
API, the dashboard, the metrics and the event log show them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["DamagedRange", "FoundBy"]

#: which check found the damage
FoundBy = Literal["startup", "scrub", "read", "verify"]


@dataclass(frozen=True, slots=True)
class DamagedRange:
    """Bytes of one journal that are not intact records.

    Attributes:
        journal: the journal's base seq (its id).
        path: its file.
        offset: where the damage starts in it.
        end: where intact records resume (for damage that runs to the end of the data,
            the end of its last non-zero byte).
        first_seq: the first local seq whose record is not intact.
        last_seq: the last one (``first_seq - 1`` for bytes that held no record, None when
            not known: damage up to the end of the last journal's data).
        reason: what the check found (``crc mismatch``, ``torn record``, ``index block
            does not match``...).
        found_by: ``startup``, ``scrub``, ``read`` or ``verify``.
        found_us: when (microseconds since the Unix epoch, UTC).
    """

    journal: int
    path: str
    offset: int
    end: int
    first_seq: int
    last_seq: int | None
    reason: str
    found_by: FoundBy
    found_us: int

    @property
    def records(self) -> int | None:
        """Local sequences the range held (None: not known)."""
        return None if self.last_seq is None else self.last_seq - self.first_seq + 1

    def to_dict(self) -> dict[str, object]:
        """A JSON-ready dict (the admin API, the ``journal_damaged`` event)."""
        return {
            "journal": self.journal,
            "path": self.path,
            "offset": self.offset,
            "end": self.end,
            "first_seq": self.first_seq,
            "last_seq": self.last_seq,
            "records": self.records,
            "reason": self.reason,
            "found_by": self.found_by,
            "found_us": self.found_us,
        }
