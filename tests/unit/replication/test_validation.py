"""Validation: each check fails on a mismatched pair with its message and exact fix, and
passes when the block excludes it (``queue`` and ``queue_underlying`` cannot be)."""

from __future__ import annotations

from pathlib import Path

import pytest

from spool.server.config import Config, DestinationConfig, parse_config
from spool.server.replication.errors import ReplicationProtocolError
from spool.server.replication.validation import parse_summary, summarize, validate


def _config(name: str, txlog: str, destinations: str, sow: str = "") -> Config:
    topics = "".join(f"<Topic><Name>{t}</Name></Topic>" for t in txlog.split())
    repl = f"<Replication>{destinations}</Replication>" if destinations else ""
    sow = f"<SOW>{sow}</SOW>" if sow else ""
    return parse_config(
        f"<SpoolConfig><Name>{name}</Name><TransactionLog>{topics}</TransactionLog>{repl}"
        f"{sow}</SpoolConfig>",
        base_dir=Path("/tmp"),
        env={},
    )


def _dest(to: str, *blocks: str, sync: str = "sync", extra: str = "") -> str:
    topics = "".join(blocks) or "<Topic><Name>orders</Name></Topic>"
    return (
        f"<Destination><Name>{to}</Name><SyncType>{sync}</SyncType>{extra}{topics}"
        "<Transport><Type>amps-replication</Type><InetAddr>127.0.0.1:9</InetAddr></Transport>"
        "</Destination>"
    )


def _block(topic: str = "orders", *, flt: str = "", exclude: str = "") -> str:
    f = f"<Filter>{flt}</Filter>" if flt else ""
    e = f"<ExcludeValidation>{exclude}</ExcludeValidation>" if exclude else ""
    return f"<Topic><Name>{topic}</Name>{f}{e}</Topic>"


def _only(cfg: Config) -> DestinationConfig:
    assert cfg.replication is not None
    (dest,) = cfg.replication.destinations
    return dest


def _run(a: Config, b: Config) -> list[str]:
    return [f.detail for f in validate(summarize(a), summarize(b), _only(a))]


def test_a_symmetric_pair_passes() -> None:
    a = _config("a", "orders ^md", _dest("b", _block("orders", flt="/qty &gt; 0"), _block("^md")))
    b = _config("b", "orders ^md", _dest("a", _block("orders", flt="/qty &gt; 0"), _block("^md")))
    assert _run(a, b) == []
    assert _run(b, a) == []


def test_txlog_fails_with_its_fix_and_passes_when_excluded() -> None:
    a = _config("a", "orders", _dest("b", _block(exclude="replicate")))
    b = _config("b", "trades", _dest("a", _block("trades")))
    (detail,) = _run(a, b)
    assert detail.startswith("[txlog] 'orders': 'b' does not record it")
    assert "add <Topic><Name>orders</Name><MessageType>json</MessageType></Topic> to " in detail
    a2 = _config("a", "orders", _dest("b", _block(exclude="replicate,txlog")))
    assert _run(a2, b) == []


def test_a_pattern_that_takes_everything_covers_a_block() -> None:
    a = _config("a", "orders", _dest("b", _block(exclude="replicate")))
    b = _config("b", ".*", "")
    assert _run(a, b) == []
    # ...but a topic name does not cover a pattern
    a2 = _config("a", "^md", _dest("b", _block("^md", exclude="replicate")))
    b2 = _config("b", "md.ibm", "")
    (detail,) = _run(a2, b2)
    assert detail.startswith("[txlog] '^md'")


def test_replicate_fails_with_its_fix_and_passes_when_excluded() -> None:
    a = _config("a", "orders", _dest("b"))
    b = _config("b", "orders", _dest("c"))  # b replicates orders, but not back to a
    (detail,) = _run(a, b)
    assert detail.startswith("[replicate] 'orders': 'b' does not replicate it back to 'a'")
    assert "a <Replication><Destination> named 'a' (Group 'a')" in detail
    a2 = _config("a", "orders", _dest("b", _block(exclude="replicate")))
    assert _run(a2, b) == []


