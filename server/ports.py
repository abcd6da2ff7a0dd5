"""The seams of the engine core: what subsystems implement and what they are handed.

Everything that is not the engine core plugs in here, so these types import nothing of the
core (only the protocol, the config model and the record types):

- :class:`Outbound`: where the broker sends bytes for one peer. A client ``Session``
  implements it; a replication link and a test double will.
- :class:`Origin`: who sent a publish (a client, a replication link, the broker itself),
  kept apart from the *record's* publisher identity (``PublishRun.pub_hash``), whose
  bookmark a record carries: a replicated message arrives from a link but keeps the
  bookmark of the client that published it elsewhere.
- :class:`PublishRun` / :class:`AppendedRun`: the unit of the publish pipeline, a run of
  consecutive publishes to one topic (a single publish is a run of one), as columns.
- :class:`PublishStage` and its hooks: what the pipeline calls for each run (before the
  append, after it), when the local fsync moves, and once per journal batch at
  start-up. The live fan-out is the first stage; SOW, queues and the replication push
  come next.
- :class:`DurabilityHorizon`: how far the log is durable. Persisted acks, flush acks and
  ``fully_durable`` subscriptions wait on it. Today it is the local fsync; with
  replication it also waits for every sync destination. It also says when it *cannot*
  move (the log refuses writes), so that acks waiting on it fail instead of waiting.
- :class:`TopicStore`: keyed current state of a topic (SOW topics, later queues), one
  interface for its memory and persistent backends; its values are :class:`SowRecord`
  and every change is reported as a :class:`Change`.
- :class:`FrameHandler`: what a connection hands its received frames to (the dispatcher).
- :class:`NameClaims`: whether a client name is free across the replication fabric, asked
  before a logon is granted (the replication service's client names).
- :class:`IdentityWatch`: what the publish pipeline tells replication about each
  publisher's runs and duplicates, so two publishers that share an identity are found
  (server/replication/collisions.py).
- :class:`HappeningSink` (:class:`TopicSink` for the SOW families) and the happenings
  (:class:`ClientHappening`, :class:`SubscriptionHappening`, :class:`LinkHappening`,
  :class:`SowRemovalHappening`, :class:`SowChangeHappening`, :class:`DeadLetterHappening`):
  what the parts that react to
  the broker's own life (event topics, message-driven actions) are told, through the bus
  of server/happenings.py.

Who implements what is listed in docs/architecture.md ("Ports").
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import (
    Any,
    ClassVar,
    Literal,
    NamedTuple,
    Protocol,
    TypeAlias,
    TypeVar,
    runtime_checkable,
)

from spool.server.config import UserConfig
from spool.server.protocol.errors import ProtocolFailure
from spool.server.txlog.format.batch import RecordBatch
from spool.server.txlog.format.record import Record, RecordKind

#: an ack header value (docs/protocol.md "Acks")
AckValue = str | int | float | bool | None

#: one message of a run that asked for acks: (index in the run, ack kinds, cid)
AckRequest = tuple[int, frozenset[str], str | None]

#: messages of a run a preparing stage refuses alone: (index in the run, why)
Refusals = list[tuple[int, ProtocolFailure]]

OriginKind = Literal["client", "replication", "broker"]

_T = TypeVar("_T")


class Outbound(Protocol):
    """Where the broker sends to one peer: a client session, a replication link, a double.

    Sends never block and never raise: a closed peer drops what it is given. Data messages
    (``send_messages``) are counted apart from control messages (acks, heartbeats). A peer
    bounds what it buffers by the policy of server/backpressure.py: live data is offered
    first (:meth:`live_fits`), paced data waits for room (:meth:`wait_room`), and control
    bytes or live data that cannot be read back and do not fit end the peer
    (:meth:`overflow`).
    """

    @property
    def closed(self) -> bool:
        """Whether the peer is gone (sends are dropped)."""
        ...

    def send(self, data: bytes) -> None:
        """Queue control bytes (acks, heartbeats) for the next outbound frame; past the
        buffer's limit the peer is ended instead (:meth:`overflow`)."""
        ...

    def send_messages(self, data: bytes, count: int) -> None:
        """Queue ``count`` encoded data messages joined in ``data`` (live ones checked
        with :meth:`live_fits` first, paced ones after :meth:`wait_room`)."""
        ...

    def live_fits(self, nbytes: int, *, readable: bool) -> bool:
        """Whether ``nbytes`` of live messages may be queued now; ``readable``: their
        subscriptions could read them back from the log instead (a lower mark)."""
        ...

    def overflow(self, nbytes: int) -> None:
        """``nbytes`` that cannot be read back do not fit: end the peer (``slow client``)."""
        ...

    def send_batch(self, data: bytes, count: int) -> None:
        """Queue ``count`` data messages that leave as a frame of their own (a SOW query
        result of ``bs`` records per frame), not joined with what comes before or after."""
        ...

    def ack(
        self,
        kind: str,
        cid: str | None,
        status: str = "success",
        reason: str | None = None,
        **fields: AckValue,
    ) -> None:
        """Send one ack (docs/protocol.md "Acks")."""
        ...

    def fail(self, cid: str | None, exc: ProtocolFailure, **fields: AckValue) -> None:
        """Send a failure ack with the reason string of ``exc`` (always sent), its detail,
        and ``fields`` (a failed publish's ``s``)."""
        ...

    def has_room(self) -> bool:
        """Whether a paced producer (a replay) may queue more now."""
        ...

    @property
    def piece_bytes(self) -> int:
        """The most bytes a paced producer queues at once after :meth:`has_room` (one
        delivery larger than that goes alone): a quarter of the connection's limit, so
        that paced producers taking turns never bring its buffer past half of it."""
        ...

    async def wait_room(self) -> None:
        """Wait until :meth:`has_room` (or the peer closed)."""
        ...

    @property
    def paced_turn(self) -> asyncio.Lock:
        """Held by one paced reader of this peer at a time (a replay or a catch-up, from
        its read until the batch is queued): N replays of one connection hold one batch
        in memory, not N."""
        ...


