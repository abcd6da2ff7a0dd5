"""The one failure the replay layer raises itself.

A module of its own because two layers detect it (a member handed records that skip its
position, a cursor handed a batch that is not contiguous), and neither should import the
other to raise it.
"""

from __future__ import annotations

from spool.server.protocol.errors import SpoolError


class ReplayGapError(SpoolError):
    """The source broke its contract (a batch that skips or repeats sequence numbers).

    The cursor stops rather than deliver a gap or a duplicate; the engine logs it and ends
    the subscription.
    """
