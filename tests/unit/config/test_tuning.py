"""The <Tuning> section."""

from __future__ import annotations

import pytest

from spool.server.config import TuningConfig
from tests.unit.config.helpers import assert_refused, doc, parse

# (id, body inside <SpoolConfig> after <Name>, path, line, fragment of the message)
REFUSED: list[tuple[str, str, str, int, str]] = [
    (
        "unknown in Tuning",
        "<Tuning>\n<Foo>1</Foo>\n</Tuning>",
        "/SpoolConfig/Tuning/Foo",
        4,
        "unknown element <Foo> in <Tuning>",
    ),
    (
        "HeartbeatDefault",
        "<Tuning>\n<HeartbeatDefault>500ms</HeartbeatDefault>\n</Tuning>",
        "/SpoolConfig/Tuning/HeartbeatDefault",
        4,
        "HeartbeatDefault must be between 1s and 1h (or 0), got 500ms",
    ),
    (
        "SlowClientTimeout too short",
        "<Tuning>\n<SlowClientTimeout>500ms</SlowClientTimeout>\n</Tuning>",
        "/SpoolConfig/Tuning/SlowClientTimeout",
        4,
        "SlowClientTimeout must be between 1s and 1d, got 500ms",
    ),
    (
        "SlowClientTimeout zero",
        "<Tuning><SlowClientTimeout>0</SlowClientTimeout></Tuning>",
        "/SpoolConfig/Tuning/SlowClientTimeout",
        3,
        "SlowClientTimeout must be between 1s and 1d",
    ),
    # A floor above the sync destinations would refuse every downgrade.
    (
        "MinimumSyncDestinations",
        "<Tuning><SlowClientBufferLimit>64MB</SlowClientBufferLimit>\n"
        "<MinimumSyncDestinations>1</MinimumSyncDestinations></Tuning>",
        "/SpoolConfig/Tuning/MinimumSyncDestinations",
        4,
        "MinimumSyncDestinations is 1 but only 0 destinations are configured sync",
    ),
    (
        "MinimumSyncDestinations above 64",
        "<Tuning>\n<MinimumSyncDestinations>65</MinimumSyncDestinations></Tuning>",
        "/SpoolConfig/Tuning/MinimumSyncDestinations",
        4,
        "MinimumSyncDestinations must be between 0 and 64, got 65",
    ),
    (
        "JournalScrubInterval too short",
        "<Tuning>\n<JournalScrubInterval>10s</JournalScrubInterval></Tuning>",
        "/SpoolConfig/Tuning/JournalScrubInterval",
        4,
        "JournalScrubInterval must be between 1m and 365d (or 0), got 10s",
    ),
    (
        "JournalScrubRate too low",
        "<Tuning>\n<JournalScrubRate>1KB</JournalScrubRate></Tuning>",
        "/SpoolConfig/Tuning/JournalScrubRate",
        4,
        "JournalScrubRate",
    ),
    (
        "ActionEventQueueDepth zero",
        "<Tuning>\n<ActionEventQueueDepth>0</ActionEventQueueDepth></Tuning>",
        "/SpoolConfig/Tuning/ActionEventQueueDepth",
        4,
        "ActionEventQueueDepth must be between 1 and 1000000, got 0",
    ),
    (
        "ActionEventQueueDepth too deep",
        "<Tuning><ActionEventQueueDepth>1000001</ActionEventQueueDepth></Tuning>",
        "/SpoolConfig/Tuning/ActionEventQueueDepth",
        3,
        "ActionEventQueueDepth must be between 1 and 1000000",
    ),
    (
        "ActionCatchUpRecords negative",
        "<Tuning>\n<ActionCatchUpRecords>-1</ActionCatchUpRecords></Tuning>",
        "/SpoolConfig/Tuning/ActionCatchUpRecords",
        4,
        "'-1' is not a whole number",
    ),
    (
        "ActionCatchUpRecords too many",
        "<Tuning>\n<ActionCatchUpRecords>100000001</ActionCatchUpRecords></Tuning>",
        "/SpoolConfig/Tuning/ActionCatchUpRecords",
        4,
        "ActionCatchUpRecords must be between 0 and 100000000",
    ),
    (
        "ActionHistoryInterval too short",
        "<Tuning>\n<ActionHistoryInterval>5s</ActionHistoryInterval></Tuning>",
        "/SpoolConfig/Tuning/ActionHistoryInterval",
        4,
        "ActionHistoryInterval must be between 10s and 1d, got 5s",
    ),
    (
        "ActionHistoryInterval zero",
        "<Tuning>\n<ActionHistoryInterval>0</ActionHistoryInterval></Tuning>",
        "/SpoolConfig/Tuning/ActionHistoryInterval",
        4,
        "ActionHistoryInterval must be between 10s and 1d",
    ),
]


@pytest.mark.parametrize(
    ("body", "path", "line", "fragment"),
    [case[1:] for case in REFUSED],
    ids=[case[0] for case in REFUSED],
)
def test_refused(body: str, path: str, line: int, fragment: str) -> None:
    assert_refused(body, path, line, fragment)


def test_every_tuning_element_can_be_set() -> None:
    body = (
        "<Tuning><SlowClientBufferLimit>64KB</SlowClientBufferLimit>"
        "<HeartbeatDefault>0</HeartbeatDefault><PersistedAckInterval>1ms</PersistedAckInterval>"
        "<SlowClientTimeout>2m</SlowClientTimeout></Tuning><Transports/>"
    )
    assert parse(doc(body)).tuning == TuningConfig(
        slow_client_buffer_limit=64 * 1024,
        heartbeat_default=0.0,
        persisted_ack_interval=0.001,
        slow_client_timeout=120.0,
    )


def test_slow_client_timeout_defaults_to_30s() -> None:
    assert parse(doc("<Transports/>")).tuning.slow_client_timeout == 30.0


def test_the_journal_scrub_runs_daily_at_64mb_a_second_unless_told_otherwise() -> None:
    tuning = parse(doc("<Transports/>")).tuning
    assert (tuning.journal_scrub_interval, tuning.journal_scrub_rate) == (86400.0, 64 << 20)
    body = (
        "<Tuning><JournalScrubInterval>6h</JournalScrubInterval>"
        "<JournalScrubRate>8MB</JournalScrubRate></Tuning><Transports/>"
    )
    tuning = parse(doc(body)).tuning
    assert (tuning.journal_scrub_interval, tuning.journal_scrub_rate) == (21600.0, 8 << 20)
    off = parse(doc("<Tuning><JournalScrubInterval>0</JournalScrubInterval></Tuning><Transports/>"))
    assert off.tuning.journal_scrub_interval == 0.0


def test_the_bounds_of_event_actions_default_and_can_be_set() -> None:
    tuning = parse(doc("<Transports/>")).tuning
    assert (
        tuning.action_event_queue_depth,
        tuning.action_catch_up_records,
        tuning.action_history_interval,
    ) == (10_000, 100_000, 60.0)
    body = (
        "<Tuning><ActionEventQueueDepth>500</ActionEventQueueDepth>"
        "<ActionCatchUpRecords>0</ActionCatchUpRecords>"
        "<ActionHistoryInterval>5m</ActionHistoryInterval></Tuning><Transports/>"
    )
    tuning = parse(doc(body)).tuning
    assert (
        tuning.action_event_queue_depth,
        tuning.action_catch_up_records,
        tuning.action_history_interval,
    ) == (500, 0, 300.0)
