"""Bootstrap between instances with ``<Users>``, as in-process scenarios on the virtual clock.

Copied records are written as the user of the requesting instance that the bootstrap's
own credentials log on as (a user and token, a token alone, or a client certificate mapped
by ``CertificateSubject``), so that user's Write entitlements apply as a link's do. What
cannot work - credentials that are no user's here, a named topic the user may not write -
stops the bootstrap before anything is copied; a source refusing for a lasting reason is
held off and reported once, not asked again every few seconds.
"""

from __future__ import annotations

from pathlib import Path

from spool.server.clock import VirtualClock
from spool.server.peer import Peer
from spool.server.replication.bootstrap import REFUSED_RETRY, Bootstrapper
from tests.support.certs import TestCA
from tests.support.engine import EngineHarness
from tests.support.fabric import A, B, drive, persisted, publish, records, scenario, xml
from tests.support.replication import MemoryFabric, bootstrap_xml

REPL = "repl-token-for-bootstrap-tests-0123"
PUB = "pub-token-for-bootstrap-tests-01234"
COPIES = 40


def _users(*, write: str = ".*", read: str = ".*", subject: str = "", repl: bool = True) -> str:
    cert = f"<CertificateSubject>{subject}</CertificateSubject>" if subject else ""
    user = (
        f"<User><Name>repl</Name><Token>{REPL}</Token>{cert}<Read>{read}</Read>"
        f"<Write>{write}</Write></User>"
        if repl
        else ""
    )
    return f"<User><Name>pub</Name><Token>{PUB}</Token><Write>.*</Write></User>{user}"


