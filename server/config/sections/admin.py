"""The ``<Admin>`` section: the REST admin, dashboard and /metrics on the web port."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Final

from spool.server.config.errors import OriginError
from spool.server.config.model import AdminConfig
from spool.server.config.netaddr import parse_origin
from spool.server.config.sections.alerts import AlertRulePart, read_alerts
from spool.server.config.sections.tls import TLS_ELEMENTS, ListenerPart, read_listener
from spool.server.config.values import (
    DAY,
    Bind,
    Context,
    read_bind,
    read_bool,
    read_choice,
    read_duration,
    read_int,
    read_path,
    read_value,
)
from spool.server.config.xmltree import Children, Spec, XmlNode, fail
from spool.server.units import format_duration

__all__ = ["AdminPart", "read_admin"]

_ADMIN_SPEC: Final[Spec] = {
    "InetAddr": False,
    "FileName": False,
    "Interval": False,
    "Authentication": False,
    "StatsRetention": False,
    "ClientStatsRetention": False,
    "ClientStatsLimit": False,
    "MetricsPublic": False,
    "AllowedOrigins": True,
    "Alerts": False,
    **TLS_ELEMENTS,
}
_AUTHENTICATION: Final = ("none", "token")
#: the most per-client series ClientStatsLimit may keep (about 100 000 clients)
MAX_CLIENT_STATS: Final = 1_000_000


@dataclass(frozen=True, slots=True)
class AdminPart:
    """The Admin section, and what the cross-checks need of it.

    Attributes:
        bind: the InetAddr the file gave, if any.
        config: host/port still the defaults (filled once the shared address is settled),
            ``authentication`` as written or the default.
        authentication: the Authentication element, if given (checked against Users).
        stats_explicit: whether the file gave FileName (so ``--data-dir`` leaves it alone).
        listener: the TLS elements it gave (sections/tls.py).
        alerts: the alert rules with their elements (cross-checked against the queues,
            destinations and transaction log).
    """

    bind: Bind | None
    config: AdminConfig
    authentication: XmlNode | None
    stats_explicit: bool
    listener: ListenerPart
    alerts: tuple[AlertRulePart, ...] = ()


def read_admin(node: XmlNode | None, ctx: Context, data_dir: Path) -> AdminPart:
    """Read ``<Admin>`` (absent: every default, the stats file under ``data_dir``)."""
    default = AdminConfig(stats_file=data_dir / "stats.db")
    if node is None:
        return AdminPart(None, default, None, False, ListenerPart(None, None, None, None))
    kids = Children(node, _ADMIN_SPEC)
    bind = None
    if (addr := kids.one("InetAddr")) is not None:
        bind = read_bind(addr, ctx)
    stats_node = kids.one("FileName")
    stats_file = read_path(stats_node, ctx) if stats_node is not None else default.stats_file
    interval = default.interval
    if (interval_node := kids.one("Interval")) is not None:
        interval = read_duration(interval_node, ctx, minimum=1.0, maximum=DAY)
    retention = default.stats_retention
    if (retention_node := kids.one("StatsRetention")) is not None:
        retention = read_duration(retention_node, ctx, minimum=1.0, maximum=3650 * DAY)
        if retention < interval:
            raise fail(
                retention_node,
                f"StatsRetention ({format_duration(retention)}) is shorter than the sampling "
                f"Interval ({format_duration(interval)}): no sample would be kept",
            )
    client_retention = default.client_stats_retention
    if (client_retention_node := kids.one("ClientStatsRetention")) is not None:
        client_retention = read_duration(
            client_retention_node, ctx, minimum=1.0, maximum=3650 * DAY, zero_ok=True
        )
    client_limit = default.client_stats_limit
    if (client_limit_node := kids.one("ClientStatsLimit")) is not None:
        client_limit = read_int(client_limit_node, ctx, minimum=0, maximum=MAX_CLIENT_STATS)
    auth_node = kids.one("Authentication")
    authentication = default.authentication
    if auth_node is not None:
        authentication = read_choice(auth_node, ctx, _AUTHENTICATION, "Authentication")
    metrics_public = default.metrics_public
    if (public_node := kids.one("MetricsPublic")) is not None:
        metrics_public = read_bool(public_node, ctx)
    config = replace(
        default,
        stats_file=stats_file,
        interval=interval,
        authentication=authentication,
        stats_retention=retention,
        client_stats_retention=client_retention,
        client_stats_limit=client_limit,
        metrics_public=metrics_public,
        allowed_origins=_allowed_origins(kids.many("AllowedOrigins"), ctx),
    )
    alerts_node = kids.one("Alerts")
    alerts = read_alerts(alerts_node, ctx) if alerts_node is not None else ()
    if alerts:
        config = replace(config, alert_rules=tuple(part.config for part in alerts))
    listener = read_listener(kids, ctx)
    return AdminPart(bind, config, auth_node, stats_node is not None, listener, alerts)


def _allowed_origins(nodes: list[XmlNode], ctx: Context) -> tuple[str, ...]:
    """Every ``<AllowedOrigins>``: each a list of origins separated by commas or spaces,
    kept canonical and without repeats (the element may also repeat)."""
    origins: list[str] = []
    for node in nodes:
        items = [item for item in read_value(node, ctx).replace(",", " ").split() if item]
        if not items:
            raise fail(
                node, "<AllowedOrigins> is empty (list origins such as https://ops.example.com)"
            )
        for item in items:
            try:
                origin = str(parse_origin(item))
            except OriginError as exc:
                raise fail(node, str(exc)) from exc
            if origin not in origins:
                origins.append(origin)
    return tuple(origins)
