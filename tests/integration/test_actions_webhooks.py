"""``spool-action-do-webhook`` in a real `spool serve` process, posting over a real socket to
an HTTP server of this test (a thread on 127.0.0.1) that answers 500, then 200: the post
is retried, arrives once accepted, signed and with its ``Spool-Event-Id`` (the source
message's bookmark and the step); its tally shows over REST; the event log file holds no
secret.
"""

from __future__ import annotations

import hashlib
import hmac
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import orjson
import pytest

from spool.server.client import SyncClient
from tests.support.server import SpoolProcess, config_xml
from tests.support.wait import wait_until

ADMIN_TOKEN = "hooks-admin-token-0123456789"
FEED_TOKEN = "hooks-feed-token-0123456789"
USERS = (
    f"<User><Name>ops</Name><Token>{ADMIN_TOKEN}</Token><Admin>true</Admin></User>"
    f"<User><Name>feed</Name><Token>{FEED_TOKEN}</Token><Read>.*</Read><Write>.*</Write></User>"
)
KEY = "integration-signing-key-0123"
TOKEN = "integration-header-token-4567"
QUERY = "integration-query-token-8901"


@dataclass(frozen=True)
class Post:
    path: str
    headers: dict[str, str]
    body: bytes
    answered: int


class Destination:
    """An HTTP server on a thread: answers each POST from ``answers`` in turn (then 200)
    and keeps what came."""

    def __init__(self, *answers: int) -> None:
        self.answers = list(answers)
        self.posts: list[Post] = []
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with outer.lock:
                    status = outer.answers.pop(0) if outer.answers else 200
                    outer.posts.append(Post(self.path, dict(self.headers.items()), body, status))
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass  # quiet

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Destination:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def wait_for(self, count: int, timeout: float = 30.0) -> list[Post]:
        def arrived() -> list[Post] | None:
            with self.lock:
                return list(self.posts) if len(self.posts) >= count else None

        return wait_until(arrived, timeout=timeout, message=f"{count} posts")


def actions(port: int) -> str:
    return f"""
<Webhooks><Allow>http://127.0.0.1:{port}/hooks/</Allow></Webhooks>
<Action><Name>per-order</Name>
  <On><Module>amps-action-on-publish-message</Module><Options>
    <Topic>^orders/</Topic></Options></On>
  <Do><Module>spool-action-do-webhook</Module><Options>
    <Url>http://127.0.0.1:{port}/hooks/orders?token={QUERY}</Url>
    <Header>Authorization: Bearer {TOKEN}</Header>
    <SigningKey>{KEY}</SigningKey>
    <Body>{{"topic":"{{{{AMPS_TOPIC}}}}","order":{{{{AMPS_DATA}}}}}}</Body>
    <Backoff>100ms</Backoff></Options></Do>
</Action>"""


@pytest.fixture
def destination() -> Iterator[Destination]:
    with Destination(500) as dest:
        yield dest


def test_a_post_answered_500_is_retried_and_arrives_once_signed_with_its_event_id(
    tmp_path_factory: pytest.TempPathFactory, destination: Destination
) -> None:
    workdir = tmp_path_factory.mktemp("webhooks")
    xml = config_xml(workdir / "data", users=USERS, actions=actions(destination.port))
    proc = SpoolProcess(workdir, xml).start()
    try:
        client = SyncClient(proc.ws_url, "feed", user_id="feed", password=FEED_TOKEN)
        client.connect()
        try:
            sub = client.subscribe("orders/1")
            client.publish("orders/1", {"id": 7})
            source = sub.get(10).bookmark
        finally:
            client.close()
        first, second = destination.wait_for(2)
        assert (first.answered, second.answered) == (500, 200)
        assert first.body == second.body == orjson.dumps({"topic": "orders/1", "order": {"id": 7}})
        for post in (first, second):
            assert post.path == f"/hooks/orders?token={QUERY}"
            assert post.headers["Spool-Event-Id"] == f"{source}1"  # a retry: the same event
            assert post.headers["Spool-Action"] == "per-order"
            assert post.headers["Authorization"] == f"Bearer {TOKEN}"
            assert post.headers["Content-Type"] == "application/json"
            expected = hmac.new(KEY.encode(), post.body, hashlib.sha256).hexdigest()
            assert hmac.compare_digest(post.headers["Spool-Signature"], f"sha256={expected}")
        with httpx.Client(base_url=proc.http_url, timeout=30.0) as http:

            def sent() -> dict[str, Any] | None:
                listed = http.get(
                    "/api/actions", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}
                ).json()["actions"]
                (info,) = [a for a in listed if a["name"] == "per-order"]
                return info if info["webhooks"]["sent"] == 1 else None

            info = wait_until(sent, interval=0.05, message="the post counted sent")
        assert info["webhooks"] == {"queued": 1, "sent": 1, "failed": 0, "dropped": 0,
                                    "retried": 1}  # fmt: skip
        assert info["events"]["webhooks_sent"] == 1
        assert not any(secret in orjson.dumps(info).decode() for secret in (KEY, TOKEN, QUERY))
    finally:
        proc.stop()
    assert len(destination.posts) == 2  # nothing re-posted at stop
    logs = sorted((workdir / "data").glob("*.events.log*"))
    assert logs
    text = "".join(f.read_text(errors="replace") for f in logs) + proc.log()
    assert "actions" in text
    for secret in (KEY, TOKEN, QUERY):
        assert secret not in text
