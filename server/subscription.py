"""A subscription of one client: what it asked for and where it stands."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    import asyncio

    from server.delivery import BookmarkSink
    from server.expr import Filter
    from server.protocol.options import SubscribeOptions
    from server.session import Session

State = Literal["live", "replaying", "paused"]


@dataclass(eq=False, slots=True)
class Subscription:
    """One subscription.

    Live subscriptions sit in the :class:`~server.router.Router` and get messages as they
    are published; bookmark subscriptions are fed by a replay cursor over the transaction
    log for their whole life (see server/replay.py) and never enter the router.
    """

    session: Session
    sub_id: str
    topic: str
    pattern: re.Pattern[str] | None
    filter: Filter | None
    filter_text: str | None
    options: SubscribeOptions
    bookmark: str | None = None
    bookmark_kind: str = "none"
    want_ts: bool = False
    cid: str | None = None
    acks: frozenset[str] = frozenset()
    state: State = "live"
    position: str = ""
    position_seq: int = 0
    position_time_us: int = 0
    delivered: int = 0
    task: asyncio.Task[Any] | None = None
    cursor: Any = None
    sink: BookmarkSink | None = None
    sid_bytes: bytes = field(default=b"")

    @property
    def is_bookmark(self) -> bool:
        return self.bookmark is not None
