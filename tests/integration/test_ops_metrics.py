"""Every metric the shipped alert rules and dashboard use (server/ops) is one a real
broker's ``/metrics`` serves: a TLS instance with a queue and an event topic, so the
families that exist only with TLS, queues or event topics are there too."""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
import yaml

from spool.server.client import client_context
from tests.support.certs import TestCA
from tests.support.server import ROOT, SpoolProcess, config_xml

OPS = ROOT / "server" / "ops"
QUEUE = (
    "<Queue><Name>work</Name><MessageType>json</MessageType>"
    "<UnderlyingTopic>work-in</UnderlyingTopic></Queue>"
)
#: the sample names each metric type adds to its family's name
SUFFIXES = {
    "counter": ("_total", "_created"),
    "gauge": ("",),
    "summary": ("", "_count", "_sum", "_created"),
    "histogram": ("_bucket", "_count", "_sum", "_created"),
}


def used() -> set[str]:
    """The Spool metric names in the alert rules and the dashboard's queries."""
    rules = yaml.safe_load((OPS / "alerts.yml").read_text())
    exprs = [str(r["expr"]) for g in rules["groups"] for r in g["rules"]]
    board = json.loads((OPS / "grafana-dashboard.json").read_text())
    exprs += [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    return {m for e in exprs for m in re.findall(r"\bspool_[a-z0-9_]+", e)}


def served(text: str) -> set[str]:
    """Every sample name the exposition's families can have."""
    names: set[str] = set()
    for kind_line in re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M):
        family, kind = kind_line
        base = family.removesuffix("_total") if kind == "counter" else family
        names |= {base + suffix for suffix in SUFFIXES.get(kind, ("",))}
    return names


def test_every_metric_the_ops_files_use_is_served(tmp_path: Path) -> None:
    ca = TestCA(tmp_path / "pki")
    cert = ca.issue_server("server")
    xml = config_xml(
        tmp_path / "data",
        sow=QUEUE,
        event_topics="<Topic><Name>/spool/events/clients</Name></Topic>",
        admin_extra=f"<Certificate>{cert.cert_path}</Certificate>"
        f"<PrivateKey>{cert.key_path}</PrivateKey>",
    )
    proc = SpoolProcess(tmp_path / "srv", xml, tls=True).start()
    try:
        verify = client_context(cafile=ca.cert_path)
        with httpx.Client(base_url=proc.http_url, verify=verify) as http:
            text = http.get("/metrics").text
    finally:
        proc.stop()
    names = used()
    assert len(names) > 30
    assert "spool_tls_certificate_not_after_seconds" in names
    assert names - served(text) == set()