@dataclass(slots=True)
class Traffic:
    """Counters of one peer (a client connection, later a replication link)."""

    msgs_in: int = 0
    msgs_out: int = 0
    bytes_in: int = 0
    bytes_out: int = 0


@dataclass(frozen=True, slots=True, eq=False)
class Origin:
    """Who sent a publish: where its acks go and whose entitlements apply.

    Attributes:
        kind: a client connection, a replication link, or the broker itself.
        name: the client name, the link's name, or the instance name.
        user: whose write entitlements apply (None: no users configured, or trusted;
            an origin of kind ``broker`` is trusted whatever its user).
        replies: where acks and failures go (None: nobody is waiting for them).
        traffic: the counters the publish adds to.
        held: per publisher id, the lowest sequence of it the log refused (``txlog full``)
            from this origin and that was not written since: nothing of that publisher
            above it is written from this origin until it is (docs/protocol.md "When the
            transaction log refuses writes"). Lives as long as the origin (a connection).
    """

    kind: OriginKind
    name: str
    user: UserConfig | None
    replies: Outbound | None
    traffic: Traffic = field(default_factory=Traffic)
    held: dict[int, int] = field(default_factory=dict)


@dataclass(slots=True, eq=False)
class PublishRun:
    """Consecutive publishes to one topic from one origin: the unit of the publish path.

    Columns, not objects: a publisher's frame carries a hundred publishes and the pipeline
    does its checks and bookkeeping once per run. Message ``i`` is entry ``i`` of every
    column: ``pub_seqs`` and ``bodies`` always, each optional column (``corr_ids``,
    ``sow_keys``, ``expirations``, ``keys``) either None (no message has one) or a list
    with an entry per message. ``acks`` is not a column: it lists only the messages that
    asked for acks, each by its index in the run.

    The run owns its columns: the pipeline takes parts of a run with :meth:`select`,
    :meth:`slice` and :meth:`as_appended`, never by picking columns itself. A new column
    is a field here, one line in :meth:`_rows` (and one in :meth:`as_appended` when the
    appended stages read it); every part of a run then carries it aligned.

    Attributes:
        topic: the topic.
        pub_hash: the records' publisher id (the first half of their bookmarks).
        pub_seqs: per message, the publisher's sequence, or None for "the next one".
        bodies: per message, the body.
        acks: the messages that asked for acks, as (index in the run, kinds, cid), in
            ascending index order, at most one per message. A part of the run renumbers
            them to its own indexes and drops the ones of messages it leaves out.
        corr_ids: per message, the correlation id (``""`` for none), or None.
        sow_keys: per message, the SOW key field it is logged with (``""`` for none), or
            None: the ``k`` given by the publisher, which a SOW stage's ``prepare``
            replaces with what the record must carry
            (:func:`spool.server.txlog.format.record.sow_key_field`).
        expirations: per message, the lifetime in seconds given with ``e`` (None for
            none), or None when no message gave one. Only a stage that keeps records
            (SOW) takes it; a topic without one refuses it.
        keys: per message, the key a preparing stage derived (SOW), or None.
        dues: per message, when a delayed message falls due (microseconds since the
            epoch), or None: only a run of kind ``SCHEDULED`` has them, and the pipeline
            writes them into the SOW key fields once the preparing stages have run
            (:func:`spool.server.txlog.format.record.schedule_field`).
        kind: the record kind the messages are logged as.
        path: instances the messages travelled through (replication), origin first.
        publisher_name: the publishing client's name, when known (``CLIENT_NAME()``).
    """

    topic: str
    pub_hash: int
    pub_seqs: list[int | None]
    bodies: list[bytes]
    acks: list[AckRequest]
    corr_ids: list[str] | None = None
    sow_keys: list[str] | None = None
    kind: RecordKind = RecordKind.PUBLISH
    path: tuple[str, ...] = ()
    publisher_name: str = ""
    expirations: list[int | None] | None = None
    keys: list[str] | None = None
    dues: list[int] | None = None

    @classmethod
    def one(
        cls,
        topic: str,
        pub_hash: int,
        pub_seq: int | None,
        body: bytes,
        *,
        acks: frozenset[str] = frozenset(),
        cid: str | None = None,
        corr_id: str = "",
        sow_key: str = "",
        expiration: int | None = None,
        kind: RecordKind = RecordKind.PUBLISH,
        publisher_name: str = "",
        due_us: int | None = None,
    ) -> PublishRun:
        """A single publish as a run of one (``acks``: the kinds it asked for, ``cid``
        theirs; an empty ``corr_id``/``sow_key`` and no ``expiration`` leave the column
        out; ``due_us``: a delayed publish's due time, with ``kind`` ``SCHEDULED``)."""
        return cls(
            topic=topic,
            pub_hash=pub_hash,
            pub_seqs=[pub_seq],
            bodies=[body],
            acks=[(0, acks, cid)] if acks else [],
            corr_ids=[corr_id] if corr_id else None,
            sow_keys=[sow_key] if sow_key else None,
            kind=kind,
            publisher_name=publisher_name,
            expirations=[expiration] if expiration is not None else None,
            dues=[due_us] if due_us is not None else None,
        )

    def slice(self, start: int, stop: int) -> PublishRun:
        """Messages ``start:stop`` as a run of their own (this run itself when that is
        all of it; ``0 <= start <= stop <= len(bodies)``)."""
        if start == 0 and stop == len(self.bodies):
            return self
        acks = [(i - start, kinds, cid) for i, kinds, cid in self.acks if start <= i < stop]
        return self._rows(slice(start, stop), acks)

    def select(self, keep: Sequence[int]) -> PublishRun:
        """The messages ``keep`` (indexes, ascending, each once) as a run of their own, in
        that order (this run itself when ``keep`` is all of it)."""
        if len(keep) == len(self.bodies):
            return self
        if isinstance(keep, range) and keep.step == 1:
            return self.slice(keep.start, keep.stop)
        acks: list[AckRequest] = []
        if self.acks:
            position = {old: new for new, old in enumerate(keep)}
            acks = [(position[i], kinds, cid) for i, kinds, cid in self.acks if i in position]
        return self._rows(keep, acks)

    def _rows(self, rows: _Rows, acks: list[AckRequest]) -> PublishRun:
        """The messages ``rows`` of every column, with ``acks`` (renumbered already)."""
        return PublishRun(
            topic=self.topic,
            pub_hash=self.pub_hash,
            pub_seqs=_pick(self.pub_seqs, rows),
            bodies=_pick(self.bodies, rows),
            acks=acks,
            corr_ids=_pick_optional(self.corr_ids, rows),
            sow_keys=_pick_optional(self.sow_keys, rows),
            kind=self.kind,
            path=self.path,
            publisher_name=self.publisher_name,
            expirations=_pick_optional(self.expirations, rows),
            keys=_pick_optional(self.keys, rows),
            dues=_pick_optional(self.dues, rows),
        )

    def as_appended(
        self,
        lo: int,
        hi: int,
        *,
        topic_literal: bytes,
        origin: Origin,
        pub_seqs: Sequence[int],
        first_seq: int,
        timestamp_us: int | None,
    ) -> AppendedRun:
        """Messages ``lo:hi``, appended from ``first_seq`` (0: not recorded) with the
        publisher sequences ``pub_seqs`` (theirs alone), as the appended stages take
        them. The whole run shares its columns instead of copying them."""
        if lo == 0 and hi == len(self.bodies):
            rows: slice | None = None
        else:
            rows = slice(lo, hi)
        return AppendedRun(
            topic=self.topic,
            topic_literal=topic_literal,
            origin=origin,
            pub_hash=self.pub_hash,
            pub_seqs=pub_seqs,
            bodies=self.bodies if rows is None else self.bodies[rows],
            first_seq=first_seq,
            timestamp_us=timestamp_us,
            corr_ids=_part(self.corr_ids, rows),
            sow_keys=_part(self.sow_keys, rows),
            kind=self.kind,
            publisher_name=self.publisher_name,
            keys=_part(self.keys, rows),
            path=self.path,
        )