def test_replicate_filter_fails_with_its_fix_and_passes_when_excluded() -> None:
    a = _config("a", "orders", _dest("b", _block(flt="/qty &gt; 0")))
    b = _config("b", "orders", _dest("a", _block(flt="/qty &gt; 5")))
    (detail,) = _run(a, b)
    assert detail.startswith("[replicate_filter] 'orders': 'b' replicates it back with Filter")
    assert "set the Filter of 'b''s Destination 'a' Topic 'orders' to '/qty > 0'" in detail
    a2 = _config("a", "orders", _dest("b", _block(flt="/qty &gt; 0", exclude="replicate_filter")))
    assert _run(a2, b) == []


def test_cascade_fails_with_its_fix_and_passes_when_excluded() -> None:
    a = _config("a", "orders", _dest("b"))
    b = _config("b", "orders", _dest("a") + _dest("c", _block(exclude="txlog")))
    (detail,) = _run(a, b)
    assert detail.startswith(
        "[cascade] 'orders': 'b' replicates it to 'c' without the check(s) txlog"
    )
    assert "remove txlog from the ExcludeValidation of 'b''s Destination 'c'" in detail
    a2 = _config("a", "orders", _dest("b", _block(exclude="cascade")))
    assert _run(a2, b) == []


def _with(summary: dict[str, object], **extra: object) -> dict[str, object]:
    return {**summary, **extra}


def _sow(topic: str, *keys: str, extra: str = "") -> str:
    k = "".join(f"<Key>{key}</Key>" for key in keys)
    return f"<Topic><Name>{topic}</Name><MessageType>json</MessageType>{k}{extra}</Topic>"


def test_the_summary_lists_the_sow_topics_with_their_keys_in_order() -> None:
    a = _config("a", "orders", _dest("b"), _sow("orders", "/region", "/id") + _sow("^md"))
    assert summarize(a)["sow"] == [
        {"topic": ["orders", False], "keys": ["/region", "/id"]},
        {"topic": ["^md", True], "keys": []},
    ]
    assert parse_summary(summarize(a)).sow[0].keys == ("/region", "/id")


def test_sow_fails_on_either_side_with_its_fix_and_passes_when_excluded() -> None:
    a = _config("a", "orders", _dest("b"), _sow("orders", "/id"))
    b = _config("b", "orders", _dest("a"))
    (detail,) = _run(a, b)
    assert detail == (
        "[sow] 'orders': it is a SOW topic on 'a' but not on 'b'; fix: add <SOW><Topic><Name>"
        "orders</Name><MessageType>json</MessageType><Key>/id</Key></Topic></SOW> to 'b', or "
        "remove it from the <SOW> of 'a'"
    )
    # the other way round: b keeps it, a does not
    (detail,) = _run(b, a)
    assert detail.startswith("[sow] 'orders': it is a SOW topic on 'a' but not on 'b'")
    assert "add <SOW><Topic><Name>orders</Name>" in detail and "to 'b'" in detail
    # a SOW pattern of the peer that covers the topic is enough; durability may differ
    b2 = _config(
        "b", "orders", _dest("a"), _sow("^ord", "/id", extra="<Durability>transient</Durability>")
    )
    assert _run(a, b2) == []
    excluded = _config("a", "orders", _dest("b", _block(exclude="sow")), _sow("orders", "/id"))
    assert _run(excluded, b) == []


def test_a_block_pattern_takes_in_the_sow_topics_it_replicates() -> None:
    """A block ``.*`` replicates the SOW topic ``orders``: b must keep it too."""
    a = _config("a", ".*", _dest("b", _block(".*")), _sow("orders", "/id"))
    b = _config("b", ".*", _dest("a", _block(".*")))
    (detail,) = _run(a, b)
    assert detail.startswith("[sow] 'orders': it is a SOW topic on 'a' but not on 'b'")
    # a block of another topic does not care
    a2 = _config("a", "trades", _dest("b", _block("trades")), _sow("orders", "/id"))
    b2 = _config("b", "trades", _dest("a", _block("trades")))
    assert _run(a2, b2) == []


