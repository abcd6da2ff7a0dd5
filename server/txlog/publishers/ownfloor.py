"""The floor of the instance's own identity: how far it may have numbered its records.

The instance numbers its own records (server/txlog/publishers/incarnation.py) one after its highest
sequence. Records of that identity its peers hold may be gone here: a cut tail, a fence
that holds records nothing names, or a tail the storage lost whole at a record boundary,
which leaves a clean end nothing at open can tell from the real one. Numbering on from
what the log holds would give a new record the bookmark of a lost one (the peers drop it
as a duplicate, and this log the lost one when it comes back).

So the log keeps ``NAME.ownfloor``: a sequence no record of the identity is numbered
beyond before the file says so. An instance that replicates numbers *ahead* against it:
at open the identity's highest moves up to the floor (the sequences in between opening
as a gap a late copy fills), and a new floor :data:`RESERVE` above is written durably
before the log takes an append; while it runs, a new floor is written once the highest
is half way there, and a record past a floor not yet written is refused. Whatever the
storage lost, the next record of the identity is numbered above every one it numbered
before. An instance that does not replicate has no peer to hold its records: it writes
the floor only when it skips past lost records (``Publishers.skip``), so the skip
survives a restart before another record backs it.

The file is small and separate from the journals, so removing old journals never takes
it. It names the incarnation it belongs to: a log that starts over under a new token
ignores the floor of the old one.

Layout: one line, ``TOKEN FLOOR`` (the incarnation token, 32 hex digits; the floor, a
decimal), written whole through the file seam (``write_durable``: a crash leaves the old
file or the new one). A file that is there but not in this form could have held any
floor: the caller starts a new incarnation then, which is always safe.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Final

from spool.server.txlog.storage.files import FileSeam, write_durable

__all__ = ["RESERVE", "UNREADABLE", "floor_name", "read_floor", "write_floor"]

_LINE: Final = re.compile(r"([0-9a-f]{32}) ([0-9]{1,20})")
#: :func:`read_floor` of a file that is there but does not say a floor
UNREADABLE: Final = -1
#: how far ahead of its highest an instance that replicates numbers its own records: a
#: restart passes over at most this many sequences (a gap costs one interval), and a
#: floor is written once per half of it while running
RESERVE: Final = 1 << 20


def floor_name(instance: str) -> str:
    """``NAME.ownfloor``."""
    return f"{instance}.ownfloor"


def read_floor(directory: Path, instance: str, token: str) -> int:
    """The floor of incarnation ``token`` (worker thread): 0 when there is no file or it
    belongs to another incarnation, :data:`UNREADABLE` when the file cannot be read or
    is not in its form."""
    try:
        text = (directory / floor_name(instance)).read_bytes().decode("ascii").strip()
    except FileNotFoundError:
        return 0
    except (OSError, UnicodeDecodeError):
        return UNREADABLE
    m = _LINE.fullmatch(text)
    if m is None:
        return UNREADABLE
    return int(m.group(2)) if m.group(1) == token else 0


def write_floor(seam: FileSeam, directory: Path, instance: str, token: str, floor: int) -> None:
    """Write the floor of incarnation ``token`` durably (worker thread).

    Raises:
        OSError: it could not be written.
    """
    write_durable(seam, directory / floor_name(instance), f"{token} {floor}\n".encode("ascii"))
