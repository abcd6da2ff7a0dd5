"""What recovery found and did: :class:`RecoveryReport` and the :class:`Truncation` s in it.

Recovery (:mod:`.recover`) returns one report per run; the log keeps the one of its
:meth:`~spool.server.txlog.log.TransactionLog.open` (``recovery_report``, ``recovery_*``
statistics, a ``recovery_truncated`` event per cut) and ``spool journal verify`` prints
it. Both are plain values: frozen, JSON-ready through ``to_dict()``.
"""

from __future__ import annotations

from dataclasses import dataclass

from spool.server.txlog.damage.ranges import DamagedRange

__all__ = ["RecoveryReport", "Truncation", "recovery_stats"]


@dataclass(frozen=True, slots=True)
class Truncation:
    """One cut made (or, read-only, that would be made) by recovery.

    Attributes:
        path: the journal cut.
        offset: where the cut starts in it (0: the whole journal).
        bytes_cut: bytes removed from the log (up to the last non-zero byte).
        reason: why (``crc mismatch``, ``torn record``, ``follows damaged journal``...).
        first_seq_cut: the seq the first lost record had (or would have had).
        saved_to: where the cut bytes were kept, when they were.
        last_kept_us: the time of the last record kept before the cut (None: none).
    """

    path: str
    offset: int
    bytes_cut: int
    reason: str
    first_seq_cut: int
    saved_to: str | None = None
    last_kept_us: int | None = None

    def to_dict(self) -> dict[str, object]:
        """A JSON-ready dict (also the fields of the ``recovery_truncated`` event)."""
        return {
            "path": self.path,
            "offset": self.offset,
            "bytes_cut": self.bytes_cut,
            "reason": self.reason,
            "first_seq_cut": self.first_seq_cut,
            "saved_to": self.saved_to,
            "last_kept_us": self.last_kept_us,
        }


@dataclass(frozen=True, slots=True)
class RecoveryReport:
    """What recovery found and did.

    Attributes:
        instance: the instance name (file prefix).
        files_scanned: journals examined.
        records_recovered: records in the log after recovery.
        first_seq: oldest seq available (``last_seq + 1`` when empty).
        last_seq: newest seq (0 when the log is empty).
        bytes_verified: journal bytes whose CRCs were checked.
        bytes_truncated: total bytes cut.
        truncations: every cut.
        indexes_rebuilt: journals whose index was rebuilt from their records.
        index_problems: why indexes could not be used (``verify`` reports these).
        clients_ack: ``used``, ``partial`` (stale or behind), ``rebuilt`` (missing/bad).
        publishers: publishers known after recovery.
        duplicates_removed: copies of the same journal left by an interrupted operation.
        duration_s: wall time of recovery.
        damage: damaged ranges found in journals that were kept (finished journals'
            edge checks).
        fenced: the fences this recovery made (or, read-only, would make), as dicts
            (server/txlog/damage/fences.py ``Fence.to_dict``).
        unnamed: durable records cut from the end of the log that nothing names (a
            peer's acknowledgment said they were durable; no file said which they
            were): their seqs are held by released placeholders; same dicts.
    """

    instance: str
    files_scanned: int
    records_recovered: int
    first_seq: int
    last_seq: int
    bytes_verified: int
    bytes_truncated: int
    truncations: tuple[Truncation, ...]
    indexes_rebuilt: tuple[str, ...]
    index_problems: tuple[str, ...]
    clients_ack: str
    publishers: int
    duplicates_removed: tuple[str, ...]
    duration_s: float
    damage: tuple[DamagedRange, ...] = ()
    fenced: tuple[dict[str, object], ...] = ()
    unnamed: tuple[dict[str, object], ...] = ()

    @property
    def clean(self) -> bool:
        """Nothing was cut, fenced or lost, and no damage found."""
        return not (self.truncations or self.damage or self.fenced or self.unnamed)

    def to_dict(self) -> dict[str, object]:
        """A JSON-ready dict (for the event log and ``--json``)."""
        return {
            "instance": self.instance,
            "files_scanned": self.files_scanned,
            "records_recovered": self.records_recovered,
            "first_seq": self.first_seq,
            "last_seq": self.last_seq,
            "bytes_verified": self.bytes_verified,
            "bytes_truncated": self.bytes_truncated,
            "truncations": [t.to_dict() for t in self.truncations],
            "indexes_rebuilt": list(self.indexes_rebuilt),
            "index_problems": list(self.index_problems),
            "clients_ack": self.clients_ack,
            "publishers": self.publishers,
            "duplicates_removed": list(self.duplicates_removed),
            "duration_s": round(self.duration_s, 6),
            "damage": [d.to_dict() for d in self.damage],
            "fenced": list(self.fenced),
            "unnamed": list(self.unnamed),
        }


def recovery_stats(report: RecoveryReport | None) -> dict[str, float]:
    """The ``recovery_*`` entries of the log's ``stats()`` (zeros before any recovery)."""
    if report is None:
        return {"recovery_seconds": 0.0, "recovery_truncated_bytes": 0.0, "recovery_records": 0.0}
    return {
        "recovery_seconds": report.duration_s,
        "recovery_truncated_bytes": float(report.bytes_truncated),
        "recovery_records": float(report.records_recovered),
    }
