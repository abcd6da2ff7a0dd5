"""Two instances that share a Name: the second link is refused, visibly, not swapped in.

Brokers of one process on a virtual clock (tests/support/fabric.py). B and C both call
themselves ``b``; each has its own data directory, so its own identity.
"""

from __future__ import annotations

from pathlib import Path

from tests.support.fabric import A, B, C, drive, fabric_of, scenario, xml
from tests.support.replication import destination, replication_xml

ONE_WAY = "replicate,replicate_filter,cascade"


def _twin(tmp_path: Path, *dests: str) -> str:
    """Instance C's configuration: its own data directory, but the Name ``b``."""
    return replication_xml(tmp_path / "c" / "data", "b", destinations=dests)


@scenario
async def test_a_second_source_with_a_taken_name_is_refused_and_the_first_stays(
    tmp_path: Path,
) -> None:
    configs = {
        "a": xml(tmp_path, "a"),
        "b": xml(tmp_path, "b", destination("a", [A], exclude=ONE_WAY)),
        "c": _twin(tmp_path, destination("a", [A], exclude=ONE_WAY)),
    }
    async with fabric_of(tmp_path, configs) as (_fabric, clock, h):
        a = h["a"].broker.replication
        links = {k: h[k].broker.replication.destinations["a"] for k in ("b", "c")}

        def refusals() -> list[dict[str, object]]:
            return [e for e in h["a"].broker.events.recent()
                    if e["event"] == "duplicate_instance_name"]  # fmt: skip

        # one of them gets in; the other is refused, again and again (never swapped in)
        await drive(clock, lambda: len(refusals()) >= 3)
        accepted = a.inbound["b"]
        (kept,) = [k for k, link in links.items() if link.connected]
        refused = "c" if kept == "b" else "b"
        assert accepted.instance_id == h[kept].broker.replication.instance_id()
        assert not links[refused].connected
        assert "name conflict" in (links[refused].last_error or "")
        assert "two instances share the Name" in (links[refused].last_error or "")
        # the same link object all along: the refused one did not replace it
        assert a.inbound["b"] is accepted and accepted.state == "streaming"
        # visible: the event, the REST view, the alert
        event = refusals()[-1]
        assert event["instance"] == "b" and event["level"] == "error"
        (conflict,) = a.info()["conflicts"]
        assert conflict["kind"] == "instance_name" and conflict["name"] == "b"
        assert conflict["count"] >= 3
        (alert,) = h["a"].broker.operations.alerts()
        assert alert["id"] == "replication-conflict-instance-name" and "'b'" in alert["message"]
        inbound_refused = [e for e in h["a"].broker.events.recent()
                           if e["event"] == "inbound_refused"]  # fmt: skip
        assert inbound_refused and inbound_refused[-1]["reason"] == "name conflict"


@scenario
async def test_a_destination_answered_by_a_second_instance_of_a_linked_name_is_refused(
    tmp_path: Path,
) -> None:
    """A's destinations ``b`` and ``c`` reach two instances that both say they are ``b``:
    A keeps the first and refuses the second's welcome."""
    configs = {
        "a": xml(
            tmp_path,
            "a",
            destination("b", [B], exclude=ONE_WAY),
            destination("c", [C], group="b", exclude=ONE_WAY),
        ),
        "b": xml(tmp_path, "b"),
        "c": _twin(tmp_path),
    }
    async with fabric_of(tmp_path, configs) as (_fabric, clock, h):
        dests = h["a"].broker.replication.destinations
        await drive(clock, lambda: any(d.connected for d in dests.values()))
        await drive(
            clock,
            lambda: any("name conflict" in (d.last_error or "") for d in dests.values()),
        )
        (up,) = [d for d in dests.values() if d.connected]
        (down,) = [d for d in dests.values() if not d.connected]
        assert up.remote_name == "b" and "two instances share the Name" in (down.last_error or "")
        conflicts = h["a"].broker.replication.info()["conflicts"]
        assert [c["kind"] for c in conflicts] == ["instance_name"]


@scenario
async def test_the_same_instance_reconnecting_replaces_its_old_link(tmp_path: Path) -> None:
    """A source that dials again (its old link not noticed gone yet) is the same instance:
    its new link replaces the old one, with no conflict."""
    configs = {
        "a": xml(tmp_path, "a"),
        "b": xml(tmp_path, "b", destination("a", [A], exclude=ONE_WAY)),
    }
    async with fabric_of(tmp_path, configs) as (_fabric, clock, h):
        a = h["a"].broker.replication
        link = h["b"].broker.replication.destinations["a"]
        await drive(clock, lambda: link.connected and "b" in a.inbound)
        first = a.inbound["b"]
        link.reconnect()
        await drive(clock, lambda: a.inbound.get("b") not in (None, first) and link.connected)
        assert a.info()["conflicts"] == []
        assert not h["a"].broker.operations.alerts()
