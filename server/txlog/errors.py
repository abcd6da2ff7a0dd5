"""Failures of the transaction log, one class per reason.

The transaction log raises these on purpose; everything else is a bug. ``TxlogFull`` is a
wire failure (``txlog full``) and lives in :mod:`spool.server.protocol.errors` with the other
reasons a client can see; it is re-exported here so storage code has one import.

Hierarchy::

    SpoolError
    ├── ProtocolFailure
    │   └── TxlogFull                   appending would exceed TransactionLog/MaxSize
    └── TxlogError                      root of storage failures
        ├── TxlogWriteFailed            a journal write or fsync failed; appends refused while retried
        ├── TxlogClosed                 used before open() or after close()
        ├── CorruptRecord               bytes that are not a valid record (codec)
        ├── FencedRecords               a read reached records that are damaged and fenced
        ├── RecordTooLarge              a string or body exceeds its on-disk length field
        ├── FieldOutOfRange             an integer does not fit its on-disk field
        ├── PublisherSequenceRegression append with a pub_seq not above that publisher's last
        ├── InvalidInstanceName         an instance name that cannot prefix file names
        ├── JournalSequenceGap          a journal is missing between two others at open
        ├── JournalNotFound             no journal with that id
        ├── JournalActive               the active journal cannot be archived/compressed/removed
        ├── JournalUnfinished           a just-rolled journal whose finishing write is refused
        └── JournalPinned               a replay, queue or replication destination still needs it
"""

from __future__ import annotations

from spool.server.protocol.errors import SpoolError, TxlogFull

__all__ = [
    "CorruptRecord",
    "FencedRecords",
    "FieldOutOfRange",
    "InvalidInstanceName",
    "JournalActive",
    "JournalNotFound",
    "JournalPinned",
    "JournalSequenceGap",
    "JournalUnfinished",
    "OwnFloorUnwritten",
    "PublisherSequenceRegression",
    "PublishersUnsaved",
    "RecordTooLarge",
    "TxlogClosed",
    "TxlogError",
    "TxlogFull",
    "TxlogWriteFailed",
]


class TxlogError(SpoolError):
    """Root of the transaction log's own failures."""


class TxlogWriteFailed(TxlogError):
    """A journal write, fsync, truncate or file creation failed.

    It starts a write outage (:class:`~spool.server.txlog.append.outage.WriteOutage`): the log refuses
    appends with this exception while it retries the write on its own, through fresh file
    descriptors (after a failed fsync the page cache can no longer be trusted to match the
    disk), and takes appends again once a retry writes and fsyncs everything it had
    accepted. Clients see it as ``txlog full`` with this message as the detail.

    Attributes:
        path: the file whose operation failed.
        operation: ``write``, ``fsync``, ``truncate`` or ``open``.
        cause: the ``OSError`` (``ENOSPC``, ``EIO``...).
    """

    def __init__(self, path: str, operation: str, cause: BaseException) -> None:
        super().__init__(f"journal {operation} failed on {path}: {cause}")
        self.path = path
        self.operation = operation
        self.cause = cause


class TxlogClosed(TxlogError):
    """The log is not open (before :meth:`open` or after :meth:`close`)."""


class CorruptRecord(TxlogError):
    """Bytes that do not decode as a journal record.

    Attributes:
        offset: byte offset of the bad record in the buffer or file.
        reason: short machine-friendly reason (``crc mismatch``, ``torn record``...).
        path: the file, when known.
    """

    def __init__(self, offset: int, reason: str, path: str = "") -> None:
        where = f"{path} at offset {offset}" if path else f"offset {offset}"
        super().__init__(f"corrupt record at {where}: {reason}")
        self.offset = offset
        self.reason = reason
        self.path = path


class RecordTooLarge(TxlogError):
    """A variable-length field does not fit its length prefix.

    Attributes:
        field: the record field (``topic``, ``body``...).
        size: its encoded size in bytes.
        limit: the largest size the format can store.
    """

    def __init__(self, field: str, size: int, limit: int) -> None:
        super().__init__(f"{field} is {size} bytes; the journal format stores at most {limit}")
        self.field = field
        self.size = size
        self.limit = limit


class FieldOutOfRange(TxlogError):
    """An integer field does not fit its fixed-width slot (e.g. a negative ``pub_seq``)."""

    def __init__(self, field: str, value: int) -> None:
        super().__init__(f"{field}={value} does not fit its journal field")
        self.field = field
        self.value = value


class PublisherSequenceRegression(TxlogError):
    """An append whose ``pub_seq`` is not above the publisher's last one.

    The engine drops duplicates before appending (docs/protocol.md: ``s`` must increase); the
    log refuses them too because its bookmark index relies on each publisher's sequence
    increasing along the log.
    """

    def __init__(self, pub_hash: int, pub_seq: int, last: int) -> None:
        super().__init__(f"publisher {pub_hash}: pub_seq {pub_seq} is not above {last}")
        self.pub_hash = pub_hash
        self.pub_seq = pub_seq
        self.last = last


