"""Client names across a fabric: a logon asks the linked instances first.

Brokers of one process on a virtual clock, linked both ways by in-memory pipes
(tests/support/fabric.py).
"""

from __future__ import annotations

from pathlib import Path

from tests.support.engine import FakeClient
from tests.support.fabric import A, B, drive, fabric_of, linked, pair, scenario


def _logon(client: FakeClient, name: str) -> None:
    client.send(({"c": "logon", "cid": "L", "client_name": name, "a": "processed"}, b""))


def _answer(client: FakeClient) -> dict[str, object] | None:
    return next((h for h, _ in client.received() if h.get("cid") == "L"), None)


@scenario
async def test_a_name_logged_on_elsewhere_is_refused_until_it_is_gone(tmp_path: Path) -> None:
    async with fabric_of(tmp_path, pair(tmp_path)) as (_fabric, clock, h):
        a, b = h["a"], h["b"]
        rb = b.broker.replication
        await linked(clock, h)
        first = await a.logon("pub")
        assert not first.closed
        second = b.connect()
        _logon(second, "pub")
        await b.until(lambda: _answer(second) is not None)
        ack = _answer(second)
        assert ack is not None and ack["status"] == "failure"
        assert ack["reason"] == "name in use elsewhere"
        assert "client name 'pub' is logged on at instance 'a'" in str(ack.get("detail"))
        await b.until(lambda: second.closed)
        event = [e for e in b.broker.events.recent() if e["event"] == "name_in_use_elsewhere"]
        assert event and event[-1]["client"] == "pub"
        (conflict,) = rb.info()["conflicts"]
        assert (conflict["kind"], conflict["name"]) == ("client_name", "pub")
        assert not b.broker.operations.alerts()  # refused: nothing was lost
        # the name is free again once the client on a is gone: asked anew, not cached
        first.session.close_soon("bye")
        await a.until(lambda: not a.broker.clients.holds("pub"))
        third = await b.logon("pub")
        assert not third.closed and b.broker.clients.holds("pub")
        # and now a asks b
        fourth = a.connect()
        _logon(fourth, "pub")
        await a.until(lambda: _answer(fourth) is not None)
        assert _answer(fourth)["reason"] == "name in use elsewhere"  # type: ignore[index]


@scenario
async def test_two_logons_of_one_name_at_once_grant_exactly_one(tmp_path: Path) -> None:
    """Both ask at the same (virtual) moment; the claims cross on the links; the tie goes
    to the lower instance Name, and the other is refused."""
    async with fabric_of(tmp_path, pair(tmp_path)) as (_fabric, clock, h):
        a, b = h["a"], h["b"]
        await linked(clock, h)
        on_a, on_b = a.connect(), b.connect()
        _logon(on_a, "twin")
        _logon(on_b, "twin")
        await a.until(lambda: _answer(on_a) is not None and _answer(on_b) is not None)
        assert _answer(on_a)["status"] == "success"  # type: ignore[index]
        refused = _answer(on_b)
        assert refused is not None and refused["reason"] == "name in use elsewhere"
        assert "logging on at instance 'a'" in str(refused.get("detail"))
        assert a.broker.clients.holds("twin") and not b.broker.clients.holds("twin")


@scenario
async def test_a_link_lost_while_asking_does_not_hold_the_logon(tmp_path: Path) -> None:
    """The only linked instance goes away while it is asked: the logon is granted at once
    (nothing to wait for), and the event says with whom it could not be checked."""
    async with fabric_of(tmp_path, pair(tmp_path)) as (fabric, clock, h):
        b = h["b"]
        await linked(clock, h)
        client = b.connect()
        _logon(client, "lonely")
        fabric.cut(A)
        fabric.cut(B)
        await b.until(lambda: _answer(client) is not None)
        assert _answer(client)["status"] == "success"  # type: ignore[index]
        unconfirmed = [e for e in b.broker.events.recent()
                       if e["event"] == "client_name_unconfirmed"]  # fmt: skip
        assert unconfirmed and unconfirmed[-1]["instances"] == "a"


@scenario
async def test_an_instance_that_does_not_answer_is_waited_for_a_bounded_time(
    tmp_path: Path,
) -> None:
    """A linked instance that never answers (its answers are lost here) holds a logon for
    CLAIM_TIMEOUT of the instance's clock, then it is granted with the event."""
    async with fabric_of(tmp_path, pair(tmp_path)) as (_fabric, clock, h):
        b = h["b"]
        rb = b.broker.replication
        await linked(clock, h)
        rb.client_names.answered = lambda *_: None  # type: ignore[method-assign]
        client = b.connect()
        _logon(client, "slow")
        await b.settle()
        assert _answer(client) is None  # waiting
        await drive(clock, lambda: _answer(client) is not None)
        assert _answer(client)["status"] == "success"  # type: ignore[index]
        assert any(e["event"] == "client_name_unconfirmed" for e in b.broker.events.recent())
