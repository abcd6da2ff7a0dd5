"""The operations files shipped with the broker: Prometheus alert rules and a Grafana
dashboard over the metrics of ``GET /metrics`` (docs/monitoring.md).

They are package data, so an installed broker has them wherever it is installed:
``spool ops alerts`` and ``spool ops grafana`` print them.
"""

from __future__ import annotations

from importlib.resources import files
from typing import Final

__all__ = ["FILES", "read"]

#: what ``spool ops WHAT`` prints: WHAT -> the file
FILES: Final = {"alerts": "alerts.yml", "grafana": "grafana-dashboard.json"}


def read(what: str) -> str:
    """The text of one operations file (``alerts`` or ``grafana``)."""
    return files(__name__).joinpath(FILES[what]).read_text(encoding="utf-8")