#: which messages of a run a part takes: a stretch, or indexes in ascending order
_Rows: TypeAlias = slice | Sequence[int]


def _pick(column: list[_T], rows: _Rows) -> list[_T]:
    """The entries ``rows`` of a column, as a new list."""
    if isinstance(rows, slice):
        return column[rows]
    return [column[i] for i in rows]


def _pick_optional(column: list[_T] | None, rows: _Rows) -> list[_T] | None:
    """The entries ``rows`` of an optional column (None stays None)."""
    return None if column is None else _pick(column, rows)


def _part(column: list[_T] | None, rows: slice | None) -> list[_T] | None:
    """The stretch ``rows`` of an optional column; the column itself when ``rows`` is
    None (the whole run)."""
    if column is None or rows is None:
        return column
    return column[rows]


@dataclass(slots=True, eq=False)
class AppendedRun:
    """Publishes that passed the checks (and were appended, for recorded topics).

    Attributes:
        topic: the topic.
        topic_literal: the topic as a JSON string literal (encoded once per topic).
        origin: who sent them.
        pub_hash: the records' publisher id.
        pub_seqs: per message, the publisher sequence (as given, or 0, when not recorded).
        bodies: per message, the body.
        first_seq: local sequence of the first record; 0 when the topic is not recorded.
        timestamp_us: the records' time; None when not recorded (deliveries stamp now).
        corr_ids: per message, the correlation id, or None.
        sow_keys: per message, the SOW key field as logged, or None.
        kind: the record kind.
        publisher_name: the publishing client's name, when known.
        keys: per message, the key a preparing stage derived, or None.
        path: the instances the run came through by replication (empty: published here).
        documents: per message, its body parsed once by whichever stage after the append
            reads fields first (the filters of on-publish actions), shared by the others;
            None until one does.
    """

    topic: str
    topic_literal: bytes
    origin: Origin
    pub_hash: int
    pub_seqs: Sequence[int]
    bodies: Sequence[bytes]
    first_seq: int
    timestamp_us: int | None
    corr_ids: Sequence[str] | None
    sow_keys: Sequence[str] | None
    kind: RecordKind
    publisher_name: str
    keys: Sequence[str] | None = None
    path: tuple[str, ...] = ()
    documents: list[dict[str, Any] | None] | None = None

    @property
    def recorded(self) -> bool:
        """Whether the messages are in the transaction log (they have bookmarks)."""
        return self.first_seq > 0


