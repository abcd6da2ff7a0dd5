"""Who is connecting on ``/replication``: the user of a link or of a bootstrap request.

A replication peer logs on like a client (path ``replication`` of the logon throttle): a
verified client certificate mapped to a user when it gives no secret, else its user and
password or token, checked off the loop behind the instance's logon throttle. Links
(server/replication/inbound.py) and bootstrap requests (server/replication/bootsource.py)
share this one check, so a bootstrap is authenticated exactly like a link.
"""

from __future__ import annotations

from server.auth import Authenticator
from server.config import UserConfig
from server.logons import LogonGuard
from server.peer import Peer
from server.replication.errors import AuthRefused, NotAccepting
from server.scryptpool import PoolBusy

__all__ = ["authenticate_peer"]


async def authenticate_peer(
    auth: Authenticator,
    logons: LogonGuard | None,
    peer: Peer,
    *,
    name: str,
    user: str | None,
    secret: str | None,
) -> UserConfig:
    """The peer's user.

    Args:
        name: the Name the peer gave (for the messages).
        user, secret: the credentials it gave.

    Raises:
        AuthRefused: no credentials, wrong ones, or throttled.
        NotAccepting: the password-check pool is full (the peer retries).
    """
    cert_user = auth.by_certificate(peer.client_subject)
    if cert_user is not None and not secret:
        if user and user != cert_user.name:
            raise AuthRefused(
                f"replication from {name!r}: the client certificate belongs to "
                f"user {cert_user.name!r}, not {user!r}"
            )
        if logons is not None:
            logons.succeeded("replication", peer.host, cert_user.name)
        return cert_user
    host = peer.host
    wait = logons.admit("replication", host, user) if logons else 0.0
    if wait > 0:
        raise AuthRefused(
            f"replication from {name!r}: too many failed logons from {host} or "
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
        raise AuthRefused(f"replication from {name!r}: {detail}")
    if logons is not None:
        logons.succeeded("replication", peer.host, found.name)
    return found
