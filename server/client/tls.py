"""TLS for the client: a context that verifies the broker by default.

:func:`client_context` builds the :class:`ssl.SSLContext` a :class:`~spool.server.client.Client`
(and the ``spool`` CLI) connects to a ``wss://`` URL with: the broker's certificate is
verified against the system's CAs, or against ``cafile`` when given, and its host name
checked; TLS 1.2 at least. ``certfile`` / ``keyfile`` present a client certificate
(mutual TLS: the broker maps its subject to a user). ``insecure`` turns verification off
and exists for tests against throwaway certificates only: a client that does not verify
talks to whoever answers.
"""

from __future__ import annotations

import ssl
from pathlib import Path

from spool.server.client.errors import ClientError

__all__ = ["client_context"]


def client_context(
    *,
    cafile: str | Path | None = None,
    certfile: str | Path | None = None,
    keyfile: str | Path | None = None,
    insecure: bool = False,
) -> ssl.SSLContext:
    """A client context (see the module docstring).

    Raises:
        ClientError: a file cannot be read or is not what it should be.
    """
    try:
        ctx = ssl.create_default_context(cafile=str(cafile) if cafile is not None else None)
    except (OSError, ssl.SSLError) as exc:
        raise ClientError(f"cannot use the CA file {cafile}: {exc}") from exc
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if insecure:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if certfile is not None:
        try:
            ctx.load_cert_chain(str(certfile), str(keyfile) if keyfile is not None else None)
        except (OSError, ssl.SSLError) as exc:
            raise ClientError(f"cannot use the client certificate {certfile}: {exc}") from exc
    elif keyfile is not None:
        raise ClientError("a client key needs its certificate (certfile)")
    return ctx
