"""What goes wrong with TLS files, one exception class per reason.

Every error names the configuration element whose file is at fault (``element``), so the
configuration loader reports it at that element's path and line, and a reload refused by
the admin API says which file to fix. Messages name files, never their contents.

Hierarchy::

    SpoolError (spool.server.protocol.errors)
    └── TlsError                    .element: Certificate | PrivateKey | CACertificate
        ├── TlsFileUnreadable       the file cannot be read
        ├── CertificateInvalid      not a PEM certificate (chain)
        ├── CertificateNotValid     expired or not yet valid (refused on reload)
        ├── PrivateKeyInvalid       not a PEM private key
        ├── PrivateKeyEncrypted     a key protected by a passphrase (not supported)
        ├── KeyMismatch             the key does not belong to the certificate
        └── CaCertificateInvalid    not a PEM CA certificate bundle
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from spool.server.protocol.errors import SpoolError

Element = Literal["Certificate", "PrivateKey", "CACertificate"]


class TlsError(SpoolError):
    """A TLS file that cannot be used.

    Attributes:
        element: the configuration element naming the file.
        path: the file.
        message: what is wrong, and what to do where that helps.
    """

    element: Element = "Certificate"

    def __init__(self, path: Path, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message


class TlsFileUnreadable(TlsError):
    def __init__(self, element: Element, path: Path, message: str) -> None:
        super().__init__(path, message)
        self.element = element


class CertificateInvalid(TlsError):
    element = "Certificate"


class CertificateNotValid(TlsError):
    element = "Certificate"


class PrivateKeyInvalid(TlsError):
    element = "PrivateKey"


class PrivateKeyEncrypted(TlsError):
    element = "PrivateKey"


class KeyMismatch(TlsError):
    element = "PrivateKey"


class CaCertificateInvalid(TlsError):
    element = "CACertificate"