class PublishStage(Protocol):
    """A subsystem on the publish path (the fan-out; later SOW, queues, replication).

    A stage implements the hooks it needs, each its own protocol below
    (:class:`PreparingStage`, :class:`AppendedStage`, :class:`DurableStage`,
    :class:`RecoveringStage`); the pipeline registers each hook a stage has and never
    calls one it lacks, and resolves once per topic which stages apply to it.
    """

    def applies_to(self, topic: str) -> bool:
        """Whether publishes to ``topic`` go through this stage (asked once per topic)."""
        ...


@runtime_checkable
class PreparingStage(PublishStage, Protocol):
    """A stage with work before the append."""

    def prepare(self, run: PublishRun) -> Refusals | None:
        """On the loop, before the append: derive keys, merge deltas, or refuse.

        The whole run is refused by raising a
        :class:`~spool.server.protocol.errors.ProtocolFailure`; single messages (a body without
        its key field) by returning them: the pipeline answers each alone and publishes
        the rest of the run.
        """
        ...


@runtime_checkable
class AppendedStage(PublishStage, Protocol):
    """A stage with work after the append."""

    def appended(self, run: AppendedRun) -> None:
        """On the loop, after the append, in publish order (deliver, index, enqueue)."""
        ...

    def reaches(self, topic: str, peer: Outbound) -> bool:
        """Whether :meth:`appended` of a run of ``topic`` may send to ``peer`` at once.

        A publisher's ``received``/``processed`` acks must reach it in order with what the
        same run delivers to its own connection (a batched frame behaves like one command
        per frame). When no stage reaches the publisher, the pipeline sends a run's acks
        first and hands the run over whole, instead of splitting it at every ack.
        """
        ...


@runtime_checkable
class DurableStage(PublishStage, Protocol):
    """A stage that follows the local fsync."""

    def durable(self, seq: int) -> None:
        """The local fsync reached ``seq`` (push to replicas, start lease timers)."""
        ...


