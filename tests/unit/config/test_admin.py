"""The <Admin> section."""

from __future__ import annotations

import pytest

from tests.unit.config.helpers import (
    assert_refused,
)

# (id, body inside <SpoolConfig> after <Name>, path, line, fragment of the message)
REFUSED: list[tuple[str, str, str, int, str]] = [
    (
        "Admin Interval",
        "<Admin>\n<Interval>500ms</Interval>\n</Admin>",
        "/SpoolConfig/Admin/Interval",
        4,
        "Interval must be between 1s and 1d, got 500ms",
    ),
    (
        "bad MetricsPublic",
        "<Admin><MetricsPublic>on</MetricsPublic></Admin>",
        "/SpoolConfig/Admin/MetricsPublic",
        3,
        "'on' is not a boolean",
    ),
    (
        "StatsRetention below Interval",
        "<Admin><Interval>1m</Interval>\n<StatsRetention>30s</StatsRetention></Admin>",
        "/SpoolConfig/Admin/StatsRetention",
        4,
        "StatsRetention (30s) is shorter than the sampling Interval (1m)",
    ),
    (
        "unknown auth",
        "<Admin><Authentication>basic</Authentication></Admin>",
        "/SpoolConfig/Admin/Authentication",
        3,
        "'basic' is not a valid Authentication (allowed: none, token)",
    ),
]


@pytest.mark.parametrize(
    ("body", "path", "line", "fragment"),
    [case[1:] for case in REFUSED],
    ids=[case[0] for case in REFUSED],
)
def test_refused(body: str, path: str, line: int, fragment: str) -> None:
    assert_refused(body, path, line, fragment)
