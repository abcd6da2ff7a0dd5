"""The dead-letter envelope: what goes in comes back, byte for byte, and nothing else
reads as a dead letter."""

from __future__ import annotations

import orjson
from hypothesis import given
from hypothesis import strategies as st

from spool.server.queues import deadletter
from spool.server.queues.deadletter import DeadLetter, Redrive

_text = st.text(max_size=40)
_count = st.integers(min_value=0, max_value=2**40)
_time_us = st.integers(min_value=0, max_value=4_102_444_800_000_000)  # to 2100

letters = st.builds(
    DeadLetter,
    queue=_text,
    topic=_text,
    bookmark=_text,
    seq=_count,
    instance=_text,
    reason=st.sampled_from(["max_deliveries", "max_cancels", "expired", "rejected"]),
    deliveries=_count,
    cancels=_count,
    consumer=_text,
    enqueued_us=_time_us,
    dead_lettered_us=_time_us,
    detail=_text,
    redriven=st.none() | st.builds(Redrive, topic=_text, bookmark=_text, at_us=_time_us, by=_text),
)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=4),
    max_leaves=12,
)  # fmt: skip


@given(letters, st.binary(max_size=200))
def test_any_body_comes_back_byte_for_byte(letter: DeadLetter, body: bytes) -> None:
    found = deadletter.decode(deadletter.encode(letter, body))
    assert found == (letter, body)


@given(letters, json_values, st.sampled_from(["", " ", "\n  "]))
def test_a_json_body_is_spliced_in_as_the_message_member(
    letter: DeadLetter, value: object, pad: str
) -> None:
    body = pad.encode() + orjson.dumps(value) + pad.encode()
    envelope = deadletter.encode(letter, body)
    doc = orjson.loads(envelope)
    assert doc["message"] == value
    assert doc["dead_letter"]["queue"] == letter.queue
    assert doc["dead_letter"]["reason"] == letter.reason
    assert deadletter.decode(envelope) == (letter, body)


@given(st.binary(max_size=200))
def test_bytes_that_are_not_an_envelope_are_not_a_dead_letter(body: bytes) -> None:
    if body.startswith(deadletter.PREFIX):
        return
    assert deadletter.decode(body) is None


@given(json_values)
def test_an_envelope_with_a_damaged_head_is_not_a_dead_letter(head: object) -> None:
    body = orjson.dumps({"dead_letter": head, "message": 1})
    assert deadletter.decode(body) is None


def test_a_head_that_names_message_itself_still_gives_the_message() -> None:
    """An envelope written elsewhere, whose head holds a ``message`` member of its own:
    the message is its own member, re-encoded."""
    letter = DeadLetter("q", "t", "1|2|", 5, "a", "rejected", 1, 0, "c/1", 0, 0)
    real = orjson.loads(deadletter.encode(letter, b'{"a":1}'))
    real["dead_letter"]["message"] = 7
    envelope = orjson.dumps(real)
    assert deadletter.decode(envelope) == (letter, b'{"a":1}')