@runtime_checkable
class DuplicateStage(PublishStage, Protocol):
    """A stage told of replicated messages the log already held (dropped as duplicates)."""

    def duplicated(self, run: PublishRun, i: int, pub_seq: int, held: str | None) -> None:
        """On the loop: message ``i`` of ``run`` (a replication link's, so ``run.path``
        names the instance it was published on) repeats the bookmark ``pub_seq`` the log
        holds; it was not stored. ``held``: the first path entry of the copy the log
        holds (``""``: published here; None: not known). Called per duplicate."""
        ...


@runtime_checkable
class RecoveringStage(PublishStage, Protocol):
    """A stage whose state is rebuilt from the journal at start-up."""

    def recover(self, batch: RecordBatch) -> None:
        """Before clients are served: one batch of the journal, in log order."""
        ...

    def recover_from(self) -> int:
        """The first local sequence this stage needs to see (1: the whole log); the
        pipeline starts reading at the lowest of its recovering stages."""
        ...


class Refold(Protocol):
    """One stage's catch-up after a repair wrote back records its start-up rebuild went
    past (fenced then): fed the log from the repaired range to its end, then applied.

    The pipeline calls :meth:`repaired` with the repaired range's records, then
    :meth:`later` with every record after it up to the log's last one, in log order, then
    :meth:`apply` on the loop with nothing appended since the last :meth:`later`, a
    bounded part at a time: between two parts the loop runs (live publishes change the
    state), and :meth:`later` is fed what was appended meanwhile before the next part.
    Once :attr:`done`, the stage's state holds what a rebuild from the whole log would
    hold.
    """

    def repaired(self, records: Sequence[Record]) -> None:
        """Records of the repaired range, in log order (read off the loop)."""
        ...

    def later(self, records: Sequence[Record]) -> None:
        """Records after the repaired range, in log order (those already folded)."""
        ...

    def apply(self, limit: int) -> int:
        """Bring about ``limit`` more items (keys, records) of the live state up to the
        fold of the log; returns how many changes were made (keys put or removed,
        messages entered or taken out)."""
        ...

    @property
    def done(self) -> bool:
        """Nothing is left to apply."""
        ...


@runtime_checkable
class RefoldingStage(RecoveringStage, Protocol):
    """A recovering stage that can take back, while it runs, records its start-up
    rebuild went past (server/publishing.py :meth:`PublishPipeline.refold`)."""

    def refold(self) -> Refold:
        """A fresh catch-up for one repaired range."""
        ...


class DurabilityHorizon(Protocol):
    """How far the log is durable, and a way to wait for it to move.

    Persisted acks and flush acks are released by :meth:`on_advance`; a
    ``fully_durable`` bookmark subscription delivers up to :attr:`seq`. It also satisfies
    the replay cursor's ``ReadLimit`` (``seq`` and ``wait``).

    A horizon that cannot move for now (the local log refuses writes: a full disk, a
    failed fsync) says so with :attr:`failure` and :meth:`on_failure`: whoever answers a
    client (persisted and flush acks) fails at once with it instead of waiting; a replay,
    which has nothing to answer, keeps waiting in :meth:`wait`, since the horizon moves
    again once the cause is gone.
    """

    @property
    def seq(self) -> int:
        """Every record up to this local sequence is durable."""
        ...

    async def wait(self, seq: int) -> None:
        """Return once :attr:`seq` >= ``seq``."""
        ...

    def on_advance(self, callback: Callable[[int], None]) -> None:
        """Call ``callback(seq)`` on the loop whenever :attr:`seq` moves."""
        ...

    @property
    def failure(self) -> ProtocolFailure | None:
        """Why the horizon cannot move now (e.g. ``txlog full`` with its cause), or None."""
        ...

    def on_failure(self, callback: Callable[[ProtocolFailure | None], None]) -> None:
        """Call ``callback(failure)`` on the loop when the horizon stops being able to move,
        and ``callback(None)`` when it can again (not at every failed retry)."""
        ...


class Watermark(Protocol):
    """A position in the local log that only moves forward, and a way to follow it: how
    far the log has reached every replication destination (the replicated watermark that
    ``replicated`` acks follow; without replication, the local fsync)."""

    @property
    def seq(self) -> int:
        """Every record up to this local sequence has got there."""
        ...

    def on_advance(self, callback: Callable[[int], None]) -> None:
        """Call ``callback(seq)`` on the loop whenever :attr:`seq` moves."""
        ...


class FrameHandler(Protocol):
    """What a connection hands each received frame to (server/dispatch.py)."""

    def receive(self, data: bytes) -> None:
        """Handle one frame; never raises (failures become acks or a close)."""
        ...


