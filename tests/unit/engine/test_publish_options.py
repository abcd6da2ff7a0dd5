"""A publish's options (``o``) on the engine (docs/protocol.md "Publish options"): no option
is accepted and ignored. Options that are not publish options fail the publish with
``invalid options``, its own ``s`` and a precise detail; nothing of it is stored or
delivered, and the connection goes on. An empty ``o`` is an ordinary publish. (Delayed
delivery itself: tests/unit/delayed/test_delivery.py.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from tests.support.engine import EngineHarness, FakeClient, scenario
from tests.support.server import sow_topic

Msg = tuple[dict[str, Any], bytes]

DELTA = (
    "delayed delivery is for publish: a delta_publish merges into the record stored when "
    "it arrives, so it cannot wait"
)


def harness(tmp_path: Path) -> EngineHarness:
    """A broker recording every topic, ``orders`` a SOW topic keyed by ``/id``."""
    return EngineHarness(tmp_path, sow=sow_topic("orders", "/id"), journal_size="1MB")


def publish(
    n: int, o: str | None = None, *, c: str = "publish", t: str = "t", **header: Any
) -> Msg:
    """Publish ``n`` (its sequence, and ``cid`` ``pN``) asking for ``processed``."""
    options = {} if o is None else {"o": o}
    return {"c": c, "t": t, "s": n, "cid": f"p{n}", "a": "processed", **options, **header}, (
        b'{"id":%d}' % n
    )


def answers(client: FakeClient) -> dict[str, tuple[str, str | None, str, int | None]]:
    """Per cid, the ``processed`` ack: status, reason, detail and ``s``."""
    return {
        a["cid"]: (a["status"], a.get("reason"), a.get("detail", ""), a.get("s"))
        for a in client.acks("processed")
    }


async def logged(h: EngineHarness) -> list[tuple[str, int, bytes]]:
    """``(topic, publisher sequence, body)`` of every record in the log, in order."""
    await h.commit()
    log = h.broker.txlog
    assert log is not None
    out: list[tuple[str, int, bytes]] = []
    seq = log.first_seq
    while batch := await log.read_batch(seq, max_count=500, upto_seq=log.last_seq):
        out.extend((r.topic, r.pub_seq, r.body) for r in batch)
        seq = batch[-1].seq + 1
    return out


def delivered(client: FakeClient, sub_id: str) -> list[int]:
    return [orjson.loads(body)["id"] for _, body in client.deliveries(sub_id)]


@scenario
async def test_options_that_are_not_publish_options_are_refused(tmp_path: Path) -> None:
    refused = {
        2: ("live", "unknown publish option 'live'"),
        3: ("replace,deliver_after=5s", "unknown publish option 'replace'"),
        4: ("deliver_at", "'deliver_at' is not a flag: give it a value (deliver_at=MOMENT)"),
        5: ("deliver_after=", "'deliver_after=': the value is missing (deliver_after=DURATION)"),
        6: ("deliver_after=0s", "'deliver_after=0s': the value must be greater than zero"),
        7: (
            "deliver_at=2026-11-22",
            "'deliver_at=2026-11-22': expected a moment YYYYmmddTHHMMSS[.ffffff][Z] (UTC)",
        ),
        8: ("deliver_after=1s,deliver_after=2s", "'deliver_after' is given twice"),
        9: (
            "deliver_at=20261122T051752Z,deliver_after=5s",
            "'deliver_at' and 'deliver_after' contradict each other: give one",
        ),
    }
    async with harness(tmp_path) as h:
        sub = await h.logon("sub")
        sub.send(({"c": "subscribe", "t": "t", "sub_id": "s"}, b""))
        pub = await h.logon("pub")
        pub.send(publish(1))
        pub.send(*(publish(n, o) for n, (o, _) in refused.items()))
        pub.send(publish(10))
        await h.settle()
        got = answers(pub)
        for n, (_, detail) in refused.items():
            assert got[f"p{n}"] == ("failure", "invalid options", detail, n)
        # the connection goes on: the publishes around the refused ones are taken
        assert got["p1"][:2] == got["p10"][:2] == ("success", None)
        assert not pub.closed
        assert delivered(sub, "s") == [1, 10]
        assert [(t, s) for t, s, _ in await logged(h)] == [("t", 1), ("t", 10)]


@scenario
async def test_an_empty_or_absent_o_is_an_ordinary_publish(tmp_path: Path) -> None:
    async with harness(tmp_path) as h:
        sub = await h.logon("sub")
        sub.send(({"c": "subscribe", "t": "t", "sub_id": "s"}, b""))
        pub = await h.logon("pub")
        null = ({**publish(3)[0], "o": None}, publish(3)[1])  # "o": null is no "o"
        pub.send(publish(1, ""), publish(2, " , ,"), null, publish(4))
        await h.settle()
        assert {cid: a[:2] for cid, a in answers(pub).items()} == {
            f"p{n}": ("success", None) for n in (1, 2, 3, 4)
        }
        assert delivered(sub, "s") == [1, 2, 3, 4]
        assert [s for _, s, _ in await logged(h)] == [1, 2, 3, 4]


@scenario
async def test_a_refusal_is_always_answered_in_its_place_in_the_frame(tmp_path: Path) -> None:
    """Without ``a`` the failure ack is sent all the same (with ``s``, no ``cid``); with
    ``received`` that ack comes first. The plain runs before and after the refused
    publish in one frame are stored and delivered in order; a delayed one among them is
    stored in its place and not delivered now."""
    async with harness(tmp_path) as h:
        sub = await h.logon("sub")
        sub.send(({"c": "subscribe", "t": "t", "sub_id": "s"}, b""))
        pub = await h.logon("pub")
        plain = [({"c": "publish", "t": "t", "s": n}, b'{"id":%d}' % n) for n in range(1, 6)]
        pub.send(
            plain[0],
            plain[1],
            ({"c": "publish", "t": "t", "s": 3, "o": "deliver_after=1m"}, b'{"id":3}'),
            ({"c": "publish", "t": "t", "s": 6, "cid": "r", "a": "received", "o": "x"}, b"{}"),
            plain[3],
            plain[4],
        )
        await h.settle()
        acks = [(a["a"], a.get("cid"), a["status"], a.get("s")) for a in pub.acks()]
        assert acks == [
            ("received", "r", "success", None),
            ("processed", "r", "failure", 6),
        ]
        assert pub.acks()[1]["detail"] == "unknown publish option 'x'"
        assert delivered(sub, "s") == [1, 2, 4, 5]
        assert [s for _, s, _ in await logged(h)] == [1, 2, 3, 4, 5]


@scenario
async def test_a_delta_publish_reads_its_options_as_a_publish_does(tmp_path: Path) -> None:
    async with harness(tmp_path) as h:
        pub = await h.logon("pub")
        pub.send(publish(1, t="orders"))
        pub.send(
            publish(2, "deliver_after=5s", c="delta_publish", t="orders"),
            publish(3, "timestamp", c="delta_publish", t="orders"),
            # the options are read first, before the topic
            publish(4, "bogus", c="delta_publish", t="t"),
            publish(5, "", c="delta_publish", t="orders"),
        )
        await h.settle()
        assert answers(pub) == {
            "p1": ("success", None, "", None),
            "p2": ("failure", "invalid options", DELTA, 2),
            "p3": ("failure", "invalid options", "unknown publish option 'timestamp'", 3),
            "p4": ("failure", "invalid options", "unknown publish option 'bogus'", 4),
            "p5": ("success", None, "", None),
        }
        store = h.broker.sow.topics.store("orders")
        assert store is not None and sorted(store.keys()) == ["1", "5"]
        assert [(t, s) for t, s, _ in await logged(h)] == [("orders", 1), ("orders", 5)]
