"""The fields of a control message's decoded JSON object, checked as they are read.

The link's messages (frames.py) and the bootstrap's (bootframes.py) read their fields
with these, so a missing or mistyped field is refused the same way in both: a
:class:`~spool.server.replication.errors.ReplicationProtocolError` naming the message and
the field.
"""

from __future__ import annotations

from spool.server.replication.errors import ReplicationProtocolError

__all__ = ["int_field", "str_field"]


def str_field(obj: dict[str, object], key: str, what: str, *, optional: bool = False) -> str | None:
    """The string ``obj[key]`` of the message ``what`` (None when ``optional`` and absent
    or null)."""
    value = obj.get(key)
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise ReplicationProtocolError(f"{what} needs a string {key!r}")
    return value


def int_field(obj: dict[str, object], key: str, what: str) -> int:
    """The non-negative integer ``obj[key]`` of the message ``what`` (a bool is not one)."""
    value = obj.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ReplicationProtocolError(f"{what} needs a non-negative integer {key!r}")
    return value
