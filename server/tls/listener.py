"""The live TLS side of the listener: the active certificate pair, reloads, expiry.

uvicorn serves TLS with one :class:`ssl.SSLContext` given at start-up (:attr:`context`).
Every new handshake on it runs :meth:`TlsListener._select` (the context's SNI callback,
which OpenSSL calls on every ClientHello, with or without a server name), and that
switches the handshake to the *active* context. A reload builds a fresh context from the
files in a worker thread and makes it the active one: handshakes from then on use the new
pair, connections already established keep the one they negotiated and are never dropped.
A reload that fails (an unreadable file, a key that does not match, a certificate that
expired or is not valid yet) changes nothing: the old pair keeps serving and the error is
returned, logged and shown.

Expiry: a watch task on the injected clock emits ``tls/certificate_expiring`` (warning)
:data:`EXPIRY_WARNING` before the active certificate's ``notAfter`` and
``tls/certificate_expired`` (error) at it; a reload re-arms it for the new certificate.
The dashboard and ``spool_tls_certificate_not_after_seconds`` show the date all along.

Owned by the event loop; only the file work of a reload runs in a thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final, TypedDict

from spool.server.clock import Clock
from spool.server.config import TlsConfig
from spool.server.stats.source import EventSink
from spool.server.tls.certificate import CertificateDict, CertificateInfo
from spool.server.tls.context import MINIMUM_VERSION, ServerPair, load_server_pair
from spool.server.tls.errors import CertificateNotValid

__all__ = ["EXPIRY_WARNING", "TlsListener", "TlsStatus"]

#: how long before a certificate expires the warning event is written
EXPIRY_WARNING: Final = 14 * 86400.0


class TlsStatus(TypedDict):
    """The listener's TLS, as ``GET /api/tls`` and the dashboard show it."""

    enabled: bool
    client_auth: str
    minimum_version: str
    certificate_file: str
    ca_file: str | None
    certificate: CertificateDict
    expires_in_days: float
    expiring: bool
    expired: bool
    loaded_at: str
    reloads: int
    last_reload_error: str | None


@dataclass(frozen=True, slots=True)
class _Active:
    pair: ServerPair
    loaded_at: float


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds")


class TlsListener:
    """The TLS of one instance's listener.

    Args:
        config: the configured files and client-certificate mode.
        clock: reload times and the expiry watch.
        events: where loads, reloads, failures and expiry warnings go.

    The files are read at construction (blocking: the broker is built before the loop
    serves; the configuration loader already checked them).

    Raises:
        TlsError: the files cannot be loaded (changed since the configuration was read).
    """

    def __init__(
        self,
        config: TlsConfig,
        clock: Clock,
        events: EventSink,
    ) -> None:
        self.config = config
        self._clock = clock
        self._events = events
        first = self._load()
        self._active = _Active(first, clock.time())
        #: the context uvicorn listens with; its handshakes switch to the active one
        self.context: ssl.SSLContext = first.context
        self.context.sni_callback = self._select
        self.reloads = 0
        self.last_error: str | None = None
        self._watch: asyncio.Task[None] | None = None
        self._reloading = asyncio.Lock()

    # -- the active pair -------------------------------------------------------------------

    @property
    def certificate(self) -> CertificateInfo:
        """The certificate new handshakes get."""
        return self._active.pair.certificate

    def _load(self) -> ServerPair:
        c = self.config
        return load_server_pair(c.certificate, c.private_key, c.ca_certificate, c.client_auth)

    def _select(
        self, ssl_object: ssl.SSLObject | ssl.SSLSocket, server_name: str | None, _: ssl.SSLContext
    ) -> None:
        """SNI callback: the handshake continues with the active context."""
        active = self._active.pair.context
        if ssl_object.context is not active:
            ssl_object.context = active

    async def reload(self, actor: str) -> CertificateInfo:
        """Load the files again; new handshakes use the new pair, existing connections
        keep theirs.

        Raises:
            TlsError: the files cannot be used (nothing changed; the old pair serves).
        """
        async with self._reloading:
            try:
                pair = await asyncio.to_thread(self._load)
                now = self._clock.time()
                if not pair.certificate.valid_at(now):
                    cert = pair.certificate
                    when = "expired" if now > cert.not_after else "is not valid yet"
                    raise CertificateNotValid(
                        self.config.certificate,
                        f"the certificate {when} (valid {_iso(cert.not_before)} to "
                        f"{_iso(cert.not_after)}); the current one keeps serving",
                    )
            except Exception as exc:
                self.last_error = str(exc)
                self._events.emit("error", "tls", "reload_failed", user=actor, error=str(exc))
                raise
            previous = self.certificate
            self._active = _Active(pair, self._clock.time())
            self.reloads += 1
            self.last_error = None
            self._events.emit(
                "info", "tls", "reloaded", user=actor,
                subject=pair.certificate.subject, not_after=_iso(pair.certificate.not_after),
                sha256=pair.certificate.sha256, previous_sha256=previous.sha256,
            )  # fmt: skip
            self._restart_watch()
            return pair.certificate

    # -- lifecycle and expiry --------------------------------------------------------------

    def start(self) -> None:
        """Log what is served and start the expiry watch (on the running loop)."""
        cert = self.certificate
        self._events.emit(
            "info", "tls", "loaded", subject=cert.subject, issuer=cert.issuer,
            not_after=_iso(cert.not_after), sha256=cert.sha256,
            client_auth=self.config.client_auth,
        )  # fmt: skip
        self._restart_watch()

    async def stop(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch
            self._watch = None

    def _restart_watch(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
        self._watch = asyncio.get_running_loop().create_task(
            self._watch_expiry(self.certificate), name="tls-expiry"
        )

    async def _watch_expiry(self, cert: CertificateInfo) -> None:
        clock = self._clock
        warn_at = cert.not_after - EXPIRY_WARNING
        if clock.time() < warn_at:
            await clock.sleep(warn_at - clock.time())
        now = clock.time()
        if now < cert.not_after:
            self._events.emit(
                "warning", "tls", "certificate_expiring", subject=cert.subject,
                not_after=_iso(cert.not_after),
                days_left=round((cert.not_after - now) / 86400.0, 1),
            )  # fmt: skip
            await clock.sleep(cert.not_after - now)
        self._events.emit(
            "error", "tls", "certificate_expired", subject=cert.subject,
            not_after=_iso(cert.not_after),
        )  # fmt: skip

    # -- status ----------------------------------------------------------------------------

    def status(self) -> TlsStatus:
        cert = self.certificate
        now = self._clock.time()
        left = cert.not_after - now
        return {
            "enabled": True,
            "client_auth": self.config.client_auth,
            "minimum_version": MINIMUM_VERSION.name.replace("v", " ").replace("_", "."),
            "certificate_file": str(self.config.certificate),
            "ca_file": str(self.config.ca_certificate) if self.config.ca_certificate else None,
            "certificate": cert.as_dict(),
            "expires_in_days": round(left / 86400.0, 2),
            "expiring": left <= EXPIRY_WARNING,
            "expired": left <= 0,
            "loaded_at": _iso(self._active.loaded_at),
            "reloads": self.reloads,
            "last_reload_error": self.last_error,
        }
