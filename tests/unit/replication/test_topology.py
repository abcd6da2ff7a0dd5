"""What a destination does not get (server/replication/topology.py), from real
configurations."""

from __future__ import annotations

from pathlib import Path

from spool.server.config import parse_config
from spool.server.replication.topology import (
    MAX_ROUTES,
    RouteTrace,
    drops_of,
    passes_every_group,
    route_trace,
)
from spool.server.replication.validation import Summary, parse_summary, summarize
from tests.support.fabric import B, C, fabric_of, scenario, xml
from tests.support.replication import destination


def _summary(txlog: str, *dests: str, name: str = "a") -> Summary:
    topics = "".join(f"<Topic><Name>{t}</Name></Topic>" for t in txlog.split())
    config = parse_config(
        f"<SpoolConfig><Name>{name}</Name><TransactionLog>{topics}</TransactionLog>"
        f"<Replication>{''.join(dests)}</Replication></SpoolConfig>",
        base_dir=Path("/tmp"),
        env={},
    )
    return parse_summary(summarize(config))


def _dest(to: str, *blocks: str, extra: str = "") -> str:
    return (
        f"<Destination><Name>{to}</Name><SyncType>sync</SyncType>{extra}{''.join(blocks)}"
        "<Transport><Type>amps-replication</Type><InetAddr>127.0.0.1:9</InetAddr></Transport>"
        "</Destination>"
    )


def _block(topic: str, flt: str = "") -> str:
    f = f"<Filter>{flt}</Filter>" if flt else ""
    return f"<Topic><Name>{topic}</Name><ExcludeValidation>txlog</ExcludeValidation>{f}</Topic>"


def test_a_destination_that_takes_everything_drops_nothing() -> None:
    summary = _summary("orders ^md", _dest("b", _block(".*")))
    (dest,) = summary.destinations
    drops = drops_of(summary, dest)
    assert not drops.anything and drops.sentences() == []
    assert drops.info() == {"topics": [], "filtered": [], "groups": None, "summary": []}


def test_uncovered_topics_filters_and_passthrough_are_each_said() -> None:
    summary = _summary(
        "orders trades ^md",
        _dest("b", _block("orders", "/qty &gt; 0"), extra="<PassThrough>^nyc</PassThrough>"),
        _dest("c", _block("^md"), _block("trades"), extra="<PassThrough/>"),
    )
    b, c = summary.destinations
    info_b = drops_of(summary, b).info()
    assert info_b["topics"] == ["trades", "^md"]
    assert info_b["filtered"] == [{"topic": "orders", "filter": "/qty > 0"}]
    assert info_b["groups"] == ["^nyc"]
    assert info_b["summary"] == [
        "recorded topics no topic block takes: 'trades', '^md'",
        "'orders' only where /qty > 0",
        "messages that arrived by replication only from groups matching '^nyc'",
    ]
    info_c = drops_of(summary, c).info()
    assert info_c["topics"] == ["orders"] and info_c["groups"] == []
    assert "empty PassThrough" in info_c["summary"][-1]


def test_a_pattern_block_covers_the_topics_it_matches_but_not_another_pattern() -> None:
    summary = _summary("orders.us orders.eu ^orders", _dest("b", _block("^orders\\.")))
    (dest,) = summary.destinations
    # the block's pattern matches both names; a different pattern may take other topics
    assert drops_of(summary, dest).info()["topics"] == ["^orders"]


def test_every_group_patterns() -> None:
    assert passes_every_group((".*",)) and passes_every_group(("^nyc", "^.*$"))
    assert not passes_every_group(()) and not passes_every_group(("^nyc",))


@scenario
async def test_an_instance_says_at_start_what_each_destination_does_not_get(
    tmp_path: Path,
) -> None:
    """The start-up warning and ``GET /api/replication`` agree; a destination that gets
    everything is not mentioned."""
    configs = {
        "a": xml(
            tmp_path, "a",
            destination("b", [B], topics=(("orders", None),), exclude="txlog,replicate"),
            destination("c", [C], exclude="replicate", passthrough=()),
            destination("d", [("d.test", 4)], exclude="replicate"),
            topics=("orders", "trades"),
        ),
    }  # fmt: skip
    async with fabric_of(tmp_path, configs) as (_fabric, _clock, h):
        broker = h["a"].broker
        warned = {
            e["destination"]: e["detail"]
            for e in broker.events.recent()
            if e["event"] == "destination_drops"
        }
        assert set(warned) == {"b", "c"}
        assert warned["b"] == "'b' does not get: recorded topics no topic block takes: 'trades'"
        assert "empty PassThrough" in warned["c"]
        info = {d["name"]: d["drops"] for d in broker.replication.info()["destinations"]}
        assert info["b"]["topics"] == ["trades"] and info["b"]["groups"] is None
        assert info["c"]["topics"] == [] and info["c"]["groups"] == []
        assert info["d"]["summary"] == []


# -- the route trace ----------------------------------------------------------------------


def _fabric(**instances: tuple[str, list[str]]) -> dict[str, Summary]:
    """name -> (recorded topics, destinations), each instance in its own group."""
    return {name: _summary(txlog, *dests, name=name) for name, (txlog, dests) in instances.items()}


def _to(name: str, *blocks: str, sync: str = "sync", extra: str = "") -> str:
    blocks = blocks or (_block("orders"),)
    return (
        f"<Destination><Name>{name}</Name><SyncType>{sync}</SyncType>{extra}{''.join(blocks)}"
        "<Transport><Type>amps-replication</Type><InetAddr>127.0.0.1:9</InetAddr></Transport>"
        "</Destination>"
    )


