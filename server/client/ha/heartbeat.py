"""When a silent connection counts as dead (pure: times in, decisions out).

``set_heartbeat(interval, idle)`` asks the broker to send a heartbeat every ``interval``
seconds (the logon's ``hb``, docs/protocol.md; the broker also drops a client silent for two
intervals, so the client beats back at the same interval). Any frame is proof of life; a
connection from which nothing arrived for ``idle`` seconds (default: two intervals) is
dead, and the reconnect handler runs. The monitor looks every ``idle / 8`` seconds, so a
dead connection is noticed at most ``idle * 9 / 8`` after its last frame.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class HeartbeatLiveness:
    """The heartbeat settings and the decisions made from them.

    Attributes:
        interval: seconds between the broker's heartbeats.
        idle: seconds of silence after which the connection is dead.
    """

    interval: float
    idle: float

    @classmethod
    def of(cls, interval: float, idle: float | None = None) -> HeartbeatLiveness:
        if interval <= 0:
            raise ValueError(f"heartbeat interval must be > 0, not {interval}")
        idle = 2 * interval if idle is None else idle
        if idle < interval:
            raise ValueError(f"heartbeat idle ({idle}) must be at least the interval ({interval})")
        return cls(interval, idle)

    @property
    def check_every(self) -> float:
        return self.idle / 8

    def dead(self, now: float, last_received: float) -> bool:
        """Whether nothing arrived for ``idle`` seconds."""
        return now - last_received >= self.idle

    def next_check(self, now: float, last_received: float) -> float:
        """Seconds until the monitor looks again (never more than ``check_every``)."""
        return max(0.0, min(self.check_every, last_received + self.idle - now))


__all__ = ["HeartbeatLiveness"]
