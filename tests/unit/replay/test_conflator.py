"""Conflator as a pure state machine on the replay timeline."""

from __future__ import annotations

import orjson

from spool.server.replay import Conflator
from spool.server.txlog.format.record import Record
from tests.unit.replay.fakes import FakeLog

S = 1_000_000  # µs


def push_all(conflator: Conflator, recs: list[Record]) -> list[Record]:
    out: list[Record] = []
    for rec in recs:
        out.extend(conflator.push(rec))
    return out


def body(**fields: object) -> bytes:
    return orjson.dumps(fields)


def test_last_body_first_bookmark() -> None:
    log = FakeLog()
    a1 = log.append(body=body(id=1, v=1), ts_us=S)
    log.append(body=body(id=1, v=2), ts_us=S + 300_000)
    a3 = log.append(body=body(id=1, v=3), ts_us=S + 900_000)
    nxt = log.append(body=body(id=2, v=9), ts_us=2 * S)  # closes the window at S + 1 s
    c = Conflator(1.0, ["/id"])
    out = push_all(c, log.records)
    assert len(out) == 1
    assert out[0].body == a3.body and out[0].timestamp_us == a3.timestamp_us
    assert (out[0].seq, out[0].pub_hash, out[0].pub_seq) == (a1.seq, a1.pub_hash, a1.pub_seq)
    assert out[0].bookmark == a1.bookmark
    assert c.next_close_us == 3 * S
    assert c.flush() == [nxt]


def test_keys_conflate_separately_and_output_keeps_first_order() -> None:
    log = FakeLog()
    log.append(body=body(id=1, v=1), ts_us=S)
    log.append(body=body(id=2, v=1), ts_us=S + 100)
    log.append(body=body(id=1, v=2), ts_us=S + 200)
    log.append(body=body(id=2, v=2), ts_us=S + 300)
    c = Conflator(1.0, ["/id"])
    assert push_all(c, log.records) == []
    first = c.advance(2 * S)
    assert [(r.seq, orjson.loads(r.body)) for r in first] == [(1, {"id": 1, "v": 2})]
    second = c.advance(3 * S)
    assert [(r.seq, orjson.loads(r.body)) for r in second] == [(2, {"id": 2, "v": 2})]


def test_unkeyed_records_wait_behind_open_windows() -> None:
    log = FakeLog()
    log.append(body=body(id=1), ts_us=S)
    loose = log.append(body=b"not json", ts_us=S + 10)
    log.append(body=body(other=1), ts_us=S + 20)  # no /id: unconflated
    c = Conflator(1.0, ["/id"])
    assert push_all(c, log.records) == []
    assert c.pending == 3
    out = c.advance(2 * S)
    assert [r.seq for r in out] == [1, 2, 3]
    assert out[1] is loose


def test_window_is_per_key_from_its_first_message() -> None:
    log = FakeLog()
    log.append(body=body(id=1, v=1), ts_us=S)
    log.append(body=body(id=1, v=2), ts_us=2 * S)  # exactly at close: a new window
    c = Conflator(1.0, ["/id"])
    out = push_all(c, log.records)
    assert [r.seq for r in out] == [1]
    assert [r.seq for r in c.flush()] == [2]


def test_nested_paths_list_indexes_and_typed_values() -> None:
    log = FakeLog()
    log.append(body=body(a={"b": [5, 1]}), ts_us=S)
    log.append(body=body(a={"b": [6, 1]}), ts_us=S + 1)
    log.append(body=body(a={"b": [7, True]}), ts_us=S + 2)  # true is not 1
    c = Conflator(1.0, ["/a/b/1"])
    push_all(c, log.records)
    out = c.flush()
    assert [r.seq for r in out] == [1, 3]
    assert orjson.loads(out[0].body) == {"a": {"b": [6, 1]}}


def test_without_paths_the_sow_key_is_the_key() -> None:
    log = FakeLog()
    log.append(sow_key="k1", ts_us=S)
    log.append(sow_key="k1", ts_us=S + 1)
    log.append(ts_us=S + 2)  # no SOW key: unconflated
    log.append(topic="other", sow_key="k1", ts_us=S + 3)  # same key, other topic
    c = Conflator(0.5)
    push_all(c, log.records)
    assert [r.seq for r in c.flush()] == [1, 3, 4]


def test_accept_runs_before_conflation() -> None:
    log = FakeLog()
    log.append(body=body(id=1, ok=True), ts_us=S)
    log.append(body=body(id=1, ok=False), ts_us=S + 1)
    c = Conflator(1.0, ["/id"], accept=lambda r: orjson.loads(r.body)["ok"])
    push_all(c, log.records)
    out = c.advance(3 * S)
    assert len(out) == 1 and orjson.loads(out[0].body)["ok"] is True


def test_replay_speed_does_not_matter() -> None:
    """The windows follow record timestamps, not the time the records are pushed."""
    log = FakeLog()
    for i in range(10):
        log.append(body=body(id=1, v=i), ts_us=S + i * 250_000)  # 4 per second
    c = Conflator(1.0, ["/id"])
    out = push_all(c, log.records) + c.flush()
    assert [orjson.loads(r.body)["v"] for r in out] == [3, 7, 9]
    assert [r.seq for r in out] == [1, 5, 9]