class NameClaims(Protocol):
    """Client names across the fabric (server/replication/clientnames.py): a logon asks
    the linked instances before it is granted."""

    def asks(self) -> bool:
        """Whether a logon here must ask other instances first (some link is live)."""
        ...

    async def claim(self, name: str) -> str | None:
        """None when ``name`` is free on every linked instance, else where it is held."""
        ...


class DelayedSink(Protocol):
    """Where the pipeline hands the delayed messages it stored (server/delayed/service.py):
    a run of ``SCHEDULED`` records, acked like any publish and delivered at their due
    times by the sink, never by the appended stages."""

    def scheduled(
        self,
        topic: str,
        pub_hash: int,
        pub_seqs: Sequence[int],
        first_seq: int,
        dues: Sequence[int],
    ) -> None:
        """Records ``first_seq`` onward (one per entry of ``pub_seqs``) fall due at
        ``dues`` (microseconds since the epoch)."""
        ...


class IdentityWatch(Protocol):
    """Told of every recorded run and every duplicate, by publisher identity (an instance
    that replicates: server/replication/collisions.py). Each call is cheap: per run, not
    per message, except for duplicates."""

    def appended(
        self, pub_hash: int, first_pub_seq: int, path: tuple[str, ...], late: bool
    ) -> None:
        """A run of ``pub_hash`` from ``first_pub_seq`` on, all with ``path``, was appended
        (``late``: one record filling a gap)."""
        ...

    def duplicate(self, run: PublishRun, i: int, pub_seq: int, via: str) -> None:
        """Message ``i`` of ``run`` (``pub_seq``) repeats a bookmark the log holds; it came
        from ``via`` (a client, a replication link)."""
        ...

    def origin(self, pub_hash: int, pub_seq: int) -> str | None:
        """The first path entry of the record of ``pub_hash`` / ``pub_seq`` the log
        holds, as far as the watch knows (``""``: published here; None: not known)."""
        ...


class Entitlements(Protocol):
    """Who may read and write which topics (server/auth.py ``UserAuthenticator``)."""

    @property
    def enabled(self) -> bool:
        """False when no users are configured: everyone may do everything."""
        ...

    def can_read(self, user: UserConfig | None, topic: str) -> bool: ...

    def can_write(self, user: UserConfig | None, topic: str) -> bool: ...


class SowRecord(NamedTuple):
    """The latest message of one key in a keyed store (a SOW topic).

    Immutable (a named tuple: the cheapest immutable value to build, and a publish to a
    SOW topic builds one per message): a query's snapshot is a list of references that
    later updates cannot change, so a result streamed over many loop turns is the state
    of one instant.

    Attributes:
        key: the record's key.
        body: the message body, byte for byte (for a ``delta_publish``, the merged one).
        seq: local sequence of the log record it came from; 0 for a topic not in the log.
        timestamp_us: when it was recorded (microseconds since the Unix epoch).
        pub_hash: publisher id of its bookmark.
        pub_seq: publisher sequence of its bookmark.
        expires_us: when it expires (wall clock, microseconds); 0 = never.
        version: the store's change counter when it was stored: strictly increasing per
            store, so "stored after a snapshot" is ``version > snapshot_version``.
    """

    key: str
    body: bytes
    seq: int
    timestamp_us: int
    pub_hash: int
    pub_seq: int
    expires_us: int
    version: int

    @property
    def bookmark(self) -> str:
        """The wire bookmark ``PUBHASH|PUBSEQ|`` (empty for a topic not in the log)."""
        return f"{self.pub_hash}|{self.pub_seq}|" if self.seq else ""


class Change(NamedTuple):
    """What one update did to a keyed store: ``old`` and ``new`` of one key.

    ``old`` is None for an insert, ``new`` is None for a delete; out-of-focus notices
    (``oof``) and delta deliveries need both.
    """

    key: str
    old: SowRecord | None
    new: SowRecord | None


