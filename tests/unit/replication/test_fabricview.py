"""The fabric view: what an instance knows of every instance's routing configuration."""

from __future__ import annotations

from pathlib import Path

import pytest

from spool.server.config import parse_config
from spool.server.replication.errors import ReplicationProtocolError
from spool.server.replication.fabricview import FabricKnowledge
from spool.server.replication.peerframes import FabricEntry
from spool.server.replication.protocol import LinkProtocol, PeerReceived, Side, State
from spool.server.replication.validation import summarize
from tests.support.fabric import B, C, drive, fabric_of, scenario, xml
from tests.support.replication import destination


def _entry(name: str, version: int, ident: str = "i", topics: str = "orders") -> FabricEntry:
    config = parse_config(
        f"<SpoolConfig><Name>{name}</Name><TransactionLog><Topic><Name>{topics}</Name>"
        "</Topic></TransactionLog></SpoolConfig>",
        base_dir=Path("/tmp"),
        env={},
    )
    return FabricEntry(name, name, ident, version, summarize(config))


def test_a_later_version_replaces_an_earlier_and_the_own_entry_never_changes() -> None:
    view = FabricKnowledge(_entry("a", 10))
    assert view.merge([_entry("b", 5), _entry("c", 7)]) == ["b", "c"]
    changes = view.changes
    assert view.merge([_entry("b", 5), _entry("b", 4, topics="old")]) == []  # nothing new
    assert view.changes == changes
    assert view.merge([_entry("b", 6, "j", topics="trades")]) == ["b"]  # b restarted
    assert view.summaries()["b"].txlog[0].name == "trades"
    assert view.merge([_entry("a", 99, topics="forged")]) == []  # never its own
    assert view.summaries()["a"].txlog[0].name == "orders"
    assert sorted(e.name for e in view.message().entries) == ["a", "b", "c"]


def test_an_unreadable_summary_is_left_out() -> None:
    view = FabricKnowledge(_entry("a", 1))
    bad = FabricEntry("b", "b", "i", 3, {"name": 7})
    assert view.merge([bad]) == [] and "b" not in view.summaries()


def test_peer_messages_go_only_once_welcomed() -> None:
    src, dst = LinkProtocol(Side.SOURCE), LinkProtocol(Side.DESTINATION)
    view = FabricKnowledge(_entry("a", 1)).message()
    with pytest.raises(ReplicationProtocolError, match="once the link is welcomed"):
        src.send_peer(view)
    # a peer message before the welcome breaks the protocol
    from spool.server.replication.frames import encode

    dst.receive_data(encode(view))
    assert dst.state is State.CLOSED and dst.closed_by is not None
    assert "before the welcome" in dst.closed_by.error.detail


def test_peer_messages_flow_both_ways_after_the_welcome() -> None:
    src, dst = LinkProtocol(Side.SOURCE), LinkProtocol(Side.DESTINATION)
    src.hello(name="a", group="a", destination="b", expect_group="b", user=None, secret=None,
              compression=None, validation={})  # fmt: skip
    dst.receive_data(src.data_to_send())
    dst.events_received()
    dst.welcome(name="b", group="b", log_id="L", holdings={}, validation={})
    view = FabricKnowledge(_entry("b", 1)).message()
    dst.send_peer(view)
    src.receive_data(dst.data_to_send())
    assert [type(e).__name__ for e in src.events_received()] == ["Welcomed", "PeerReceived"]
    src.send_peer(view)
    dst.receive_data(src.data_to_send())
    (event,) = dst.events_received()
    assert isinstance(event, PeerReceived) and event.message == view
    assert src.state is State.WELCOMED and dst.state is State.WELCOMED


@scenario
async def test_a_chain_learns_the_whole_fabric_and_traces_a_topic_to_its_end(
    tmp_path: Path,
) -> None:
    """A -> B -> C: A never talks to C, yet learns its configuration through B, and its
    route trace follows a message to C; without passthrough on B it stops at B."""
    one_way = {"exclude": "replicate,replicate_filter,cascade"}
    configs = {
        "a": xml(tmp_path, "a", destination("b", [B], **one_way)),  # type: ignore[arg-type]
        "b": xml(tmp_path, "b", destination("c", [C], sync=False, **one_way)),  # type: ignore[arg-type]
        "c": xml(tmp_path, "c"),
    }
    async with fabric_of(tmp_path, configs) as (_fabric, clock, h):
        a = h["a"].broker.replication
        await drive(clock, lambda: a.view is not None and "c" in a.view.summaries())
        trace = a.route("orders")
        hops = [[(x["source"], x["target"], x["sync_type"]) for x in r["hops"]]
                for r in trace["routes"]]  # fmt: skip
        assert hops == [[("a", "b", "sync")], [("a", "b", "sync"), ("b", "c", "async")]]
        assert trace["routes"][0]["hops"][0]["connected"] is True
        # c learned of a too, through b's messages back to it (welcome side)
        c_view = h["c"].broker.replication.view
        await drive(clock, lambda: c_view is not None and "a" in c_view.summaries())
