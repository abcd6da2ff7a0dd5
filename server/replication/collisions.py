"""Publisher identity collisions found on the replicated stream.

Replication de-duplicates by bookmark. Two publishers that share an identity (one client
name used on two instances the logon check could not ask) publish the same bookmarks with
different messages, and each instance keeps whichever copy it got first. This finds them:
the watch remembers each publisher's *origin* per appended run (a few segments per
publisher, never per message); a duplicate from another origin is a *suspect*, checked off
the event loop by comparing the held record's body. Another body is a **collision**:
logged, kept in the conflicts list and shown as an alert. Bounded by
:data:`MAX_SUSPECTS` and :data:`MAX_SEGMENTS`. See docs/replication.md "Publisher
identities".
"""

from __future__ import annotations

import asyncio
import bisect
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from spool.server.clock import Clock
from spool.server.ports import PublishRun
from spool.server.replication.conflicts import Conflicts
from spool.server.replication.frames import Holdings, Origins
from spool.server.replication.hops import format_hop, parse_hop
from spool.server.stats.source import EventSink
from spool.server.txlog import TransactionLog

__all__ = ["MAX_SEGMENTS", "MAX_SUSPECTS", "CollisionWatch", "differing_origins"]

#: suspects waiting to be checked at most
MAX_SUSPECTS: Final = 1024
#: origin segments kept per publisher
MAX_SEGMENTS: Final = 64
#: late records (gap fills) whose origin is kept per publisher
MAX_LATE: Final = 1024
#: the origin of a client's publish to this instance
HERE: Final = ""


@dataclass(slots=True)
class _Origins:
    """Where one publisher's records came from, by sequence."""

    firsts: list[int] = field(default_factory=list)
    origins: list[str] = field(default_factory=list)
    late: dict[int, str] = field(default_factory=dict)

    def note(self, first: int, origin: str, late: bool) -> None:
        if late:
            if len(self.late) >= MAX_LATE:
                del self.late[next(iter(self.late))]
            self.late[first] = origin
            return
        if self.origins and self.origins[-1] == origin:
            return
        self.firsts.append(first)
        self.origins.append(origin)
        if len(self.firsts) > MAX_SEGMENTS:
            del self.firsts[0]
            del self.origins[0]

    def of(self, seq: int) -> str | None:
        """The origin of the record with ``seq`` (None: not known)."""
        late = self.late.get(seq)
        if late is not None:
            return late
        i = bisect.bisect_right(self.firsts, seq) - 1
        return self.origins[i] if i >= 0 else None


@dataclass(frozen=True, slots=True)
class _Suspect:
    pub_hash: int
    pub_seq: int
    body: bytes
    origin: str
    held_origin: str | None
    via: str


def differing_origins(mine: Origins, theirs: Origins, holdings: Holdings) -> dict[int, int]:
    """Per publisher, the first sequence a destination holds (``holdings``) that came to it
    from another origin than this instance's record of it (``mine``, ``theirs``: origin
    segments): a resync starts no later than that record, so the destination compares the
    two (its holdings alone would skip it)."""
    out: dict[int, int] = {}
    for pub, segs in theirs.items():
        ours = mine.get(pub)
        held = holdings.get(pub)
        if not ours or held is None:
            continue
        last = held[0]
        bounds = sorted({f for f, _ in ours} | {f for f, _ in segs})
        for lo in bounds:
            if lo > last:
                break
            if _at(ours, lo) not in (None, _at(segs, lo)) and _at(segs, lo) is not None:
                out[pub] = lo
                break
    return out


def _at(segments: list[tuple[int, str]], seq: int) -> str | None:
    i = bisect.bisect_right(segments, (seq, "\uffff")) - 1
    return segments[i][1] if i >= 0 else None


