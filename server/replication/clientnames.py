"""Client names across a fabric: a logon asks the linked instances first.

A publisher's identity is a hash of its client name, and replication de-duplicates by it
(publisher + sequence): two clients with one name publishing through two instances at
once would make each other's messages look like duplicates, dropped fabric-wide. So before
an instance grants a logon, it asks every instance it has a live link with (either
direction): ``claim`` (name, when this logon began, this instance), and each answers
``claimed``:

- **held** when a client of that name is logged on there, or when a logon of that name
  is itself waiting for answers there and began earlier (ties: the lower instance Name):
  the logon here fails with ``name in use elsewhere``, naming the instance;
- **free** otherwise.

Two logons of one name on two instances at the same moment both wait for answers; the
earlier one is told free, the later one held, so exactly one is granted. An instance that
does not answer within :data:`CLAIM_TIMEOUT` (a stalled link), or whose link goes away
meanwhile, is not waited for: the logon proceeds and ``replication/client_name_unconfirmed``
says with whom it could not be checked. Instances not linked here (a partition, or no link
in the topology) cannot be asked; the replicated stream finds what they let through
(server/replication/collisions.py).

This answers with what is true now: a client logged on elsewhere that disconnects frees the
name at once for the next logon anywhere (no cached table to expire).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Iterable
from typing import Any, Final

from spool.server.clock import Clock
from spool.server.replication.fabricview import PeerLink
from spool.server.replication.peerframes import Claim, Claimed
from spool.server.stats.source import EventSink

__all__ = ["CLAIM_TIMEOUT", "ClientNames"]

#: seconds a logon waits for the linked instances' answers
CLAIM_TIMEOUT: Final = 5.0


class ClientNames:
    """This instance's side of the claims. Owned by the event loop.

    Args:
        me: this instance's Name.
        clock: for when a logon began, and the timeout.
        events: the event log.
        links: the live links, one per linked instance.
        refused: told ``(name, why)`` of each logon refused (the conflicts list).
    """

    def __init__(
        self,
        me: str,
        clock: Clock,
        events: EventSink,
        links: Callable[[], Iterable[PeerLink]],
        refused: Callable[[str, str], None],
    ) -> None:
        self._me = me
        self._refused = refused
        self._clock = clock
        self._events = events
        self._links = links
        #: whether a client of a name is logged on here (set by the engine)
        self.held_here: Callable[[str], bool] = lambda _name: False
        self._ids = itertools.count(1)
        #: logons of this instance waiting for answers: name -> (since, ...)
        self._pending: dict[str, list[int]] = {}
        #: (claim id) -> (the link asked, its answer)
        self._waiting: dict[int, tuple[PeerLink, asyncio.Future[Claimed | None]]] = {}

    def asks(self) -> bool:
        """Whether a logon here must ask other instances first (some link is live)."""
        return any(True for _ in self._links())

    async def claim(self, name: str) -> str | None:
        """Ask every linked instance whether ``name`` is free; None when it is, else why
        not (where it is held)."""
        since = int(self._clock.time() * 1e6)
        pending = self._pending.setdefault(name, [])
        pending.append(since)
        asked: list[tuple[PeerLink, int]] = []
        try:
            loop = asyncio.get_running_loop()
            for link in {lk.peer_name: lk for lk in self._links()}.values():
                ident = next(self._ids)
                future: asyncio.Future[Claimed | None] = loop.create_future()
                self._waiting[ident] = (link, future)
                if link.send_peer(Claim(ident, name, since, self._me)):
                    asked.append((link, ident))
                else:
                    del self._waiting[ident]
            if not asked:
                return None
            futures = [self._waiting[i][1] for _, i in asked]
            done = await self._wait(futures)
            unanswered = [link.peer_name for (link, _), fut in zip(asked, futures, strict=True)
                          if fut not in done or fut.result() is None]  # fmt: skip
            for (_link, _ident), fut in zip(asked, futures, strict=True):
                answer = fut.result() if fut in done else None
                if answer is not None and answer.held_by is not None:
                    self._refused(name, answer.detail)
                    return answer.detail
            if unanswered:
                self._events.emit(
                    "warning", "replication", "client_name_unconfirmed", client=name,
                    instances=",".join(unanswered),
                    detail=f"the logon of {name!r} was granted without an answer from "
                    f"{', '.join(unanswered)} (no answer within {CLAIM_TIMEOUT:.0f} s, or "
                    "the link went away)",
                )  # fmt: skip
            return None
        finally:
            pending.remove(since)
            if not pending:
                del self._pending[name]
            for _, ident in asked:
                self._waiting.pop(ident, None)

    async def _wait(
        self, futures: list[asyncio.Future[Claimed | None]]
    ) -> set[asyncio.Future[Claimed | None]]:
        """The futures answered within the timeout (on the instance's clock)."""
        loop = asyncio.get_running_loop()
        timer = loop.create_task(self._clock.sleep(CLAIM_TIMEOUT))
        waiting: list[asyncio.Future[Any]] = [timer, asyncio.gather(*futures)]
        try:
            await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        finally:
            timer.cancel()
        return {f for f in futures if f.done()}

    def answer(self, claim: Claim) -> Claimed:
        """What this instance says to another's claim (module docstring)."""
        if self.held_here(claim.name):
            return Claimed(
                claim.id, self._me,
                f"client name {claim.name!r} is logged on at instance {self._me!r}",
            )  # fmt: skip
        theirs = (claim.since, claim.instance)
        if any((since, self._me) < theirs for since in self._pending.get(claim.name, ())):
            return Claimed(
                claim.id, self._me,
                f"client name {claim.name!r} is logging on at instance {self._me!r}",
            )  # fmt: skip
        return Claimed(claim.id, None, "")

    def answered(self, answer: Claimed, link: object) -> None:
        """An answer came over ``link``."""
        entry = self._waiting.get(answer.id)
        if entry is not None and entry[0] is link and not entry[1].done():
            entry[1].set_result(answer)

    def link_down(self, link: object) -> None:
        """``link`` went away: the claims it carried get no answer."""
        for asked, future in list(self._waiting.values()):
            if asked is link and not future.done():
                future.set_result(None)
