"""What a destination does not get (server/replication/topology.py), from real
configurations."""

from __future__ import annotations

from pathlib import Path

from server.config import parse_config
from server.replication.topology import drops_of, passes_every_group
from server.replication.validation import parse_summary, summarize
from tests.support.fabric import B, C, fabric_of, scenario, xml
from tests.support.replication import destination


def _summary(txlog: str, *dests: str, name: str = "a") -> object:
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
    (dest,) = summary.destinations  # type: ignore[attr-defined]
    drops = drops_of(summary, dest)  # type: ignore[arg-type]
    assert not drops.anything and drops.sentences() == []
    assert drops.info() == {"topics": [], "filtered": [], "groups": None, "summary": []}


def test_uncovered_topics_filters_and_passthrough_are_each_said() -> None:
    summary = _summary(
        "orders trades ^md",
        _dest("b", _block("orders", "/qty &gt; 0"), extra="<PassThrough>^nyc</PassThrough>"),
        _dest("c", _block("^md"), _block("trades"), extra="<PassThrough/>"),
    )
    b, c = summary.destinations  # type: ignore[attr-defined]
    info_b = drops_of(summary, b).info()  # type: ignore[arg-type]
    assert info_b["topics"] == ["trades", "^md"]
    assert info_b["filtered"] == [{"topic": "orders", "filter": "/qty > 0"}]
    assert info_b["groups"] == ["^nyc"]
    assert info_b["summary"] == [
        "recorded topics no topic block takes: 'trades', '^md'",
        "'orders' only where /qty > 0",
        "messages that arrived by replication only from groups matching '^nyc'",
    ]
    info_c = drops_of(summary, c).info()  # type: ignore[arg-type]
    assert info_c["topics"] == ["orders"] and info_c["groups"] == []
    assert "empty PassThrough" in info_c["summary"][-1]


def test_a_pattern_block_covers_the_topics_it_matches_but_not_another_pattern() -> None:
    summary = _summary("orders.us orders.eu ^orders", _dest("b", _block("^orders\\.")))
    (dest,) = summary.destinations  # type: ignore[attr-defined]
    # the block's pattern matches both names; a different pattern may take other topics
    assert drops_of(summary, dest).info()["topics"] == ["^orders"]  # type: ignore[arg-type]


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
