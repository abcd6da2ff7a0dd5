"""The <Tuning> section."""

from __future__ import annotations

import pytest

from server.config import TuningConfig
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
        "</Tuning><Transports/>"
    )
    assert parse(doc(body)).tuning == TuningConfig(64 * 1024, 0.0, 0.001)
