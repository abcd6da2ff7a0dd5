"""``GET /api/delayed`` and ``GET /api/delayed/messages`` (docs/admin-api.md) through the
application's HTTP stack (create_app, its auth middleware and routes, over httpx's ASGI
transport) on a broker in this process on a virtual clock: the counts before and after
messages fall due, the page cursor, what a user not entitled to a topic sees, the 400 of
a bad cursor and the 404 without a transaction log."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from spool.server.bookmarks import format_time_bookmark
from spool.server.stats.timeparse import format_time
from spool.web.app import create_app
from tests.support.engine import EngineHarness, FakeClient, scenario
from tests.support.roster import bearer

FEED = "feed-token-0123456789"
OPS = "ops-token-0123456789"  # admin, entitled to every topic
AUDITOR = "auditor-token-0123456789"  # admin, entitled to orders only
VIEWER = "viewer-token-0123456789"  # entitled to every topic, not an admin
USERS = (
    f"<User><Name>feed</Name><Token>{FEED}</Token><Read>.*</Read><Write>.*</Write></User>"
    f"<User><Name>ops</Name><Token>{OPS}</Token><Admin>true</Admin><Read>.*</Read></User>"
    f"<User><Name>auditor</Name><Token>{AUDITOR}</Token><Admin>true</Admin>"
    "<Read>^orders$</Read></User>"
    f"<User><Name>viewer</Name><Token>{VIEWER}</Token><Read>.*</Read></User>"
)
NOT_CONFIGURED = "delayed delivery needs a transaction log on this instance"


def rest(h: EngineHarness) -> httpx.AsyncClient:
    """An HTTP client of the harness's broker (its app is not started again: the harness
    runs the broker)."""
    app = create_app(h.config, clock=h.clock, console_log=False, broker=h.broker)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://spool")


async def get(http: httpx.AsyncClient, path: str, token: str = OPS) -> Any:
    r = await http.get(path, headers=bearer(token))
    assert r.status_code == 200, r.text
    return r.json()


async def scrape(http: httpx.AsyncClient) -> tuple[float, float]:
    """``spool_delayed_pending`` and ``spool_delayed_delivered_total`` of ``/metrics``."""
    r = await http.get("/metrics", headers=bearer(OPS))
    assert r.status_code == 200, r.text
    got = {s.name: s.value for f in text_string_to_metric_families(r.text) for s in f.samples}
    return got["spool_delayed_pending"], got["spool_delayed_delivered_total"]


def format_iso(us: int) -> str:
    return format_time(us / 1e6)


def now_us(h: EngineHarness) -> int:
    return int(h.clock.time() * 1_000_000)


async def publish(h: EngineHarness, pub: FakeClient, *messages: tuple[str, int, str]) -> None:
    """Publish ``(topic, n, options)`` each, and wait for their processed acks."""
    before = len(pub.acks("processed"))
    pub.send(*(
        ({"c": "publish", "t": t, "s": n, "cid": f"p{n}", "a": "processed", "o": o},
         b'{"n":%d}' % n)
        for t, n, o in messages
    ))  # fmt: skip
    await h.settle()
    acks = pub.acks("processed")[before:]
    assert [a["status"] for a in acks] == ["success"] * len(messages), acks


@scenario
async def test_the_counts_follow_the_messages_until_they_fall_due(tmp_path: Path) -> None:
    async with EngineHarness(tmp_path, users=USERS) as h, rest(h) as http:
        assert await get(http, "/api/delayed") == {
            "pending": 0, "next_due": None, "next_due_us": None, "delivered": 0,
            "waiting": False, "topics": [],
        }  # fmt: skip
        pub = await h.logon("pub", user_id="feed", pw=FEED)
        start = now_us(h)
        await publish(
            h, pub,
            ("orders", 1, "deliver_after=30s"), ("orders", 2, "deliver_after=10s"),
            ("secret", 3, "deliver_after=20s"), ("orders", 4, ""),
        )  # fmt: skip
        info = await get(http, "/api/delayed")
        assert info["pending"] == 3 and info["delivered"] == 0 and not info["waiting"]
        assert info["next_due_us"] == start + 10_000_000
        assert info["next_due"] == format_iso(start + 10_000_000)
        assert info["topics"] == [
            {"topic": "orders", "pending": 2},
            {"topic": "secret", "pending": 1},
        ]
        # the totals are the instance's; the topics only those the user may read
        mine = await get(http, "/api/delayed", AUDITOR)
        assert mine["pending"] == 3 and mine["topics"] == [{"topic": "orders", "pending": 2}]
        assert await scrape(http) == (3.0, 0.0)
        await h.clock.advance(10.01)
        await h.settle()
        info = await get(http, "/api/delayed")
        assert (info["pending"], info["delivered"]) == (2, 1)
        assert info["next_due_us"] == start + 20_000_000
        assert info["topics"] == [
            {"topic": "orders", "pending": 1},
            {"topic": "secret", "pending": 1},
        ]
        await h.clock.advance(20)
        await h.settle()
        info = await get(http, "/api/delayed")
        assert info == {
            "pending": 0, "next_due": None, "next_due_us": None, "delivered": 3,
            "waiting": False, "topics": [],
        }  # fmt: skip
        assert (await get(http, "/api/delayed/messages")) == {"messages": [], "next_after": None}
        assert await scrape(http) == (0.0, 3.0)


@scenario
async def test_pages_walk_the_messages_in_due_order_with_a_cursor(tmp_path: Path) -> None:
    async with EngineHarness(tmp_path, users=USERS) as h, rest(h) as http:
        pub = await h.logon("pub", user_id="feed", pw=FEED)
        start = now_us(h)
        # published in one order, due in another: message n is due at 100 s - n s, so
        # the due order is 25, 24, ... 1; two more share a due time (then seq order)
        await publish(h, pub, *(
            ("orders" if n % 2 else "secret", n, f"deliver_after={100 - n}s")
            for n in range(1, 26)
        ))  # fmt: skip
        at = format_time_bookmark(start + 200_000_000)
        await publish(
            h, pub, ("orders", 26, f"deliver_at={at}"), ("orders", 27, f"deliver_at={at}")
        )
        seen: list[dict[str, Any]] = []
        after = ""
        pages = 0
        while True:
            page = await get(http, f"/api/delayed/messages?limit=10&after={after}")
            assert len(page["messages"]) <= 10
            seen.extend(page["messages"])
            pages += 1
            if page["next_after"] is None:
                break
            after = page["next_after"]
            assert after == f"{seen[-1]['due_us']}:{seen[-1]['seq']}"
        assert pages == 3 and len(seen) == 27
        dues = [m["due_us"] for m in seen]
        assert (
            dues
            == [start + (100 - n) * 1_000_000 for n in range(25, 0, -1)] + [start + 200_000_000] * 2
        )
        assert [m["due"] for m in seen] == [format_iso(d) for d in dues]
        assert seen[-2]["seq"] < seen[-1]["seq"]
        assert [m["topic"] for m in seen[:3]] == ["orders", "secret", "orders"]
        # the bookmark each was published with: the publisher's, its sequence n
        pub_seqs = [int(m["bookmark"].split("|")[1]) for m in seen]
        assert pub_seqs == [*range(25, 0, -1), 26, 27]
        assert len({m["bookmark"].split("|")[0] for m in seen}) == 1
        # a page of exactly what is left is the last one: no empty page after it
        last = await get(http, f"/api/delayed/messages?limit=7&after={after}")
        assert len(last["messages"]) == 7 and last["next_after"] is None
        # the whole list in one page (the default limit is 100)
        assert (await get(http, "/api/delayed/messages"))["messages"] == seen


@scenario
async def test_only_admins_see_messages_and_only_of_topics_they_may_read(
    tmp_path: Path,
) -> None:
    async with EngineHarness(tmp_path, users=USERS) as h, rest(h) as http:
        pub = await h.logon("pub", user_id="feed", pw=FEED)
        await publish(h, pub, *(
            ("secret" if n <= 4 else "orders", n, f"deliver_after={n}s") for n in range(1, 7)
        ))  # fmt: skip
        r = await http.get("/api/delayed/messages", headers=bearer(VIEWER))
        assert r.status_code == 403 and "not an admin" in r.json()["detail"]
        assert (await http.get("/api/delayed/messages")).status_code == 401
        # the first page holds secret messages only: left out, and the cursor moves on
        page = await get(http, "/api/delayed/messages?limit=3", AUDITOR)
        assert page["messages"] == [] and page["next_after"] is not None
        page = await get(http, f"/api/delayed/messages?limit=3&after={page['next_after']}",
                         AUDITOR)  # fmt: skip
        assert [m["topic"] for m in page["messages"]] == ["orders", "orders"]
        assert "secret" not in str(page)
        assert len((await get(http, "/api/delayed/messages", OPS))["messages"]) == 6
        # a count is no message data: any user reads the summary
        assert (await get(http, "/api/delayed", VIEWER))["pending"] == 6


@scenario
async def test_a_bad_cursor_or_limit_is_a_400(tmp_path: Path) -> None:
    async with EngineHarness(tmp_path, users=USERS) as h, rest(h) as http:
        for bad in ("1", "1:", ":1", "-1:2", "1:-2", "1:2:3", "x:1", "1.5:2", "\uff11:2",
                    f"{1 << 63}:1"):  # fmt: skip
            r = await http.get("/api/delayed/messages", params={"after": bad},
                               headers=bearer(OPS))  # fmt: skip
            assert r.status_code == 400, (bad, r.text)
            assert r.json()["detail"].startswith("after must be DUE_US:SEQ"), r.text
        for bad in ("0", "1001", "x"):
            r = await http.get("/api/delayed/messages", params={"limit": bad},
                               headers=bearer(OPS))  # fmt: skip
            assert r.status_code == 400, (bad, r.text)
        r = await http.get("/api/delayed/messages", params={"after": "0:0", "limit": "1000"},
                           headers=bearer(OPS))  # fmt: skip
        assert r.status_code == 200


@scenario
async def test_without_a_transaction_log_both_answer_404(tmp_path: Path) -> None:
    async with EngineHarness(tmp_path, txlog=False, users=USERS) as h, rest(h) as http:
        assert h.broker.delayed is None
        for path in ("/api/delayed", "/api/delayed/messages"):
            r = await http.get(path, headers=bearer(OPS))
            assert r.status_code == 404, r.text
            assert r.json() == {"error": "not found", "detail": NOT_CONFIGURED}
