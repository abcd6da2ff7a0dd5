"""The TLS listener (server/tls/listener.py) in process: handshakes over memory BIOs pick
up a reloaded pair, failed reloads change nothing, and the expiry warning and expiry
events come at exact virtual times. Canonical subject names (server/tls/certificate.py)
are checked with hypothesis against cryptography's own formatting."""

from __future__ import annotations

import asyncio
import shutil
import ssl
import time
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import NameOID
from hypothesis import given
from hypothesis import strategies as st

from spool.server.clock import VirtualClock
from spool.server.config import TlsConfig
from spool.server.tls.certificate import InvalidName, canonical_name
from spool.server.tls.errors import CertificateNotValid, KeyMismatch
from spool.server.tls.listener import EXPIRY_WARNING, TlsListener
from tests.support.certs import DAY, Issued, TestCA, client_context


class Events:
    def __init__(self) -> None:
        self.lines: list[tuple[str, str, str, dict[str, object]]] = []

    def emit(self, level: str, category: str, event: str, **fields: object) -> None:
        self.lines.append((level, category, event, fields))

    def names(self) -> list[str]:
        return [e[2] for e in self.lines]


def handshake(server_ctx: ssl.SSLContext, client_ctx: ssl.SSLContext) -> bytes:
    """A whole TLS handshake in memory; returns the DER certificate the server presented."""
    s_in, s_out, c_in, c_out = (ssl.MemoryBIO() for _ in range(4))
    server = server_ctx.wrap_bio(s_in, s_out, server_side=True)
    client = client_ctx.wrap_bio(c_in, c_out, server_hostname="localhost")
    done = {"server": False, "client": False}
    for _ in range(20):
        for side, obj in (("client", client), ("server", server)):
            if not done[side]:
                try:
                    obj.do_handshake()
                    done[side] = True
                except ssl.SSLWantReadError:
                    pass
        s_in.write(c_out.read())
        c_in.write(s_out.read())
        if all(done.values()):
            der = client.getpeercert(binary_form=True)
            assert der is not None
            return der
    raise AssertionError("handshake did not finish")


def install(pair: Issued, config: TlsConfig) -> None:
    shutil.copyfile(pair.cert_path, config.certificate)
    shutil.copyfile(pair.key_path, config.private_key)


@pytest.fixture
def setup(tmp_path: Path) -> tuple[TestCA, TlsConfig]:
    ca = TestCA(tmp_path / "pki", "ca")
    config = TlsConfig(tmp_path / "server.pem", tmp_path / "server.key")
    install(ca.issue_server("first"), config)
    return ca, config


def test_new_handshakes_use_the_reloaded_pair(setup: tuple[TestCA, TlsConfig]) -> None:
    ca, config = setup
    renewed_ca = TestCA(config.certificate.parent / "pki", "renewed")

    async def main() -> None:
        events = Events()
        listener = TlsListener(config, VirtualClock(time.time()), events)
        listener.start()
        first = handshake(listener.context, client_context(ca.cert_path))
        renewed = renewed_ca.issue_server("renewed")
        install(renewed, config)
        cert = await listener.reload("ops")
        assert cert.issuer == renewed_ca.cert.subject.rfc4514_string()
        # the context uvicorn holds is the same object; its handshakes get the new pair
        second = handshake(listener.context, client_context(renewed_ca.cert_path))
        assert second != first
        assert x509.load_der_x509_certificate(second).serial_number == renewed.serial
        with pytest.raises(ssl.SSLCertVerificationError):
            handshake(listener.context, client_context(ca.cert_path))
        assert listener.reloads == 1
        assert events.names() == ["loaded", "reloaded"]
        await listener.stop()

    asyncio.run(main())


def test_a_failed_reload_keeps_the_current_pair(
    setup: tuple[TestCA, TlsConfig], tmp_path: Path
) -> None:
    ca, config = setup

    async def main() -> None:
        events = Events()
        clock = VirtualClock(time.time())
        listener = TlsListener(config, clock, events)
        before = listener.certificate
        # a key that does not match
        other = ca.issue_server("other")
        shutil.copyfile(other.key_path, config.private_key)
        with pytest.raises(KeyMismatch):
            await listener.reload("ops")
        # an expired certificate
        expired = ca.issue_server("expired", not_before=clock.time() - 30 * DAY,
                                  not_after=clock.time() - DAY)  # fmt: skip
        install(expired, config)
        with pytest.raises(CertificateNotValid, match="expired"):
            await listener.reload("ops")
        assert listener.certificate == before and listener.reloads == 0
        assert listener.last_error is not None and "expired" in listener.last_error
        handshake(listener.context, client_context(ca.cert_path))  # still serving
        assert events.names() == ["reload_failed", "reload_failed"]
        assert listener.status()["last_reload_error"] == listener.last_error

    asyncio.run(main())


