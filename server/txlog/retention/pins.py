"""Retention pins: who still needs which part of the log.

A replay, a queue or a replication destination that will read from seq ``S`` holds a
:class:`Pin` at ``S`` and moves it forward as it progresses. Archiving, compressing or
removing a journal that holds any seq at or after the lowest pin is refused
(:class:`~spool.server.txlog.errors.JournalPinned`), so data someone still needs is never taken
away under them. Pins live in memory: holders take them again when they start.

Pins belong to the event loop (no locking).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Pin", "PinInfo", "PinRegistry"]


@dataclass(frozen=True, slots=True)
class PinInfo:
    """A pin as the admin API lists it."""

    owner: str
    seq: int


class Pin:
    """A hold on every record from :attr:`seq` on. Release it when done."""

    __slots__ = ("_registry", "_seq", "owner")

    def __init__(self, registry: PinRegistry, owner: str, seq: int) -> None:
        self._registry: PinRegistry | None = registry
        self.owner = owner
        self._seq = seq

    @property
    def seq(self) -> int:
        """The oldest seq still needed."""
        return self._seq

    @property
    def released(self) -> bool:
        """The pin no longer holds anything."""
        return self._registry is None

    def move(self, seq: int) -> None:
        """Hold from ``seq`` instead (usually forward, as the holder progresses)."""
        if self._registry is None:
            raise ValueError(f"pin of {self.owner} was released")
        self._seq = seq

    def release(self) -> None:
        """Stop holding; idempotent."""
        if self._registry is not None:
            self._registry._drop(self)
            self._registry = None

    def __repr__(self) -> str:
        state = "released" if self.released else f"seq={self._seq}"
        return f"Pin({self.owner!r}, {state})"


class PinRegistry:
    """The live pins of one log."""

    def __init__(self) -> None:
        self._pins: dict[int, Pin] = {}

    def pin(self, owner: str, seq: int) -> Pin:
        """Hold every record from ``seq`` on, on behalf of ``owner``."""
        pin = Pin(self, owner, seq)
        self._pins[id(pin)] = pin
        return pin

    def _drop(self, pin: Pin) -> None:
        self._pins.pop(id(pin), None)

    def lowest(self) -> Pin | None:
        """The pin holding the oldest seq, if any."""
        return min(self._pins.values(), key=lambda p: p.seq, default=None)

    def holder_at_or_below(self, seq: int) -> Pin | None:
        """A pin whose seq is at or below ``seq`` (it needs a journal ending at ``seq``)."""
        low = self.lowest()
        return low if low is not None and low.seq <= seq else None

    def list(self) -> list[PinInfo]:
        """Every live pin, oldest seq first."""
        return sorted((PinInfo(p.owner, p.seq) for p in self._pins.values()), key=lambda i: i.seq)