def test_keys_fail_with_the_exact_keys_and_pass_when_excluded() -> None:
    a = _config("a", "orders", _dest("b"), _sow("orders", "/region", "/id"))
    b = _config("b", "orders", _dest("a"), _sow("orders", "/id", "/region"))
    (detail,) = _run(a, b)
    assert detail == (
        "[keys] 'orders': its SOW keys differ (['/region', '/id'] on 'a', ['/id', '/region'] "
        "on 'b'); fix: give the <SOW><Topic> 'orders' of 'b' the keys "
        "<Key>/region</Key><Key>/id</Key>, in this order"
    )
    no_keys = _config("b", "orders", _dest("a"), _sow("orders"))
    (failure,) = validate(summarize(a), summarize(no_keys), _only(a))
    assert failure.check == "keys"
    (failure,) = validate(summarize(no_keys), summarize(a), _only(no_keys))
    assert "no <Key> (remove them)" in failure.fix
    excluded = _config(
        "a", "orders", _dest("b", _block(exclude="keys")), _sow("orders", "/region", "/id")
    )
    assert _run(excluded, b) == []
    same = _config("b", "orders", _dest("a"), _sow("orders", "/region", "/id"))
    assert _run(a, same) == []


def test_queue_checks_cannot_be_excluded() -> None:
    a = _config(
        "a", "orders orders-in", _dest("b", _block(exclude="sow,txlog"),
                                       _block("orders-in", exclude="replicate,txlog"))
    )  # fmt: skip
    b = _config("b", "orders", _dest("a", extra="<PassThrough>^a$</PassThrough>"))
    sa, sb = summarize(a), summarize(b)
    queue = [{"topic": ["orders", False], "underlying": "orders-in"}]
    (failure,) = validate(_with(sa, queues=queue), sb, _only(a))
    assert failure.check == "queue" and "it is a queue on 'a' but not on 'b'" in failure.detail
    other = [{"topic": ["orders", False], "underlying": "elsewhere"}]
    failures = validate(_with(sa, queues=queue), _with(sb, queues=other), _only(a))
    assert {f.check for f in failures} == {"queue_underlying"}
    assert "set 'b''s queue UnderlyingTopic to 'orders-in'" in failures[0].fix
    # without passthrough of a's group, b would not pass a's queue messages on
    b2 = _config("b", "orders", _dest("a", extra="<PassThrough/>"))
    failures = validate(_with(sa, queues=queue), _with(summarize(b2), queues=queue), _only(a))
    assert [f.check for f in failures] == ["queue_passthrough"]
    assert "<PassThrough>a</PassThrough>" in failures[0].fix
    # an exclusion of the queue checks (refused by the configuration) changes nothing here
    excluded = _config("a", "orders", _dest("b", _block(exclude="sow")))
    dest = _only(excluded)
    forced = DestinationConfig(
        dest.name, dest.group, dest.sync,
        (type(dest.topics[0])("orders", exclude_validation=frozenset({"queue"})),),
        dest.passthrough, dest.transport,
    )  # fmt: skip
    (failure,) = validate(_with(summarize(excluded), queues=queue), sb, forced)
    assert failure.check == "queue"


def _queue(kind: str, name: str, under: str, extra: str = "") -> str:
    return f"<{kind}><Name>{name}</Name><UnderlyingTopic>{under}</UnderlyingTopic>{extra}</{kind}>"


def _pair_dest(to: str, *topics: str) -> str:
    return _dest(to, *(_block(t) for t in topics), extra="<PassThrough>.*</PassThrough>")


