"""The command table: which service handles each client command.

Every command but ``publish`` and ``heartbeat`` (the dispatcher runs those itself) has one
entry in :attr:`CommandTable.handlers`. Most go to one service whatever their topic;
the subscribe-like ones are decided here, in :meth:`CommandTable.route`, by the kind of
their topic:

- a **queue** is a topic named as a queue's ``Name`` (server/queues);
- a **SOW topic** is a topic by name that a ``SOW`` ``Topic`` rule keeps (server/sow);
- a **regex** is a topic with a regular-expression character
  (:func:`~spool.server.protocol.topic.is_regex_topic`);
- any other topic is **plain**.

A name can be a queue and a SOW topic at once: the queue takes ``subscribe`` and
``sow_delete``, the SOW the rest. The rule:

==========================  ==============================================================
command                     handled by
==========================  ==============================================================
``subscribe``               queue: the queues (with ``bm``: refused, ``invalid options``);
                            SOW topic without ``bm``: the SOW, but a ``pause`` /
                            ``resume`` of existing subscriptions goes to the
                            subscriptions; anything else: the subscriptions (plain or
                            bookmark subscription)
``delta_subscribe``         SOW topic or regex without ``bm``: the SOW (``pause`` /
                            ``resume`` as above); with ``bm``: refused (``invalid
                            options``); anything else: refused (``invalid topic``)
``unsubscribe``             every service: the queues and the SOW end theirs, then the
                            subscriptions end the rest and ack
``sow_delete``              queue: the queues (the consumer's ack); else the SOW
``sow_and_subscribe``,      the SOW (it refuses a topic that is not a SOW topic)
``sow_and_delta_subscribe``
``sow``, ``delta_publish``  the SOW
``logon``, ``flush``        the client registry, the durable acks
==========================  ==============================================================

A subscribing command with ``replace`` whose sub id names an existing subscription ends
that one only once the new one passed every check of the handler that takes it (routing,
options, entitlements, topic, filter, quotas, bookmark), whatever the two kinds: a refused
replace leaves the old subscription exactly as it was (a queue consumer keeps its leases
and its place, a SOW subscriber what it holds). Each handler ends it at that point, one
of its own kind itself and any other through :meth:`SubscriptionService.drop`, which ends
a subscription of any kind with the ends this table gives it (a queue subscription's
leases return, a SOW subscription leaves the SOW).
A queue subscription replaces only another queue subscription (``subid in use``
otherwise). The services expose plain handlers and never call each other's; the checks
of a command run in the handler that takes it, in that handler's order.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Literal, TypeAlias

from spool.server.acks import DurableAcks
from spool.server.bookmarks import parse_bookmark, spec_kind
from spool.server.clients import ClientRegistry
from spool.server.clock import Clock, time_us
from spool.server.dispatch import CommandHandler
from spool.server.happenings import Happenings
from spool.server.ports import SubscriptionHappening
from spool.server.protocol.commands import Command
from spool.server.protocol.errors import InvalidOptions, InvalidTopic
from spool.server.protocol.topic import is_regex_topic
from spool.server.queues.service import QueueService
from spool.server.session import Session
from spool.server.sow import SowService
from spool.server.subscriptions import SubscriptionService

#: what decides where a subscribe-like command goes
TopicKind: TypeAlias = Literal["queue", "sow", "regex", "plain"]


class CommandTable:
    """The command table of an instance and its routing rule (the module docstring).

    Args:
        clients: ``logon``.
        acks: ``flush``.
        subscriptions: plain and bookmark subscriptions.
        sow: SOW queries, subscriptions, deletes and delta publishes.
        queues: queue subscriptions and acks.
        happenings: told of each ``sow`` query accepted (subscriptions are told by the
            connection's table).
        clock: when.

    Attributes:
        handlers: command name -> handler, what the dispatcher runs.
    """

    def __init__(
        self,
        clients: ClientRegistry,
        acks: DurableAcks,
        subscriptions: SubscriptionService,
        sow: SowService,
        queues: QueueService,
        happenings: Happenings,
        clock: Clock,
    ) -> None:
        self._subscriptions = subscriptions
        self._happenings = happenings
        self._clock = clock
        self._sow = sow
        self._queues = queues
        # an accepted replace ends the subscription it takes over, whatever its kind
        subscriptions.ends = (queues.end, sow.end)
        # the handlers :meth:`route` chooses from, bound once (so they compare by identity)
        self._queue_subscribe: CommandHandler = queues.subscribe
        self._queue_ack: CommandHandler = queues.ack
        self._sow_subscribe: CommandHandler = sow.subscribe
        self._sow_delete: CommandHandler = sow.sow_delete
        self._sow_and_subscribe: CommandHandler = sow.sow_and_subscribe
        self._pause_resume: CommandHandler = subscriptions.pause_or_resume
        self._subscribe: CommandHandler = subscriptions.subscribe
        self.handlers: dict[str, CommandHandler] = {
            "logon": clients.logon,
            "subscribe": self._routed,
            "delta_subscribe": self._routed,
            "unsubscribe": self._unsubscribe,
            "flush": acks.flush,
            "delta_publish": sow.delta_publish,
            "sow": self._sow_query,
            "sow_and_subscribe": self._routed,
            "sow_and_delta_subscribe": self._routed,
            "sow_delete": self._routed,
        }

    def kind(self, topic: str) -> TopicKind:
        """What ``topic`` is to the routing rule (a queue before a SOW topic)."""
        if topic in self._queues.queues:
            return "queue"
        if is_regex_topic(topic):
            return "regex"
        return "sow" if self._keeps(topic) else "plain"

    def _keeps(self, topic: str) -> bool:
        """Whether a SOW rule keeps ``topic`` (a name)."""
        return self._sow.topics.rule(topic) is not None

    def route(self, session: Session, cmd: Command) -> CommandHandler:
        """The handler of a ``subscribe``, ``delta_subscribe``, ``sow_and_subscribe``,
        ``sow_and_delta_subscribe`` or ``sow_delete`` (the routing rule); it changes
        nothing.

        Raises:
            InvalidOptions: a ``subscribe`` to a queue, or a ``delta_subscribe``, with
                ``bm``.
            InvalidTopic: a ``delta_subscribe`` to a topic that keeps no records.
        """
        topic = cmd.topic or ""
        kind = self.kind(topic)
        if cmd.name == "sow_delete":
            return self._queue_ack if kind == "queue" else self._sow_delete
        if cmd.name in ("sow_and_subscribe", "sow_and_delta_subscribe"):
            return self._sow_and_subscribe
        delta = cmd.name == "delta_subscribe"
        if not delta and kind == "queue":
            if cmd.bookmark:
                raise InvalidOptions(
                    "a queue subscription takes no bookmark (subscribe to the underlying "
                    "topic to replay its messages)"
                )
            return self._queue_subscribe
        # a delta_subscribe to a queue's name that a SOW rule keeps too is the SOW's
        keyed = kind == "sow" or (kind == "queue" and self._keeps(topic))
        if not cmd.bookmark and (keyed or (delta and kind == "regex")):
            if self._subscriptions.pauses_or_resumes(session, cmd):
                return self._pause_resume
            return self._sow_subscribe
        if delta and cmd.bookmark:
            raise InvalidOptions(
                "delta_subscribe cannot take a bookmark: deltas come from the stored "
                "records, a bookmark replay delivers the log"
            )
        if delta:
            raise InvalidTopic(f"delta_subscribe needs a SOW topic; {topic!r} keeps no records")
        return self._subscribe

    def _routed(self, session: Session, cmd: Command) -> Awaitable[None] | None:
        """A command :meth:`route` decides (its handler ends what a ``replace`` takes
        over, once the new subscription is accepted)."""
        return self.route(session, cmd)(session, cmd)

    def _sow_query(self, session: Session, cmd: Command) -> None:
        """``sow``: the query runs; once it is accepted (it did not raise), a sink of
        subscriptions is told of it."""
        self._sow.sow(session, cmd)
        happenings = self._happenings
        if happenings.subscriptions and session.name is not None:
            happenings.emit(SubscriptionHappening(
                event="queried", time_us=time_us(self._clock), connection=session.connection,
                client=session.name, user=session.user_name,
                sub_id=cmd.query_id or cmd.cid or "", command=cmd.name, kind="query",
                topic=cmd.topic or "", filter=cmd.filter,
                options=cmd.options or "",
                bookmark_kind=spec_kind(parse_bookmark(cmd.bookmark)) if cmd.bookmark else "none",
            ))  # fmt: skip

    def _unsubscribe(self, session: Session, cmd: Command) -> None:
        """``unsubscribe``: queue and SOW subscriptions end in their services, then the
        subscription service ends the rest and acks."""
        targets = self._subscriptions.unsubscribe_targets(session, cmd)
        for sub_id in targets:
            self._queues.end(session.subs[sub_id])
        for sub_id in targets:
            self._sow.end(session.subs[sub_id])
        self._subscriptions.unsubscribe(session, cmd)
