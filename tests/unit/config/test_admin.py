"""The <Admin> section."""

from __future__ import annotations

import pytest

from tests.unit.config.helpers import (
    assert_refused,
    doc,
    parse,
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
        "ClientStatsRetention negative",
        "<Admin>\n<ClientStatsRetention>-1h</ClientStatsRetention></Admin>",
        "/SpoolConfig/Admin/ClientStatsRetention",
        4,
        "'-1h' is not a valid duration: a sign is not allowed",
    ),
    (
        "ClientStatsRetention without a unit it knows",
        "<Admin><ClientStatsRetention>1y</ClientStatsRetention></Admin>",
        "/SpoolConfig/Admin/ClientStatsRetention",
        3,
        "unknown unit 'y'",
    ),
    (
        "ClientStatsRetention above ten years",
        "<Admin><ClientStatsRetention>3651d</ClientStatsRetention></Admin>",
        "/SpoolConfig/Admin/ClientStatsRetention",
        3,
        "ClientStatsRetention must be between 1s and 3650d",
    ),
    (
        "ClientStatsLimit not a number",
        "<Admin><ClientStatsLimit>lots</ClientStatsLimit></Admin>",
        "/SpoolConfig/Admin/ClientStatsLimit",
        3,
        "'lots' is not a whole number",
    ),
    (
        "ClientStatsLimit too large",
        "<Admin>\n<ClientStatsLimit>1000001</ClientStatsLimit></Admin>",
        "/SpoolConfig/Admin/ClientStatsLimit",
        4,
        "ClientStatsLimit must be between 0 and 1000000, got 1000001",
    ),
    (
        "AllowedOrigins with a path",
        "<Admin><AllowedOrigins>https://ops.example.com/dash</AllowedOrigins></Admin>",
        "/SpoolConfig/Admin/AllowedOrigins",
        3,
        "'https://ops.example.com/dash' is not scheme://host[:port]",
    ),
    (
        "AllowedOrigins wildcard",
        "<Admin>\n<AllowedOrigins>https://a.example *</AllowedOrigins></Admin>",
        "/SpoolConfig/Admin/AllowedOrigins",
        4,
        "'*' is not an origin: it would match pages of any site",
    ),
    (
        "AllowedOrigins null",
        "<Admin><AllowedOrigins>null</AllowedOrigins></Admin>",
        "/SpoolConfig/Admin/AllowedOrigins",
        3,
        "'null' is the origin of sandboxed and local pages",
    ),
    (
        "AllowedOrigins of another scheme",
        "<Admin><AllowedOrigins>ws://a.example</AllowedOrigins></Admin>",
        "/SpoolConfig/Admin/AllowedOrigins",
        3,
        "the scheme of a web page is http or https, not 'ws'",
    ),
    (
        "AllowedOrigins empty",
        "<Admin><AllowedOrigins> , </AllowedOrigins></Admin>",
        "/SpoolConfig/Admin/AllowedOrigins",
        3,
        "<AllowedOrigins> is empty",
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


def test_allowed_origins_are_canonical_without_repeats_across_elements() -> None:
    body = (
        "<Admin><AllowedOrigins>HTTPS://Ops.Example.com, http://127.0.0.1:8080/</AllowedOrigins>"
        "<AllowedOrigins>https://ops.example.com:443 http://[0:0::1]:9000</AllowedOrigins>"
        "</Admin><Transports/>"
    )
    assert parse(doc(body)).admin.allowed_origins == (
        "https://ops.example.com",
        "http://127.0.0.1:8080",
        "http://[::1]:9000",
    )


def test_no_allowed_origins_by_default() -> None:
    assert parse(doc("<Transports/>")).admin.allowed_origins == ()


def test_client_stats_defaults() -> None:
    admin = parse(doc("<Transports/>")).admin
    assert (admin.client_stats_retention, admin.client_stats_limit) == (3600.0, 5000)


def test_client_stats_accepted() -> None:
    body = (
        "<Admin><ClientStatsRetention>15m</ClientStatsRetention>"
        "<ClientStatsLimit>200</ClientStatsLimit></Admin><Transports/>"
    )
    admin = parse(doc(body)).admin
    assert (admin.client_stats_retention, admin.client_stats_limit) == (900.0, 200)


def test_client_stats_zero_means_at_once_and_none() -> None:
    body = (
        "<Admin><ClientStatsRetention>0</ClientStatsRetention>"
        "<ClientStatsLimit>0</ClientStatsLimit></Admin><Transports/>"
    )
    admin = parse(doc(body)).admin
    assert (admin.client_stats_retention, admin.client_stats_limit) == (0.0, 0)
