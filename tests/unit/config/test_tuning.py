"""The <Tuning> section."""

from __future__ import annotations

import pytest

from tests.unit.config.helpers import (
    assert_refused,
)

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
        "MinimumSyncDestinations",
        "<Tuning><MinimumSyncDestinations>x</MinimumSyncDestinations></Tuning>",
        "/SpoolConfig/Tuning/MinimumSyncDestinations",
        3,
        "'x' is not a whole number",
    ),
]


@pytest.mark.parametrize(
    ("body", "path", "line", "fragment"),
    [case[1:] for case in REFUSED],
    ids=[case[0] for case in REFUSED],
)
def test_refused(body: str, path: str, line: int, fragment: str) -> None:
    assert_refused(body, path, line, fragment)
