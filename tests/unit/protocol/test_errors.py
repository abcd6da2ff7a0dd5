"""The failure catalog matches the reason strings of docs/protocol.md "Failure reasons"
exactly, one class each."""

from __future__ import annotations

from spool.server.protocol import errors

PROTOCOL_REASONS = [
    "logon required",
    "name in use",
    "auth failure",
    "not entitled",
    "invalid topic",
    "bad regex topic",
    "bad filter",
    "invalid bookmark",
    "bookmark not found",
    "invalid options",
    "subid in use",
    "subid not found",
    "invalid command",
    "invalid message",
    "duplicate",
    "txlog full",
    "slow client",
    "heartbeat",
    "shutting down",
]
#: reasons Spool adds: a connection or user past a quota of <Tuning> (docs/protocol.md
#: "Limits ..."); a client name logged on at another instance of the fabric ("Logon")
SPOOL_REASONS = ["limit exceeded", "name in use elsewhere"]


def test_one_class_per_reason() -> None:
    assert sorted(errors.BY_REASON) == sorted(PROTOCOL_REASONS + SPOOL_REASONS)
    assert len({cls for cls in errors.ALL_FAILURES}) == len(PROTOCOL_REASONS + SPOOL_REASONS)


def test_failure_for_round_trips_and_keeps_detail() -> None:
    for reason in PROTOCOL_REASONS + SPOOL_REASONS:
        exc = errors.failure_for(reason, "why")
        assert exc.reason == reason
        assert exc.detail == "why"
        assert str(exc) == f"{reason}: why"
    unknown = errors.failure_for("something new")
    assert isinstance(unknown, errors.InvalidMessage)