def _hops(trace: RouteTrace) -> list[list[tuple[str, str, str | None]]]:
    return [
        [(h["source"], h["target"], h["sync_type"]) for h in r["hops"]] for r in trace["routes"]
    ]


def test_a_chain_with_the_default_passthrough_reaches_the_end() -> None:
    fabric = _fabric(a=("orders", [_to("b")]), b=("orders", [_to("c", sync="async")]),
                     c=("orders", []))  # fmt: skip
    trace = route_trace(fabric, "a", "orders")
    assert trace["recorded"] and not trace["truncated"] and trace["unknown"] == []
    assert _hops(trace) == [[("a", "b", "sync")], [("a", "b", "sync"), ("b", "c", "async")]]
    assert [(r["instance"], r["hops"], r["sync_path"]) for r in trace["reached"]] == [
        ("b", 1, True), ("c", 2, False),
    ]  # fmt: skip
    assert trace["not_reached"] == []


def test_a_chain_without_passthrough_stops_and_says_why() -> None:
    fabric = _fabric(a=("orders", [_to("b")]), b=("orders", [_to("c", extra="<PassThrough/>")]),
                     c=("orders", []))  # fmt: skip
    trace = route_trace(fabric, "a", "orders")
    assert [r["instance"] for r in trace["reached"]] == ["b"]
    (stopped,) = trace["not_reached"]
    assert (stopped["source"], stopped["target"]) == ("b", "c")
    assert "empty PassThrough" in stopped["reason"]
    # b's own publishes still go to c
    assert [r["instance"] for r in route_trace(fabric, "b", "orders")["reached"]] == ["c"]
    # a PassThrough naming another group: the reason names a's group and the patterns
    fabric["b"] = _summary("orders", _to("c", extra="<PassThrough>^x$</PassThrough>"), name="b")
    (stopped,) = route_trace(fabric, "a", "orders")["not_reached"]
    assert "does not pass group 'a' through (PassThrough '^x$')" in stopped["reason"]


def test_topics_filters_loops_and_unknown_instances() -> None:
    fabric = _fabric(
        a=("orders trades", [_to("b", _block("orders", "/qty &gt; 0")), _to("x")]),
        b=("orders trades", [_to("a"), _to("c")]),
        c=("trades", []),
    )
    trace = route_trace(fabric, "a", "orders")
    reached = {r["instance"]: r for r in trace["reached"]}
    assert set(reached) == {"b", "c", "x"}
    # every route to b and c crosses a's filtered block: only matching messages get there
    assert reached["b"]["filtered"] and reached["c"]["filtered"] and not reached["x"]["filtered"]
    assert trace["routes"][0]["hops"][0]["filtered"] == "/qty > 0"
    # x's configuration is not known: the trace cannot go on from it
    assert trace["unknown"] == ["x"]
    # b's destination back to a: loop protection (a has it already), not listed as unreached
    assert all(u["target"] != "a" for u in trace["not_reached"])
    # a topic no block of a's destinations takes
    other = route_trace(fabric, "a", "trades")
    assert other["recorded"] and other["reached"] == []
    assert [u["reason"] for u in other["not_reached"]] == [
        "no topic block of a's destination 'b' takes 'trades'",
        "no topic block of a's destination 'x' takes 'trades'",
    ]
    # a topic the origin does not record is replicated nowhere
    nothing = route_trace(fabric, "a", "quotes")
    assert not nothing["recorded"] and nothing["routes"] == [] and nothing["reached"] == []


def test_an_instance_that_does_not_record_a_topic_does_not_pass_it_on() -> None:
    fabric = _fabric(a=("orders", [_to("b")]), b=("trades", [_to("c", _block("^ord"))]),
                     c=("orders", []))  # fmt: skip
    assert [r["instance"] for r in route_trace(fabric, "a", "orders")["reached"]] == ["b"]


def test_a_dense_fabric_lists_at_most_max_routes_shortest_first() -> None:
    names = [f"n{i}" for i in range(8)]
    fabric = _fabric(**{
        n: ("orders", [_to(m) for m in names if m != n]) for n in names
    })  # fmt: skip
    trace = route_trace(fabric, "n0", "orders")
    assert trace["truncated"] and len(trace["routes"]) == MAX_ROUTES
    lengths = [len(r["hops"]) for r in trace["routes"]]
    assert lengths == sorted(lengths) and lengths[:7] == [1] * 7
    assert {r["instance"] for r in trace["reached"]} == set(names) - {"n0"}
    for route in trace["routes"]:  # no instance twice on a route, never back to n0
        stops = ["n0", *(h["target"] for h in route["hops"])]
        assert len(stops) == len(set(stops))


def test_this_instance_s_links_show_their_effective_sync_type_and_state() -> None:
    fabric = _fabric(a=("orders", [_to("b")]), b=("orders", []))
    trace = route_trace(fabric, "a", "orders", sync_types={("a", "b"): "async"},
                        connected={("a", "b"): False}, remote_names={("a", "b"): "b2"})  # fmt: skip
    (hop,) = trace["routes"][0]["hops"]
    assert (hop["target"], hop["sync_type"], hop["connected"]) == ("b2", "async", False)
    assert trace["unknown"] == ["b2"]