class Scene:
    """The source ``a`` (with ``COPIES`` records of ``orders``) on a memory fabric, and
    the requesters started into it."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp = tmp_path
        self.fabric = MemoryFabric()
        self.clock = VirtualClock()
        self.started: list[EngineHarness] = []

    async def source(self, **users: str) -> EngineHarness:
        a = EngineHarness(self.tmp / "a", xml(self.tmp, "a", users=_users(**users)),
                          clock=self.clock, connector=self.fabric.connector("a"))  # fmt: skip
        self.fabric.register(A, a.broker)
        await a.__aenter__()
        self.started.append(a)
        pub = await a.logon("pub-a", user_id="pub", pw=PUB)
        publish(pub, "orders", range(1, COPIES + 1))
        await drive(self.clock, lambda: persisted(pub) == COPIES)
        return a

    async def requester(self, users: str, transport: str) -> EngineHarness:
        boot = bootstrap_xml(["orders"], [A], transport_extra=transport)
        b = EngineHarness(self.tmp / "b", xml(self.tmp, "b", users=users, bootstrap=boot),
                          clock=self.clock, connector=self.fabric.connector("b"))  # fmt: skip
        self.fabric.register(B, b.broker)
        await b.__aenter__()
        self.started.append(b)
        return b

    async def copied(self, b: EngineHarness) -> None:
        """``b`` copies every record of ``a`` as ``repl``, then serves."""
        await drive(self.clock, lambda: b.broker.ready)
        boot = _boot(b)
        assert boot.progress.state == "done" and boot.progress.user == "repl"
        assert len(await records(b)) == COPIES

    async def close(self) -> None:
        for h in reversed(self.started):
            await h.__aexit__(None, None, None)
        await self.fabric.close()


def _boot(h: EngineHarness) -> Bootstrapper:
    boot = h.broker.bootstrapper
    assert boot is not None
    return boot


def _dials(scene: Scene) -> int:
    return sum(1 for source, address in scene.fabric.dials if source == "b" and address == A)


def _events(h: EngineHarness, name: str) -> list[dict[str, object]]:
    return [e for e in h.broker.events.recent() if e["event"] == name]


@scenario
async def test_a_token_alone_copies_as_the_user_it_names_here(tmp_path: Path) -> None:
    scene = Scene(tmp_path)
    try:
        await scene.source()
        await scene.copied(
            await scene.requester(_users(write="^orders$"), f"<Token>{REPL}</Token>")
        )
    finally:
        await scene.close()


@scenario
async def test_a_client_certificate_copies_as_the_user_of_its_subject(tmp_path: Path) -> None:
    ca = TestCA(tmp_path / "pki", "ca")
    client = ca.issue_client("spool-b")
    scene = Scene(tmp_path)
    # what a's TLS listener would see of b: its verified client certificate
    scene.fabric.peers["b"] = Peer("127.0.0.1", 40001, "TLSv1.3", client.subject)
    transport = (
        f"<TLS>true</TLS><CACertificate>{ca.cert_path}</CACertificate>"
        f"<Certificate>{client.cert_path}</Certificate><PrivateKey>{client.key_path}</PrivateKey>"
    )
    try:
        await scene.source(subject=client.subject)
        await scene.copied(
            await scene.requester(_users(write="^orders$", subject=client.subject), transport)
        )
    finally:
        await scene.close()


@scenario
async def test_a_named_topic_the_user_may_not_write_stops_before_any_copy(
    tmp_path: Path,
) -> None:
    scene = Scene(tmp_path)
    try:
        await scene.source()
        b = await scene.requester(_users(write="^md$"), f"<User>repl</User><Token>{REPL}</Token>")
        boot = _boot(b)
        await drive(scene.clock, lambda: boot.progress.state == "failed")
        error = str(boot.progress.error)
        assert "user 'repl' of the bootstrap may not publish to 'orders'" in error
        assert "<Write>" in error
        assert _dials(scene) == 0, "the source was asked for a copy that could not be taken"
        assert not b.broker.ready and await records(b) == []
        assert len(_events(b, "bootstrap_failed")) == 1
    finally:
        await scene.close()


@scenario
async def test_credentials_of_no_user_here_stop_before_any_copy(tmp_path: Path) -> None:
    scene = Scene(tmp_path)
    try:
        await scene.source()
        b = await scene.requester(_users(repl=False), f"<User>repl</User><Token>{REPL}</Token>")
        boot = _boot(b)
        await drive(scene.clock, lambda: boot.progress.state == "failed")
        error = str(boot.progress.error)
        assert "must be a user of this instance too" in error
        assert "unknown user or wrong password/token" in error
        assert REPL not in error
        assert _dials(scene) == 0 and not b.broker.ready
    finally:
        await scene.close()


@scenario
async def test_a_lasting_refusal_of_the_source_is_held_off_and_reported_once(
    tmp_path: Path,
) -> None:
    """a's ``repl`` may not read ``orders``: every attempt would be refused the same way.
    b asks again only every REFUSED_RETRY seconds, says so once, and shows when it will
    try again."""
    scene = Scene(tmp_path)
    try:
        await scene.source(read="^md$")
        b = await scene.requester(_users(), f"<User>repl</User><Token>{REPL}</Token>")
        boot = _boot(b)
        await drive(scene.clock, lambda: boot.progress.retry_at is not None)
        progress = boot.progress
        assert progress.state == "waiting" and _dials(scene) == 1
        assert "refused the bootstrap: not entitled" in str(progress.error)
        assert "may not read 'orders'" in str(progress.error)
        assert f"every {REFUSED_RETRY:.0f} s" in str(progress.error)
        now = scene.clock.time()
        assert now < progress.retry_at <= now + REFUSED_RETRY
        assert progress.retry_at - now > REFUSED_RETRY - 1
        await scene.clock.advance(progress.retry_at - now - 0.5)
        assert _dials(scene) == 1, "asked again before the hold-off ended"
        await scene.clock.advance(1)
        await drive(scene.clock, lambda: _dials(scene) == 2 and progress.retry_at is not None)
        refused = _events(b, "bootstrap_source_refused")
        assert len(refused) == 1 and refused[0]["reason"] == "not entitled"
        assert refused[0]["level"] == "error"
        assert not _events(b, "bootstrap_interrupted")
        assert not b.broker.ready
    finally:
        await scene.close()
