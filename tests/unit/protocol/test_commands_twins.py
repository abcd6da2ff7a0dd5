"""The compiled publish run scanner against its pure-Python oracle: the same run (topic,
sequences, bodies, acks with their kinds and command ids, where it ends) or the same None,
on runs of plain publishes interrupted by every kind of field that ends a run."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from spool.server.protocol import commands
from spool.server.protocol.commands import PublishScan, decode_command, take_publish_run_py
from spool.server.protocol.frame import parse_frame_py
from spool.server.protocol.message import Message
from tests.support.twins import compiled, typed

_c = compiled("spool.server.protocol._commands_c")

# ack strings validated once (as decode_command does for the first publish of a client)
for text in ("persisted", "processed,persisted", "received"):
    decode_command(Message({"c": "publish", "t": "x", "a": text}, b""))

values = st.one_of(
    st.integers(min_value=-3, max_value=2**64),
    st.sampled_from(["persisted", "processed,persisted", "received", "bogus", "", "7"]),
    st.booleans(),
    st.none(),
    st.floats(allow_nan=False),
    st.lists(st.integers(), max_size=2),
)


@st.composite
def headers(draw: st.DrawFn) -> dict[str, Any]:
    h: dict[str, Any] = {}
    if draw(st.integers(0, 9)) > 0:
        h["c"] = "publish"
    else:
        h["c"] = draw(st.sampled_from(["subscribe", "flush", 1]))
    if draw(st.integers(0, 9)) > 0:
        h["t"] = draw(st.sampled_from(["orders", "orders", "trades", "", 5]))
    for key in draw(st.lists(st.sampled_from(["s", "a", "cid", "l", "x", "k", "s"]),
                             max_size=4)):  # fmt: skip
        h[key] = draw(values)
    return h


def _view(scan: PublishScan | None) -> Any:
    if scan is None:
        return None
    assert type(scan) is PublishScan
    return (typed(scan.topic), typed(scan.seqs), scan.bodies, typed(scan.acks), scan.end)


@settings(max_examples=500)
@given(st.lists(headers(), min_size=1, max_size=8), st.data())
def test_take_publish_run_twins_agree(hs: list[dict[str, Any]], data: st.DataObject) -> None:
    msgs = [Message(h, b"body%d" % i) for i, h in enumerate(hs)]
    start = data.draw(st.integers(min_value=0, max_value=len(msgs) - 1))
    got = _c.take_publish_run(msgs, start, commands._ACK_CACHE, PublishScan)
    assert _view(got) == _view(take_publish_run_py(msgs, start))


def test_a_publisher_frame_is_one_run() -> None:
    frame = b"".join(
        b'{"c":"publish","t":"orders","s":%d,"a":"persisted","l":1}x' % i for i in range(1, 101)
    )
    msgs = parse_frame_py(frame).messages
    got = _c.take_publish_run(msgs, 0, commands._ACK_CACHE, PublishScan)
    assert _view(got) == _view(take_publish_run_py(msgs, 0))
    assert got is not None and got.end == 100 and got.seqs == list(range(1, 101))