def test_expiry_warning_14_days_before_and_expiry_on_the_clock(tmp_path: Path) -> None:
    clock = VirtualClock()  # 2023-11-14: the certificate is made relative to it
    ca = TestCA(tmp_path / "pki", "ca", now=clock.time())
    config = TlsConfig(tmp_path / "server.pem", tmp_path / "server.key")
    install(ca.issue_server("s", not_after=clock.time() + 20 * DAY), config)

    async def main() -> None:
        events = Events()
        listener = TlsListener(config, clock, events)
        listener.start()
        await clock.wait_all_blocked()
        assert events.names() == ["loaded"]
        warn_in = 20 * DAY - EXPIRY_WARNING  # 6 days
        await clock.advance(warn_in - 1)
        assert events.names() == ["loaded"]
        await clock.advance(1)
        assert events.names() == ["loaded", "certificate_expiring"]
        level, _, _, fields = events.lines[-1]
        assert level == "warning" and fields["days_left"] == 14.0
        status = listener.status()
        assert status["expiring"] and not status["expired"]
        assert status["expires_in_days"] == 14.0
        await clock.advance(EXPIRY_WARNING)
        assert events.names()[-1] == "certificate_expired"
        assert events.lines[-1][0] == "error" and listener.status()["expired"]
        await listener.stop()

    asyncio.run(main())


def test_a_reload_rearms_the_expiry_watch(tmp_path: Path) -> None:
    clock = VirtualClock()
    ca = TestCA(tmp_path / "pki", "ca", now=clock.time())
    config = TlsConfig(tmp_path / "server.pem", tmp_path / "server.key")
    install(ca.issue_server("s", not_after=clock.time() + 15 * DAY), config)

    async def main() -> None:
        events = Events()
        listener = TlsListener(config, clock, events)
        listener.start()
        install(ca.issue_server("renewed", not_after=clock.time() + 90 * DAY), config)
        await listener.reload("SIGHUP")
        await clock.advance(30 * DAY)  # the old certificate's warning day has passed
        assert "certificate_expiring" not in events.names()
        await clock.advance(46 * DAY)  # 76 days: 14 before the new one expires
        assert events.names()[-1] == "certificate_expiring"
        await listener.stop()

    asyncio.run(main())


# -- names -------------------------------------------------------------------------------

_VALUE = st.text(
    alphabet=st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters="\x00"),
    min_size=1,
    max_size=20,
)
_ATTRS = st.sampled_from(
    [NameOID.COMMON_NAME, NameOID.ORGANIZATION_NAME, NameOID.ORGANIZATIONAL_UNIT_NAME,
     NameOID.LOCALITY_NAME, NameOID.DOMAIN_COMPONENT]
)  # fmt: skip


@given(st.lists(st.tuples(_ATTRS, _VALUE), min_size=1, max_size=5))
def test_canonical_name_is_what_certificates_say(
    parts: list[tuple[x509.ObjectIdentifier, str]],
) -> None:
    name = x509.Name([x509.NameAttribute(oid, value) for oid, value in parts])
    written = name.rfc4514_string()
    assert canonical_name(written) == written
    # attribute types in any case, spaces around the separators
    loose = ", ".join(
        f"{part.split('=', 1)[0].lower()} = {part.split('=', 1)[1]}" for part in _split(written)
    )
    if not any(v.startswith(" ") or v.endswith(" ") for _, v in parts):
        assert canonical_name(loose) == written


def _split(text: str) -> list[str]:
    out, cur, i = [], "", 0
    while i < len(text):
        if text[i] == "\\":
            cur += text[i : i + 2]
            i += 2
            continue
        if text[i] == ",":
            out.append(cur)
            cur = ""
        else:
            cur += text[i]
        i += 1
    return [*out, cur]


@pytest.mark.parametrize("bad", ["", "alice", "=alice", "CN"])
def test_canonical_name_refuses_what_is_not_a_name(bad: str) -> None:
    with pytest.raises(InvalidName):
        canonical_name(bad)