class TopicStore(Protocol):
    """The current state of a keyed topic: the latest record per key (SOW topics).

    One interface for the memory and the persistent backends, so one test suite runs
    over both (nats-server ``store.go``). Owned by the event loop; a backend that writes
    files does so in worker threads and never blocks the loop.
    """

    @property
    def topic(self) -> str:
        """The topic whose records it keeps."""
        ...

    @property
    def version(self) -> int:
        """The version of the last change (0 when nothing was ever stored)."""
        ...

    def put(
        self,
        key: str,
        body: bytes,
        *,
        seq: int = 0,
        timestamp_us: int = 0,
        pub_hash: int = 0,
        pub_seq: int = 0,
        expires_us: int = 0,
    ) -> Change:
        """Store ``body`` as the latest record of ``key``."""
        ...

    def put_run(
        self,
        keys: Sequence[str],
        bodies: Sequence[bytes],
        *,
        seqs: Sequence[int],
        timestamp_us: int,
        pub_hash: int,
        pub_seqs: Sequence[int],
        expires: Sequence[int] | None,
        changes: bool,
    ) -> list[Change]:
        """Store a run of records at once (the publish path: one call per run).

        Args:
            seqs: per record, its log sequence (0: not in the log).
            expires: per record, its deadline (0: never), or None when none expires.
            changes: return the changes (else an empty list: nobody needs them).
        """
        ...

    def delete(self, key: str, *, seq: int = 0) -> Change | None:
        """Remove ``key`` (``seq``: the log record of the removal); None when absent."""
        ...

    def get(self, key: str) -> SowRecord | None:
        """The latest record of ``key``."""
        ...

    def records(self) -> list[SowRecord]:
        """Every record, in the order their keys were first stored (a snapshot: a new
        list of immutable records, unaffected by later changes)."""
        ...

    def __len__(self) -> int:
        """How many keys are stored."""
        ...

    @property
    def body_bytes(self) -> int:
        """Bytes of the stored bodies."""
        ...


# -- happenings ---------------------------------------------------------------------------

#: the kinds of happening a sink subscribes to (server/happenings.py)
HappeningFamily = Literal[
    "clients", "subscriptions", "links", "sow_removals", "sow_changes", "dead_letters"
]
#: why a subscription ended
SubscriptionEnd = Literal["unsubscribe", "replaced", "disconnect"]


@dataclass(frozen=True, slots=True)
class ClientHappening:
    """A step in the life of a client connection on this instance.

    Attributes:
        event: ``connected`` (the websocket was accepted), ``logged_on``, ``logon_failed``
            (the credentials were refused) or ``disconnected``.
        time_us: when it happened (the broker's clock, microseconds since the epoch).
        connection: the connection's number on this instance (from 1 at each start): it
            ties a ``connected`` to its ``logged_on`` and ``disconnected``.
        client: the client name once logged on (``logon_failed``: the name asked for).
        user: the user logged on (``logon_failed``: the ``user_id`` given).
        remote: the peer's ``host:port``.
        transport: the configured transport's name.
        tls: the TLS version, None in plain text.
        certificate: the subject of a verified client certificate.
        version: ``logged_on``: the client's version string.
        options: ``logged_on``: the logon options it asked for (``failover,replicated``).
        reason: ``disconnected``: why the connection closed; ``logon_failed``: the failure.
        cause: ``disconnected``: the cause's name (server/session.py ``DisconnectCause``).
        msgs_in: ``disconnected``: messages the connection sent the broker.
        msgs_out: ``disconnected``: messages the broker sent it.
        subscriptions: ``disconnected``: the subscriptions it still held.
    """

    family: ClassVar[HappeningFamily] = "clients"
    event: Literal["connected", "logged_on", "logon_failed", "disconnected"]
    time_us: int
    connection: int
    client: str | None
    user: str | None
    remote: str
    transport: str
    tls: str | None = None
    certificate: str | None = None
    version: str | None = None
    options: str | None = None
    reason: str | None = None
    cause: str | None = None
    msgs_in: int | None = None
    msgs_out: int | None = None
    subscriptions: int | None = None


@dataclass(frozen=True, slots=True)
class SubscriptionHappening:
    """A subscription of any kind began or ended, or a one-shot query was accepted.

    Attributes:
        event: ``added``, ``removed`` or ``queried`` (a ``sow`` query).
        time_us: when it happened.
        connection: the connection's number on this instance.
        client: the client name.
        user: the user logged on.
        sub_id: the subscription id (a query: its query id, else its cid, else "").
        command: the command that made it (``subscribe``, ``sow_and_subscribe``, ...).
        kind: ``live``, ``bookmark``, ``sow``, ``queue`` or ``query``.
        topic: the topic or regular expression subscribed to.
        filter: its filter, as given.
        options: its options, as given ("" when none).
        bookmark_kind: what its bookmark names (``none``, ``epoch``, ``now``, ...); never
            the bookmark itself.
        reason: ``removed``: why it ended.
    """

    family: ClassVar[HappeningFamily] = "subscriptions"
    event: Literal["added", "removed", "queried"]
    time_us: int
    connection: int
    client: str
    user: str | None
    sub_id: str
    command: str
    kind: str
    topic: str
    filter: str | None
    options: str
    bookmark_kind: str
    reason: SubscriptionEnd | None = None