def test_queue_definitions_from_the_configurations_are_compared() -> None:
    """Real configurations (the summary lists each queue): a block that carries a
    queue's name needs the same queue on the other side, of the same kind, over the same
    underlying topic, and the underlying topic replicated too."""
    dest_a, dest_b = _pair_dest("b", "work-in", "work"), _pair_dest("a", "work-in", "work")
    q = _queue("Queue", "work", "work-in")
    a = _config("a", "work-in work", dest_a, q)
    assert _run(a, _config("b", "work-in work", dest_b, q)) == []
    missing = _config("b", "work-in work", dest_b)
    (failure,) = validate(summarize(a), summarize(missing), _only(a))
    assert failure.check == "queue" and "it is a queue on 'a' but not on 'b'" in failure.detail
    assert "define the same queue on 'b'" in failure.fix and "<Queue><Name>work" in failure.fix
    local = [{"topic": ["work", False], "underlying": "work-in", "kind": "LocalQueue"}]
    failure = validate(summarize(a), _with(summarize(missing), queues=local), _only(a))[0]
    assert failure.check == "queue" and "a Queue on 'a' and a LocalQueue on 'b'" in failure.detail
    other = _config("b", "work-in work other", dest_b, _queue("Queue", "work", "other"))
    failures = validate(summarize(a), summarize(other), _only(a))
    assert [f.check for f in failures] == ["queue_underlying", "queue_underlying"]
    assert "set 'b''s queue UnderlyingTopic to 'work-in'" in failures[0].fix
    # a queue the other side has and this side not fails the same way
    failure = validate(summarize(missing), summarize(a), _only(missing))[0]
    assert failure.check == "queue" and "'work' takes it on 'a' but not on 'b'" in failure.detail


def test_a_queue_filter_and_initial_owner_must_match() -> None:
    dest_a, dest_b = _pair_dest("b", "work-in", "work"), _pair_dest("a", "work-in", "work")
    jobs = _queue("Queue", "work", "work-in", "<Filter>/kind = 'job'</Filter>")
    a = _config("a", "work-in work", dest_a, jobs)
    (failure, *_) = validate(
        summarize(a),
        summarize(_config("b", "work-in work", dest_b,
                          _queue("Queue", "work", "work-in", "<Filter>/kind = 'any'</Filter>"))),
        _only(a),
    )  # fmt: skip
    assert failure.check == "queue"
    assert "queue 'work' has Filter \"/kind = 'job'\" on 'a' and \"/kind = 'any'\" on 'b'" in (
        failure.detail
    )
    assert "the same <Filter> on both instances (/kind = 'job')" in failure.fix
    no_filter = _config("b", "work-in work", dest_b, _queue("Queue", "work", "work-in"))
    assert validate(summarize(a), summarize(no_filter), _only(a))[0].check == "queue"
    grp = "<InitialOwner>a</InitialOwner>"
    ga = _config("a", "work-in work", dest_a, _queue("GroupLocalQueue", "work", "work-in", grp))
    gb = _config("b", "work-in work", dest_b, _queue("GroupLocalQueue", "work", "work-in",
                                                     "<InitialOwner>b</InitialOwner>"))  # fmt: skip
    (failure, *_) = validate(summarize(ga), summarize(gb), _only(ga))
    assert "InitialOwner 'a' on 'a' and 'b' on 'b'" in failure.detail
    same = _config("b", "work-in work", dest_b, _queue("GroupLocalQueue", "work", "work-in", grp))
    assert validate(summarize(ga), summarize(same), _only(ga)) == []


def test_a_queue_needs_its_underlying_topic_replicated_with_it() -> None:
    q = _queue("Queue", "work", "work-in")
    a = _config("a", "work-in work", _pair_dest("b", "work"), q)
    b = _config("b", "work-in work", _pair_dest("a", "work", "work-in"), q)
    (failure,) = validate(summarize(a), summarize(b), _only(a))
    assert failure.check == "queue"
    assert "its underlying topic 'work-in' is not" in failure.detail
    assert "<Topic><Name>work-in</Name>" in failure.fix


