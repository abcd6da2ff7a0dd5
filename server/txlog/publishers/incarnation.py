"""The incarnation of an instance's log: which log numbered the instance's own records.

The instance numbers its own records (queue acks and ownership changes, ``sow_delete``
removals, the messages it publishes itself) under one publisher identity, one sequence
after the highest its log holds. Its peers hold those records and de-duplicate them by
bookmark. A log that starts over (a data directory wiped or lost, restored empty or
bootstrapped from a peer) does not know how far its earlier log numbered them: its peers,
or one that is down, or a third instance behind an async link, may hold records of the
earlier log past anything it can learn. Numbering from what it holds would give a new
record the bookmark of an old one: the peers would drop the new one as a duplicate (an
acknowledgement or an ownership change lost) and this instance the old one.

So the identity names the log, not only the instance: ``NAME.incarnation`` in the journal
directory holds a random token (128 bits), created with the log and kept as long as the log
is (server/bookmarks.py ``broker_pub_hash(name, token)``). A log that starts with no
journal at all gets a new token, whatever file is left; so does a log whose file is gone or
unreadable (a new identity is always safe: it only adds one publisher to the tables). The
file is written durably before the log takes its first append, so no record is ever
numbered under a token a crash could lose.

The records of an earlier incarnation stay what they are: records of another publisher,
de-duplicated and replayed like any, which the bootstrap or the peers' resync bring back.
"""

from __future__ import annotations

import re
import secrets
from pathlib import Path
from typing import Final

from spool.server.txlog.storage.files import FileSeam, write_durable

__all__ = ["incarnation_name", "own_incarnation", "read_incarnation"]

_TOKEN: Final = re.compile(r"[0-9a-f]{32}")


def incarnation_name(instance: str) -> str:
    """``NAME.incarnation``."""
    return f"{instance}.incarnation"


def own_incarnation(directory: Path, instance: str, seam: FileSeam, *, fresh: bool) -> str:
    """The log's incarnation token (worker thread): the one its file holds, or a new one
    written durably when the log starts over (``fresh``: it holds no journal) or the file
    is missing or unreadable."""
    if not fresh and (token := read_incarnation(directory, instance)) is not None:
        return token
    token = secrets.token_hex(16)
    write_durable(seam, directory / incarnation_name(instance), token.encode("ascii") + b"\n")
    return token


def read_incarnation(directory: Path, instance: str) -> str | None:
    """The token ``NAME.incarnation`` in ``directory`` holds (None: no file, or not a
    token)."""
    try:
        token = (directory / incarnation_name(instance)).read_bytes().decode("ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return token if _TOKEN.fullmatch(token) else None