@dataclass(frozen=True, slots=True)
class LinkHappening:
    """A replication link of this instance changed (server/replication/history.py).

    Attributes:
        event: the link event (``connected``, ``disconnected``, ``downgraded``, ...).
        time_us: when it happened.
        direction: ``out`` (a destination of this instance) or ``in`` (a source).
        link: the destination's or the source's name.
        remote: ``out``: the name of the instance that answered, when known.
        connected: whether the link is connected after the event.
        sync_type: ``out``: the link's effective sync type after the event; ``in``: what
            the source last said.
        detail: what the event log says of it, for a person.
    """

    family: ClassVar[HappeningFamily] = "links"
    event: str
    time_us: int
    direction: Literal["out", "in"]
    link: str
    remote: str | None
    connected: bool
    sync_type: str | None
    detail: str


@dataclass(frozen=True, slots=True)
class SowRemovalHappening:
    """Records left a SOW topic of this instance: deleted or expired.

    Built only when a sink watches the topic (:meth:`TopicSink.watches`).

    Attributes:
        time_us: when it happened.
        topic: the SOW topic.
        reason: ``deleted`` (a ``sow_delete``, an action's delete) or ``expired``.
        records: the records removed, each in its last state.
        source: ``local`` (deleted or expired here) or ``replicated`` (a delete that came
            over a replication link).
        client: who deleted them, when known (a client's name, an action's).
    """

    family: ClassVar[HappeningFamily] = "sow_removals"
    time_us: int
    topic: str
    reason: Literal["deleted", "expired"]
    records: tuple[SowRecord, ...]
    source: Literal["local", "replicated"]
    client: str | None = None


@dataclass(frozen=True, slots=True)
class SowChangeHappening:
    """Records of a SOW topic of this instance were updated (a publish stored them).

    Built only when a sink watches the topic (:meth:`TopicSink.watches`).

    Attributes:
        time_us: when it happened.
        topic: the SOW topic.
        changes: each key's state before and after (``old`` None: a new key).
        source: ``local`` (published here) or ``replicated`` (came over a link).
    """

    family: ClassVar[HappeningFamily] = "sow_changes"
    time_us: int
    topic: str
    changes: tuple[Change, ...]
    source: Literal["local", "replicated"]


@dataclass(frozen=True, slots=True)
class DeadLetterFact:
    """One message a queue gave up on, as its dead letter was published.

    Attributes:
        topic: the topic it was published to (the queue's).
        bookmark: its bookmark there.
        reason: why it left the queue (``max_deliveries``, ``max_cancels``, ``expired``,
            ``rejected``).
        consumer: the last consumer that held it ("" when none did).
        deliveries: how many times it was delivered.
        body: the message, as published.
        envelope: the dead letter, as published to the dead-letter topic.
    """

    topic: str
    bookmark: str
    reason: str
    consumer: str
    deliveries: int
    body: bytes
    envelope: bytes


@dataclass(frozen=True, slots=True)
class DeadLetterHappening:
    """A queue of this instance published dead letters (only once they were published).

    Attributes:
        time_us: when it happened.
        queue: the queue's name.
        topic: its dead-letter topic.
        letters: the dead letters, in the order they were published.
    """

    family: ClassVar[HappeningFamily] = "dead_letters"
    time_us: int
    queue: str
    topic: str
    letters: tuple[DeadLetterFact, ...]


LifeHappening = ClientHappening | SubscriptionHappening | LinkHappening
"""A happening of the instance's life (what the event topics publish)."""
Happening = LifeHappening | SowRemovalHappening | SowChangeHappening | DeadLetterHappening
"""Anything the happenings bus carries."""

#: The families told per SOW topic: a producer asks whether a sink watches the topic
#: before it builds a value.
TOPIC_FAMILIES: frozenset[HappeningFamily] = frozenset({"sow_removals", "sow_changes"})


class HappeningSink(Protocol):
    """A part that is told of the broker's happenings (server/happenings.py).

    ``happened`` runs on the event loop while the producer is in the middle of a state
    change: it keeps the value and acts in a later turn. It never blocks, publishes or
    changes broker state itself.
    """

    @property
    def families(self) -> frozenset[HappeningFamily]:
        """The families it wants."""
        ...

    def happened(self, happening: Happening) -> None:
        """One happening of a family it wants."""
        ...


class TopicSink(HappeningSink, Protocol):
    """A sink of the families told per SOW topic (:data:`TOPIC_FAMILIES`): it says which
    topics it watches."""

    def watches(self, family: HappeningFamily, topic: str) -> bool:
        """Whether it wants happenings of ``family`` on ``topic``."""
        ...
