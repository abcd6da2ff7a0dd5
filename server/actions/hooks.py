"""The happening triggers: a sink of the happenings bus that offers to actions' lanes.

:class:`ActionHappenings` is added to the bus (server/happenings.py) by the engine when an
action has a client, link, SOW or dead-letter trigger, and only for the families those triggers need:
with none, producers see the family's flag down and build nothing. For the SOW families it
says which topics it watches (:meth:`ActionHappenings.watches`), so a SOW topic no trigger
names costs its publishes and deletes one cached lookup and nothing else. :meth:`ActionHappenings.happened`
runs on the event loop in the middle of the producer's change, so it only picks the triggers
the happening concerns (its kind, transport, direction, state, link: a few comparisons) and
offers a :class:`HappeningRun` to each one's lane (O(1), never blocks; a full lane drops and
counts). The trigger's ``Filter`` and the steps run in the action's worker, later.

Happening triggers are at most once: a happening queued when the instance crashes is lost.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Protocol

from spool.server.config import OnClient, OnDeadLetter, OnLinkState, OnOof, OnSowRemoval
from spool.server.expr.values import Value
from spool.server.ports import (
    ClientHappening,
    DeadLetterHappening,
    Happening,
    HappeningFamily,
    LinkHappening,
    SowChangeHappening,
    SowRemovalHappening,
)

__all__ = [
    "ActionHappenings",
    "HappeningLane",
    "HappeningRun",
    "LetterRun",
    "SowRun",
    "describe",
    "document",
    "families",
    "takes",
    "variables",
]

_FAMILY: Final[Mapping[type, HappeningFamily]] = {
    OnClient: "clients", OnLinkState: "links", OnDeadLetter: "dead_letters",
}  # fmt: skip
#: what an oof trigger's reasons need
_OOF_REMOVALS: Final = frozenset({"deleted", "expired"})


@dataclass(frozen=True, slots=True)
class HappeningRun:
    """One happening a trigger of an action takes.

    Attributes:
        happening: what happened.
        trigger: the trigger's index among the action's triggers.
    """

    happening: ClientHappening | LinkHappening
    trigger: int

    @property
    def count(self) -> int:
        """Candidate messages it stands for (one firing at most)."""
        return 1


@dataclass(frozen=True, slots=True)
class SowRun:
    """Records of one SOW happening a trigger of an action takes (each record, or each
    change, is one candidate: the worker filters them).

    Attributes:
        happening: the records removed or the changes stored.
        trigger: the trigger's index among the action's triggers.
    """

    happening: SowRemovalHappening | SowChangeHappening
    trigger: int

    @property
    def count(self) -> int:
        """Candidate messages it stands for."""
        h = self.happening
        return len(h.records) if isinstance(h, SowRemovalHappening) else len(h.changes)


@dataclass(frozen=True, slots=True)
class LetterRun:
    """Dead letters of one queue a trigger of an action takes (each letter is one
    candidate).

    Attributes:
        happening: the dead letters published.
        trigger: the trigger's index among the action's triggers.
    """

    happening: DeadLetterHappening
    trigger: int

    @property
    def count(self) -> int:
        """Candidate messages it stands for."""
        return len(self.happening.letters)


class HappeningLane(Protocol):
    """Where a trigger's happenings wait (an action's lane)."""

    def offer(self, item: HappeningRun | SowRun | LetterRun) -> bool: ...


HappeningTrigger = OnClient | OnLinkState | OnSowRemoval | OnOof | OnDeadLetter


def families(trigger: HappeningTrigger) -> frozenset[HappeningFamily]:
    """The families ``trigger`` needs told."""
    if isinstance(trigger, OnSowRemoval):
        return frozenset({"sow_removals"})
    if isinstance(trigger, OnOof):
        out: set[HappeningFamily] = set()
        if _OOF_REMOVALS.intersection(trigger.reasons):
            out.add("sow_removals")
        if "match" in trigger.reasons and trigger.filter is not None:
            out.add("sow_changes")  # without a filter no update takes a record out
        return frozenset(out)
    return frozenset({_FAMILY[type(trigger)]})


def takes(trigger: HappeningTrigger, happening: Happening) -> bool:
    """Whether ``trigger`` fires on ``happening`` (before its ``Filter``)."""
    if isinstance(happening, SowRemovalHappening):
        if isinstance(trigger, OnSowRemoval):
            source = trigger.source
            return (
                happening.reason == trigger.reason
                and (source == "all" or source == happening.source)
                and trigger.topic.matches(happening.topic)
            )
        return (
            isinstance(trigger, OnOof)
            and happening.reason in trigger.reasons
            and trigger.topic.matches(happening.topic)
        )
    if isinstance(happening, SowChangeHappening):
        return (
            isinstance(trigger, OnOof)
            and "match" in trigger.reasons
            and trigger.filter is not None
            and trigger.topic.matches(happening.topic)
        )
    if isinstance(happening, DeadLetterHappening):
        return isinstance(trigger, OnDeadLetter) and happening.queue in trigger.queues
    if isinstance(trigger, OnSowRemoval | OnOof | OnDeadLetter):
        return False
    if isinstance(trigger, OnClient):
        return (
            isinstance(happening, ClientHappening)
            and happening.event == trigger.event
            and (not trigger.transports or happening.transport in trigger.transports)
        )
    return (
        isinstance(happening, LinkHappening)
        and trigger.direction in ("both", happening.direction)
        and happening.event in trigger.states
        and (not trigger.links or happening.link in trigger.links)
    )


class ActionHappenings:
    """The client, link, SOW and dead-letter triggers of an instance, as a happenings sink
    (see the module docstring)."""

    def __init__(self) -> None:
        self._bindings: dict[HappeningFamily, list[tuple[HappeningLane, HappeningTrigger, int]]]
        self._bindings = {}

    def bind(self, lane: HappeningLane, trigger: HappeningTrigger, index: int) -> None:
        """Offer what ``trigger`` (the ``index``-th trigger of the lane's action) fires on to
        ``lane``. Before the sink is added to the bus."""
        for family in families(trigger):
            self._bindings.setdefault(family, []).append((lane, trigger, index))

    @property
    def families(self) -> frozenset[HappeningFamily]:
        """The families some trigger watches (none: the sink is not added)."""
        return frozenset(self._bindings)

    def watches(self, family: HappeningFamily, topic: str) -> bool:
        """Whether a SOW trigger of ``family`` names ``topic`` (the bus remembers it)."""
        return any(
            isinstance(trigger, OnSowRemoval | OnOof) and trigger.topic.matches(topic)
            for _lane, trigger, _index in self._bindings.get(family, ())
        )

    def happened(self, happening: Happening) -> None:
        """Offer ``happening`` to the lane of each trigger it fires."""
        for lane, trigger, index in self._bindings.get(happening.family, ()):
            if not takes(trigger, happening):
                continue
            if isinstance(happening, SowRemovalHappening | SowChangeHappening):
                lane.offer(SowRun(happening, index))
            elif isinstance(happening, DeadLetterHappening):
                lane.offer(LetterRun(happening, index))
            elif isinstance(happening, ClientHappening | LinkHappening):
                lane.offer(HappeningRun(happening, index))


def document(happening: ClientHappening | LinkHappening) -> dict[str, Value]:
    """The happening as a document, as a trigger's ``Filter`` reads it (``/client_name``,
    ``/cause``; ``/link``, ``/state``...)."""
    h = happening
    if isinstance(h, ClientHappening):
        return {
            "event": h.event, "connection": h.connection, "client_name": h.client,
            "user": h.user, "remote": h.remote, "transport": h.transport, "tls": h.tls,
            "certificate": h.certificate, "version": h.version, "options": h.options,
            "reason": h.reason, "cause": h.cause, "msgs_in": h.msgs_in,
            "msgs_out": h.msgs_out, "subscriptions": h.subscriptions,
        }  # fmt: skip
    return {
        "event": h.event, "state": h.event, "direction": h.direction, "link": h.link,
        "remote": h.remote, "connected": h.connected, "sync_type": h.sync_type,
        "detail": h.detail,
    }  # fmt: skip


def variables(happening: ClientHappening | LinkHappening) -> dict[str, str]:
    """The variables a firing on ``happening`` runs with (besides the base ones)."""
    h = happening
    if isinstance(h, ClientHappening):
        out = {
            "AMPS_CLIENT_NAME": h.client or "",
            "AMPS_CONNECTION_NAME": f"{h.transport}-{h.connection}",
            "AMPS_AUTHENTICATION_ID": h.user or "",
            "AMPS_REMOTE_ADDRESS": h.remote,
            "AMPS_TRANSPORT_NAME": h.transport,
        }
        if h.event == "disconnected":
            out["AMPS_REASON"] = h.reason or ""
            out["AMPS_DISCONNECT_CAUSE"] = h.cause or ""
        return out
    return {
        "AMPS_REPLICATION_PEER_NAME": h.remote or "",
        "AMPS_LINK_NAME": h.link,
        "AMPS_LINK_DIRECTION": h.direction,
        "AMPS_LINK_STATE": h.event,
        "AMPS_LINK_DETAIL": h.detail,
        "AMPS_SYNC_TYPE": h.sync_type or "",
    }


def describe(happening: ClientHappening | LinkHappening) -> str:
    """A firing's detail in the history ("client X on connection T-N", "link L (out)
    disconnected")."""
    h = happening
    if isinstance(h, ClientHappening):
        who = f"client {h.client}" if h.client else f"a client from {h.remote}"
        return f"{who} on connection {h.transport}-{h.connection} {h.event}"
    return f"link {h.link} ({h.direction}) {h.event}"
