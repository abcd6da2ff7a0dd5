"""The broker as a publisher: messages the instance itself publishes (actions, dead letters).

A message the broker publishes takes the one publish path every message takes
(:class:`~spool.server.publishing.PublishPipeline`): the same topic checks, the same append, the
same fan-out and persisted acks for subscribers, with an :class:`~spool.server.ports.Origin` of
kind ``broker`` (never a fake client session). Its records carry the broker's own
publisher identity, ``pub_hash("spool-broker:" + instance + "#" + token)``
(:func:`spool.server.bookmarks.broker_pub_hash`; the token names the log:
server/txlog/publishers/incarnation.py), numbered by the log like any publisher's, so a
bookmark subscriber can resume across them. The instance's ``sow_delete`` records carry
the same identity and share its sequence (server/sow/deleting.py).

The pipeline answers a publish with acks on the origin's ``replies``; here they go to a
:class:`_Answer` that keeps them, so :meth:`BrokerPublisher.publish` can raise the
refusal, and it returns once the message is durable (recorded topics).

*Derived* messages (:meth:`BrokerPublisher.publish_derived`: what an action publishes
because of another message) take the same path with the same trust, under an identity of
their own (:func:`spool.server.bookmarks.derived_pub_hash`) and with the sequences the
caller gives (its sources'). A sequence the log already holds for that identity is a
duplicate the pipeline drops: a second run over the same sources stores nothing twice,
and the outcome counts it instead of calling it a failure. A topic the log does not record
has no bookmarks, hence no de-duplication: there every run is delivered again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from spool.server.backpressure import MAX_FRAME
from spool.server.bookmarks import (
    BROKER_PUBLISHER_PREFIX,
    DERIVED_PUBLISHER_PREFIX,
    FIRST_PUB_HASH,
    MAX_PUB_HASH,
    MAX_PUB_SEQ,
    broker_pub_hash,
    format_bookmark,
)
from spool.server.engine_errors import PublishRefused
from spool.server.ports import AckRequest, AckValue, Origin, PublishRun
from spool.server.protocol.errors import Duplicate, InvalidTopic, ProtocolFailure
from spool.server.publishing import PublishPipeline
from spool.server.txlog import TransactionLog

__all__ = ["BROKER_PUBLISHER_PREFIX", "BrokerPublisher", "DerivedOutcome", "Published"]


_PROCESSED: Final = frozenset({"processed"})
#: the paced readers' turn of a peer that is never replayed to
_NO_TURN = asyncio.Lock()


@dataclass(frozen=True, slots=True)
class Published:
    """A message the broker published.

    Attributes:
        topic: where it went.
        seq: its local sequence in the transaction log (0 when the topic is not recorded).
        bookmark: its bookmark (None when the topic is not recorded).
    """

    topic: str
    seq: int
    bookmark: str | None


@dataclass(frozen=True, slots=True)
class DerivedOutcome:
    """What :meth:`BrokerPublisher.publish_derived` did with a batch; every message is
    counted once, in ``accepted``, ``duplicates`` or ``refused``.

    Attributes:
        accepted: messages stored (and delivered); on a topic the log does not record,
            messages delivered.
        duplicates: messages whose sequence the log holds already for their publisher (an
            earlier run stored them): neither stored nor delivered again. Not a failure.
        failure: why the pipeline refused messages (the first refusal: a reserved topic,
            ``txlog full``...), or None when it refused none.
        last_seq: the log's last sequence once the batch was appended: every record it
            stored is at or below it, so waiting until it is durable
            (:meth:`spool.server.operations.Operations.wait_durable`) waits for them all;
            0 when the batch put nothing in the log.
        refused: messages refused (``failure`` says why).
        refused_seqs: the sequences of the messages refused, in order.
    """

    accepted: int
    duplicates: int
    failure: ProtocolFailure | None
    last_seq: int
    refused: int = 0
    refused_seqs: tuple[int, ...] = ()


class _Answer:
    """The ``Outbound`` a broker publish's acks go to: it counts the processed acks
    (stored, duplicate) and keeps the first refusal."""

    def __init__(self) -> None:
        self.failure: ProtocolFailure | None = None
        #: messages acked ``processed`` with success
        self.accepted = 0
        #: messages acked ``processed`` with failure ``duplicate``
        self.duplicates = 0
        #: messages refused (:meth:`fail`)
        self.refused = 0
        #: the sequences of the refused messages, when the pipeline gave them
        self.refused_seqs: list[int] = []

    @property
    def processed(self) -> bool:
        """Whether a message was acked ``processed`` with success."""
        return self.accepted > 0

    @property
    def closed(self) -> bool:
        return False

    def send(self, data: bytes) -> None:
        """Control bytes: the broker's own publish has no wire."""

    def send_messages(self, data: bytes, count: int) -> None:
        """No subscription belongs to this origin."""

    def send_batch(self, data: bytes, count: int) -> None:
        """No query belongs to this origin."""

    def live_fits(self, nbytes: int, *, readable: bool) -> bool:
        """Nothing is ever queued here, so everything fits."""
        return True

    def overflow(self, nbytes: int) -> None:
        """Unreachable: :meth:`live_fits` always answers yes and control bytes are dropped."""

    def ack(
        self,
        kind: str,
        cid: str | None,
        status: str = "success",
        reason: str | None = None,
        **fields: AckValue,
    ) -> None:
        if kind != "processed":
            return
        if status == "success":
            self.accepted += 1
        elif reason == Duplicate.reason:
            self.duplicates += 1

    def fail(self, cid: str | None, exc: ProtocolFailure, **fields: AckValue) -> None:
        self.refused += 1
        seq = fields.get("s")
        if isinstance(seq, int):
            self.refused_seqs.append(seq)
        if self.failure is None:
            self.failure = exc

    def has_room(self) -> bool:
        return True

    @property
    def piece_bytes(self) -> int:
        """Nothing is ever queued here: any size."""
        return MAX_FRAME

    async def wait_room(self) -> None:
        return None

    @property
    def paced_turn(self) -> asyncio.Lock:
        """Nothing is ever replayed here: a lock nobody waits for."""
        return _NO_TURN