def test_a_queue_dead_letter_topic_must_match_and_be_replicated_with_it() -> None:
    dead = "<DeadLetter><Topic>work-dead</Topic></DeadLetter>"
    q = _queue("Queue", "work", "work-in", dead)
    logged = "work-in work work-dead"
    a = _config("a", logged, _pair_dest("b", "work-in", "work", "work-dead"), q)
    b = _config("b", logged, _pair_dest("a", "work-in", "work", "work-dead"), q)
    assert validate(summarize(a), summarize(b), _only(a)) == []
    other = _queue("Queue", "work", "work-in", "<DeadLetter><Topic>work-x</Topic></DeadLetter>")
    b_other = _config("b", logged + " work-x", _pair_dest("a", "work-in", "work"), other)
    (failure, *_) = validate(summarize(a), summarize(b_other), _only(a))
    assert failure.check == "queue"
    assert "dead-letter topic 'work-dead' on 'a' and 'work-x' on 'b'" in failure.detail
    assert "the same <DeadLetter><Topic> on both instances (work-dead)" in failure.fix
    none = _config("b", logged, _pair_dest("a", "work-in", "work"), _queue("Queue", "work",
                                                                        "work-in"))  # fmt: skip
    assert "on 'b'" in validate(summarize(a), summarize(none), _only(a))[0].detail
    not_sent = _config("a", logged, _pair_dest("b", "work-in", "work"), q)
    (failure,) = validate(summarize(not_sent), summarize(b), _only(not_sent))
    assert failure.check == "queue"
    assert "its dead-letter topic 'work-dead' is not" in failure.detail
    assert "<Topic><Name>work-dead</Name>" in failure.fix
    # a summary without the member (an instance that has no dead letters) reads as none
    older = summarize(none)
    for entry in older["queues"]:  # type: ignore[attr-defined]
        del entry["dead_letter"]
    assert parse_summary(older).queues[0].dead_letter is None


def test_an_archive_copy_takes_the_underlying_topic_without_the_queue() -> None:
    """A destination that takes only the underlying topic needs no queue; one that
    defines the queue must get its events (its name) too."""
    q = _queue("Queue", "work", "work-in")
    a = _config("a", "work-in", _dest("archive", _block("work-in", exclude="replicate")), q)
    archive = _config("archive", "work-in", "")
    assert validate(summarize(a), summarize(archive), _only(a)) == []
    hosting = _config("archive", "work-in work", "", q)
    (failure,) = validate(summarize(a), summarize(hosting), _only(a))
    assert failure.check == "queue"
    assert "'archive' defines queue 'work' over it" in failure.detail
    assert "<Topic><Name>work</Name></Topic>" in failure.fix


def test_replicating_a_local_queue_is_an_error() -> None:
    """(The configuration refuses such a block at load; a peer's summary is checked the
    same way.)"""
    q = _queue("Queue", "work", "work-in")
    a = _config("a", "work-in work", _pair_dest("b", "work-in", "work"), q)
    b = _config("b", "work-in work", _pair_dest("a", "work-in", "work"), q)
    local = [{"topic": ["work", False], "underlying": "work-in", "kind": "LocalQueue"}]
    (failure,) = validate(_with(summarize(a), queues=local), _with(summarize(b), queues=local),
                          _only(a))  # fmt: skip
    assert failure.check == "queue" and "is a LocalQueue on 'a'" in failure.detail
    assert "take 'work' out of this destination's topics" in failure.fix
    # its underlying topic alone, or a pattern that happens to match its name: allowed
    lq = _queue("LocalQueue", "work", "work-in")
    a2 = _config("a", "work-in work", _pair_dest("b", "work-in"), lq)
    b2 = _config("b", "work-in work", _pair_dest("a", "work-in"), lq)
    assert validate(summarize(a2), summarize(b2), _only(a2)) == []
    everything = _config("a", ".*", _dest("b", "<Topic><Name>.*</Name></Topic>",
                                          extra="<PassThrough>.*</PassThrough>"), lq)  # fmt: skip
    b_all = _config("b", ".*", _dest("a", "<Topic><Name>.*</Name></Topic>",
                                     extra="<PassThrough>.*</PassThrough>"), lq)  # fmt: skip
    assert validate(summarize(everything), summarize(b_all), _only(everything)) == []


def test_a_malformed_peer_summary_is_a_protocol_error() -> None:
    with pytest.raises(ReplicationProtocolError, match="name and group"):
        parse_summary({"txlog": []})
    with pytest.raises(ReplicationProtocolError, match=r"\[name, is_regex\]"):
        parse_summary({"name": "b", "group": "b", "txlog": [["orders"]]})