class CollisionWatch:
    """The publish pipeline's identity watch (server/ports.py ``IdentityWatch``) on an
    instance that replicates. Owned by the event loop.

    Args:
        me: this instance's Name (an origin of ``""`` is it).
        group: its Group.
        txlog: where held copies are read.
        clock: for the conflicts' times.
        events: the event log.
        conflicts: where confirmed collisions are kept.
    """

    def __init__(
        self,
        me: str,
        group: str,
        txlog: TransactionLog,
        clock: Clock,
        events: EventSink,
        conflicts: Conflicts,
    ) -> None:
        self._me = me
        self._hop = format_hop(me, group)
        self._txlog = txlog
        self._clock = clock
        self._events = events
        self._conflicts = conflicts
        self._origins: dict[int, _Origins] = {}
        self._suspects: deque[_Suspect] = deque()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        #: publishers whose collision is confirmed: pub_hash -> (the conflict's name, how
        #: the detail names it)
        self._confirmed: dict[int, tuple[str, str]] = {}
        #: a client name for a publisher identity, when one is known here (the engine's)
        self.name_of: Callable[[int], str | None] = lambda _h: None
        #: suspects checked, collisions found, suspects not checked (the queue was full)
        self.checked = 0
        self.collisions = 0
        self.unchecked = 0

    def origins(self) -> Origins:
        """Where this instance's records of each publisher came from, as far as it knows
        (its own publishes as its path entry): a source resyncing to it sends a record
        this instance holds from another origin, so the two are compared here."""
        me = self._hop
        return {
            h: [(f, o or me) for f, o in zip(o_.firsts, o_.origins, strict=True)]
            for h, o_ in self._origins.items()
        }

    # -- the pipeline's calls (per run; per duplicate) ------------------------------------

    def appended(
        self, pub_hash: int, first_pub_seq: int, path: tuple[str, ...], late: bool
    ) -> None:
        if not pub_hash:
            return
        origins = self._origins.get(pub_hash)
        if origins is None:
            origins = self._origins[pub_hash] = _Origins()
        origins.note(first_pub_seq, path[0] if path else HERE, late)

    def origin(self, pub_hash: int, pub_seq: int) -> str | None:
        known = self._origins.get(pub_hash)
        return known.of(pub_seq) if known is not None else None

    def duplicate(self, run: PublishRun, i: int, pub_seq: int, via: str) -> None:
        pub_hash = run.pub_hash
        if not pub_hash:
            return
        origin = run.path[0] if run.path else HERE
        known = self._origins.get(pub_hash)
        held = known.of(pub_seq) if known is not None else None
        if held == origin:
            return  # the same message again, by another route
        confirmed = self._confirmed.get(pub_hash)
        if confirmed is not None:
            name, label = confirmed
            detail = self._detail(label, pub_seq, held, origin, via)
            self._conflicts.report("publisher", name, detail, self._clock.time())
            self.collisions += 1
            return
        if len(self._suspects) >= MAX_SUSPECTS:
            self.unchecked += 1
            return
        self._suspects.append(_Suspect(pub_hash, pub_seq, run.bodies[i], origin, held, via))
        self._wake.set()
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._check_loop(), name="spool-repl-collisions"
            )

    # -- checking ---------------------------------------------------------------------------

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _check_loop(self) -> None:
        while True:
            if not self._suspects:
                self._wake.clear()
                await self._wake.wait()
                continue
            suspect = self._suspects.popleft()
            try:
                await self._check(suspect)
            except Exception as exc:  # a damaged journal: say so, go on with the next
                self._events.emit(
                    "error", "replication", "collision_check_failed",
                    publisher=suspect.pub_hash, seq=suspect.pub_seq, error=repr(exc),
                )  # fmt: skip

    async def _check(self, suspect: _Suspect) -> None:
        confirmed = self._confirmed.get(suspect.pub_hash)
        if confirmed is None:
            txlog = self._txlog
            seq = await txlog.locate_bookmark(suspect.pub_hash, suspect.pub_seq)
            if seq is None:
                return  # no longer held here (its journal was removed): nothing to compare
            records = await txlog.read_appended(seq, max_count=1)
            self.checked += 1
            if not records or records[0].body == suspect.body:
                return  # the same message, published again through another instance
            held = records[0].path[0] if records[0].path else HERE
            client = self.name_of(suspect.pub_hash)
            name = client or f"publisher {suspect.pub_hash}"
            label = f"client {client!r}" if client else name
            self._confirmed[suspect.pub_hash] = (name, label)
            detail = self._detail(label, suspect.pub_seq, held, suspect.origin, suspect.via)
            self._events.emit(
                "error", "replication", "publisher_collision", publisher=name,
                pub_hash=suspect.pub_hash, seq=suspect.pub_seq, held_from=self._where(held),
                dropped_from=self._where(suspect.origin), via=suspect.via, detail=detail,
            )  # fmt: skip
        else:
            name, label = confirmed
            detail = self._detail(label, suspect.pub_seq, suspect.held_origin, suspect.origin,
                                  suspect.via)  # fmt: skip
        self.collisions += 1
        self._conflicts.report("publisher", name, detail, self._clock.time())

    # -- helpers ----------------------------------------------------------------------------

    def _where(self, origin: str | None) -> str:
        if origin is None:
            return "an instance not known here"
        if origin == HERE:
            return f"{self._me!r} (here)"
        return repr(parse_hop(origin).name)

    def _detail(self, name: str, seq: int, held: str | None, dropped: str | None, via: str) -> str:
        return (
            f"{name} published sequence {seq} through {self._where(held)} and, with another "
            f"message, through {self._where(dropped)} (it arrived from {via}); this instance "
            "keeps the first and dropped the second: two publishers share one client name "
            "(the logon check could not see it: a partition, or no link between them); "
            "give each its own"
        )
