"""Who is connecting on ``/replication``: the user of a link or of a bootstrap request.

A replication peer logs on like a client (path ``replication`` of the logon throttle): a
verified client certificate mapped to a user when it gives no secret, else its user and
password or token, checked off the loop behind the instance's logon throttle. Links
(server/replication/inbound.py) and bootstrap requests (server/replication/bootsource.py)
share this one check, so a bootstrap is authenticated exactly like a link.

The same check names the user a bootstrap's copied records are written as on the instance
that asks for the copy (:func:`authenticate_own`): the user its own ``<Bootstrap>``
credentials log on as here, so a copy may write exactly what a link logging on with them
may write.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from spool.server.auth import UserAuthenticator
from spool.server.config import ReplicationTransport, UserConfig
from spool.server.logons import LogonGuard
from spool.server.peer import Peer
from spool.server.replication.errors import AuthRefused, NotAccepting
from spool.server.scryptpool import PoolBusy
from spool.server.tls.certificate import load_pem_chain

__all__ = ["authenticate_own", "authenticate_peer"]


async def authenticate_peer(
    auth: UserAuthenticator,
    logons: LogonGuard | None,
    peer: Peer,
    *,
    name: str,
    user: str | None,
    secret: str | None,
    label: str | None = None,
) -> UserConfig:
    """The peer's user.

    Args:
        name: the Name the peer gave (for the messages).
        user, secret: the credentials it gave.
        label: how the messages name the logon (default ``replication from NAME``).

    Raises:
        AuthRefused: no credentials, wrong ones, or throttled.
        NotAccepting: the password-check pool is full (the peer retries).
    """
    who = label or f"replication from {name!r}"
    cert_user = auth.by_certificate(peer.client_subject)
    if cert_user is not None and not secret:
        if user and user != cert_user.name:
            raise AuthRefused(
                f"{who}: the client certificate belongs to user {cert_user.name!r}, not {user!r}"
            )
        if logons is not None:
            logons.succeeded("replication", peer.host, cert_user.name)
        return cert_user
    host = peer.host
    wait = logons.admit("replication", host, user) if logons else 0.0
    if wait > 0:
        raise AuthRefused(
            f"{who}: too many failed logons from {host} or "
            f"for user {user!r}; refused unchecked for {max(1, round(wait))} s"
        )
    try:
        found = await auth.authenticate_async(user, secret)
    except PoolBusy:
        if logons is not None:
            logons.refused("replication")
        raise NotAccepting("busy checking other logons' passwords; the peer retries") from None
    if found is None or (cert_user is not None and found is not cert_user):
        if logons is not None:
            logons.failed("replication", host, user)
        detail = (
            "these credentials do not belong to the client certificate's user"
            if found is not None
            else "unknown user or wrong password/token (give its Transport a <User> of "
            "this instance with its <Password> or <Token>, or a client <Certificate> whose "
            "subject is a user's CertificateSubject)"
        )
        raise AuthRefused(f"{who}: {detail}")
    if logons is not None:
        logons.succeeded("replication", peer.host, found.name)
    return found


async def authenticate_own(
    auth: UserAuthenticator, transport: ReplicationTransport, *, label: str
) -> UserConfig:
    """The user of this instance that ``transport``'s own credentials log on as: the user
    a link presenting them here would be (its ``<User>`` with the password or token, or a
    ``<Certificate>`` whose subject is a user's ``CertificateSubject``), checked without
    the logon throttle (nobody is guessing: the credentials are this instance's own).

    Args:
        label: how the messages name the credentials (``<Bootstrap>'s credentials``).

    Raises:
        AuthRefused: they are not those of a user of this instance; or the client
            certificate cannot be read.
        NotAccepting: the password-check pool is full (try again).
    """
    subject: str | None = None
    if transport.certificate is not None:
        try:
            subject = await asyncio.to_thread(_subject, transport.certificate)
        except (OSError, ValueError) as exc:
            raise AuthRefused(
                f"{label}: the client certificate {transport.certificate} cannot be read: {exc}"
            ) from None
    peer = Peer("", 0, client_subject=subject)
    return await authenticate_peer(
        auth, None, peer, name="", user=transport.user, secret=transport.secret, label=label
    )


def _subject(path: Path) -> str:
    """The RFC 4514 subject of the first certificate of a PEM file (blocking)."""
    return load_pem_chain(path.read_bytes())[0].subject.rfc4514_string()