class OwnFloorUnwritten(TxlogError):
    """A record of the instance's own identity numbered past the floor written so far
    (server/txlog/publishers/ownfloor.py): refused until the log has written a floor above it, so
    no restart can number another record with its bookmark. The log writes the floor
    well before its highest gets there; this is seen only when that write fails.
    """

    def __init__(self, pub_seq: int, floor: int) -> None:
        super().__init__(
            f"own record {pub_seq} is past the floor written so far ({floor}): "
            "refused until the floor is written (NAME.ownfloor)"
        )
        self.pub_seq = pub_seq
        self.floor = floor


class InvalidInstanceName(TxlogError):
    """The instance name cannot be used as a journal file prefix."""


class FencedRecords(TxlogError):
    """A read reached local sequences whose records are damaged or missing.

    The log keeps their place (a fence, server/txlog/damage/fences.py) until a repair from a
    replication peer writes them back; a reader gets this instead of data, and may go on
    from ``last_seq + 1`` where it asked to skip damage.

    Attributes:
        first_seq, last_seq: the fenced range.
        path: the journal the damage was found in.
        reason: what was wrong (``crc mismatch``, ``journal missing``...).
        publishers: ``(pub_hash, first pub_seq, last pub_seq)`` of the bookmarks the
            fenced records are known to lie in (may be empty).
    """

    def __init__(
        self,
        first_seq: int,
        last_seq: int,
        path: str,
        reason: str,
        publishers: tuple[tuple[int, int, int], ...] = (),
    ) -> None:
        n = last_seq - first_seq + 1
        super().__init__(
            f"records {first_seq}..{last_seq} ({n} local seq{'' if n == 1 else 's'}) are "
            f"damaged and fenced ({reason}, {path}): they are not served until a repair "
            "from a replication peer writes them back"
        )
        self.first_seq = first_seq
        self.last_seq = last_seq
        self.path = path
        self.reason = reason
        self.publishers = publishers


class JournalSequenceGap(TxlogError):
    """A journal is missing between two others: the log is not contiguous.

    Recovery cuts damaged tails on its own, but a hole in the middle means files were
    deleted by hand; guessing would lose or reorder data, so opening is refused.
    """

    def __init__(self, expected: int, found: int, path: str) -> None:
        super().__init__(
            f"journal sequence gap: expected a journal starting at seq {expected}, "
            f"next is {path} starting at {found}"
        )
        self.expected = expected
        self.found = found
        self.path = path


class JournalNotFound(TxlogError):
    """No journal has that id."""

    def __init__(self, journal_id: int) -> None:
        super().__init__(f"no journal with id {journal_id}")
        self.journal_id = journal_id


class JournalActive(TxlogError):
    """The active journal cannot be archived, compressed or removed."""

    def __init__(self, journal_id: int) -> None:
        super().__init__(f"journal {journal_id} is the active journal")
        self.journal_id = journal_id


class JournalUnfinished(TxlogError):
    """A journal was just rolled and the commit that finishes it on disk waits for a write
    outage to end: it cannot be archived, compressed or removed before that."""

    def __init__(self, journal_id: int) -> None:
        super().__init__(
            f"journal {journal_id} is not finished on disk yet: the transaction log cannot "
            "write now and retries"
        )
        self.journal_id = journal_id


class PublishersUnsaved(TxlogError):
    """Journals cannot be removed because ``clients.ack`` could not be written to cover them.

    Each publisher's last sequence (de-duplication across restarts) lives in the journals
    and, for journals already removed, only in ``clients.ack``. Removing a journal that
    file does not cover yet would make a restart forget the publishers seen only there and
    accept their next messages whatever the sequence, so the removal is refused instead.

    Attributes:
        journal_id: the journal that was asked for.
        cause: the error writing the file.
    """

    def __init__(self, journal_id: int, cause: OSError) -> None:
        super().__init__(
            f"journal {journal_id} was not removed: the publishers it holds could not be "
            f"saved to clients.ack ({cause}); free some space or archive the journal instead"
        )
        self.journal_id = journal_id
        self.cause = cause


class JournalPinned(TxlogError):
    """A journal is still needed by a pin holder (replay, queue, replication destination).

    Attributes:
        journal_id: the journal that was asked for.
        owner: the pin holder that needs it.
        seq: the pinned sequence (the journal holds records at or after it).
    """

    def __init__(self, journal_id: int, owner: str, seq: int) -> None:
        super().__init__(f"journal {journal_id} is still needed by {owner} (from seq {seq})")
        self.journal_id = journal_id
        self.owner = owner
        self.seq = seq
