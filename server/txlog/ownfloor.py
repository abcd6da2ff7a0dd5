"""The floor of the instance's own identity: how far it numbered records no file backs.

The instance numbers its own records (server/txlog/incarnation.py) one after its highest
sequence. When recovery cuts a torn tail, or a fence holds records nothing names, records
of that identity the peers hold may be gone here; the log then moves the identity's
highest past them (``Publishers.skip``), so its next record does not take one of their
bookmarks, and the sequences passed over become a gap a late copy fills. No record backs
that highest: were the instance to stop before it writes another record of its own, the
table rebuilt at the next open (server/txlog/clients.py, the journals' index summaries)
would start below it again, and a new record would reuse a lost one's bookmark.

So the log writes the moved highest durably to ``NAME.ownfloor`` before it takes another
append (at open) or right after the skip (a fence found while running), and reads it at
every open: an own highest below the floor moves up to it, the sequences in between
opening as a gap (``TransactionLog.open``). The file is small and separate from the
journals, so removing old journals never takes it. It names the incarnation it belongs
to: a log that starts over under a new token ignores the floor of the old one.

Layout: one line, ``TOKEN FLOOR`` (the incarnation token, 32 hex digits; the floor, a
decimal), written whole through the file seam (``write_durable``: a crash leaves the old
file or the new one). A file that is there but not in this form could have held any
floor: the caller starts a new incarnation then, which is always safe.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Final

from server.txlog.files import FileSeam, write_durable

__all__ = ["UNREADABLE", "floor_name", "read_floor", "write_floor"]

_LINE: Final = re.compile(r"([0-9a-f]{32}) ([0-9]{1,20})")
#: :func:`read_floor` of a file that is there but does not say a floor
UNREADABLE: Final = -1


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