class BrokerPublisher:
    """Publishes as the instance itself.

    Args:
        pipeline: the instance's publish pipeline.
        txlog: the transaction log (to wait until a recorded message is durable), or None.
        instance: the instance name (its publisher identity).
    """

    def __init__(
        self,
        pipeline: PublishPipeline,
        txlog: TransactionLog | None,
        instance: str,
        *,
        reserved: frozenset[str] = frozenset(),
    ) -> None:
        self._pipeline = pipeline
        self._txlog = txlog
        self.name = instance
        self._reserved = reserved

    @property
    def pub_hash(self) -> int:
        """The instance's own publisher identity (its log's: server/txlog/publishers/incarnation.py;
        without a log, the name alone: nothing it publishes is then recorded)."""
        txlog = self._txlog
        return txlog.own_pub_hash if txlog is not None else broker_pub_hash(self.name)

    def publish_now(
        self, topic: str, bodies: Sequence[bytes], corr_ids: Sequence[str] = ()
    ) -> ProtocolFailure | None:
        """Publish ``bodies`` to ``topic`` as one run (with ``corr_ids``, one per body,
        when given), in this turn of the loop, without waiting for the log to make them
        durable: the caller writes what depends on them right after them (a queue's
        ``QUEUE_ACK`` after its dead letters), so the log's order keeps them together.
        Returns why the pipeline refused (some of) them."""
        return self._publish(topic, bodies, corr_ids).failure

    def publish_events(self, topic: str, bodies: Sequence[bytes]) -> ProtocolFailure | None:
        """:meth:`publish_now` for the event topics' own messages (server/eventtopics), the
        one publisher an event topic that is on takes."""
        return self._publish(topic, bodies, (), events=True).failure

    def publish_derived(
        self,
        topic: str,
        pub_hash: int,
        pub_seqs: Sequence[int],
        bodies: Sequence[bytes],
        corr_ids: Sequence[str],
        *,
        action: str,
    ) -> DerivedOutcome:
        """Publish a batch of derived messages of action ``action`` as one run, in this turn
        of the loop, without waiting for the log to make them durable.

        ``pub_hash`` is their publisher (:func:`~spool.server.bookmarks.derived_pub_hash`),
        ``pub_seqs`` their sequences (their sources', in the order the sources came, which
        is rising), ``corr_ids`` one correlation id per body (``""`` for none). The run
        takes the path of the broker's own publishes (no entitlement applies; an event
        topic refuses it), named ``spool-action:ACTION`` where a filter asks for the
        publisher's name. A sequence at or below the highest the log holds for
        ``pub_hash`` is a duplicate: counted in the outcome, not stored, not delivered
        (unless it fills a gap the log tracks for that publisher, as any late record).
        Waiting for durability is the caller's (``last_seq``): a batch is typically one
        of many on their way to one group commit.

        Raises:
            ValueError: the columns differ in length, or an id or sequence is out of range
                (the caller's mistake, not the pipeline's refusal).
        """
        n = len(bodies)
        if len(pub_seqs) != n or len(corr_ids) != n:
            raise ValueError("a derived batch needs one sequence and one corr id per body")
        if not FIRST_PUB_HASH <= pub_hash <= MAX_PUB_HASH:
            raise ValueError(f"publisher id {pub_hash} is out of range")
        if any(not 1 <= s <= MAX_PUB_SEQ for s in pub_seqs):
            raise ValueError("a derived message's sequence is between 1 and 2**64 - 1")
        if not n:
            return DerivedOutcome(0, 0, None, 0)
        txlog = self._txlog
        before = txlog.last_seq if txlog is not None else 0
        given: list[int | None] = list(pub_seqs)
        answer = self._publish(
            topic, bodies, corr_ids, acks=[(i, _PROCESSED, None) for i in range(n)],
            pub_hash=pub_hash, pub_seqs=given,
            publisher_name=DERIVED_PUBLISHER_PREFIX + action,
        )  # fmt: skip
        after = txlog.last_seq if txlog is not None else 0
        last_seq = after if answer.accepted and after > before else 0
        return DerivedOutcome(
            answer.accepted, answer.duplicates, answer.failure, last_seq, answer.refused,
            tuple(answer.refused_seqs),
        )  # fmt: skip

    def _publish(
        self,
        topic: str,
        bodies: Sequence[bytes],
        corr_ids: Sequence[str],
        acks: list[AckRequest] | None = None,
        *,
        events: bool = False,
        pub_hash: int | None = None,
        pub_seqs: list[int | None] | None = None,
        publisher_name: str | None = None,
    ) -> _Answer:
        """One run of ``bodies`` through the pipeline, as the broker; what it answered.
        An event topic that is on takes only the event topics' own (``events``): an
        action or an operator could otherwise forge what the broker says happened.
        Without ``pub_hash`` / ``pub_seqs`` / ``publisher_name`` the run is the broker's
        own, numbered by the log."""
        answer = _Answer()
        if topic in self._reserved and not events:
            answer.failure = InvalidTopic(
                f"{topic!r} is an event topic: only the broker's own events are published there"
            )
            answer.refused = len(bodies)
            return answer
        origin = Origin(kind="broker", name=self.name, user=None, replies=answer)
        run = PublishRun(
            topic, self.pub_hash if pub_hash is None else pub_hash,
            [None] * len(bodies) if pub_seqs is None else pub_seqs, list(bodies), acks or [],
            corr_ids=list(corr_ids) if any(corr_ids) else None,
            publisher_name=self.name if publisher_name is None else publisher_name,
        )  # fmt: skip
        self._pipeline.publish(origin, run)
        return answer

    async def publish(self, topic: str, body: bytes, corr_id: str = "") -> Published:
        """Publish one message (with correlation id ``corr_id``, ``""``: none) and wait
        until it is durable (when the topic is recorded).

        Raises:
            PublishRefused: the pipeline refused it (the protocol's reason: a regex topic,
                txlog full, a failed write...).
        """
        txlog = self._txlog
        before = txlog.publisher_last(self.pub_hash) if txlog is not None else 0
        answer = self._publish(topic, [body], (corr_id,), acks=[(0, _PROCESSED, None)])
        if answer.failure is not None:
            raise PublishRefused(answer.failure.reason, answer.failure.detail)
        if not answer.processed:  # pragma: no cover - the pipeline always answers
            raise PublishRefused("invalid message", "the publish pipeline did not answer")
        if txlog is None:
            return Published(topic, 0, None)
        pub_seq = txlog.publisher_last(self.pub_hash)
        if pub_seq == before:
            return Published(topic, 0, None)  # a topic the log does not record
        seq = txlog.last_seq
        await txlog.wait_durable(seq)
        return Published(topic, seq, format_bookmark(self.pub_hash, pub_seq))
