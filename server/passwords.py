"""Stored passwords: the ``scrypt$N$r$p$SALT$HASH`` form of a ``<PasswordHash>``.

One module owns the format both ways: :func:`hash_password` writes it (``spool passwd``),
:func:`parse_password_hash` reads and bounds it (the configuration loader refuses a bad
hash at start-up with the element's path), and :func:`verify_password` checks a password
against it in constant time. It sits below both ``spool.server.config`` and ``spool.server.auth`` so
that the loader can validate a hash without importing the authenticator, which itself reads
the configuration's users.

Errors::

    SpoolError (spool.server.protocol.errors)
    └── InvalidPasswordHash    a PasswordHash not shaped scrypt$N$r$p$salt$hash (ValueError)

Verifying costs tens of milliseconds of CPU by design: code on the event loop runs it in a
thread (``Authenticator.authenticate_async``).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass, field
from typing import Final

from spool.server.protocol.errors import SpoolError

__all__ = [
    "SCRYPT_N",
    "SCRYPT_P",
    "SCRYPT_R",
    "InvalidPasswordHash",
    "ScryptHash",
    "hash_password",
    "parse_password_hash",
    "verify_password",
]

#: Parameters of new hashes (about 16 MiB and tens of milliseconds per check).
SCRYPT_N: Final = 2**14
SCRYPT_R: Final = 8
SCRYPT_P: Final = 1
_SALT_BYTES: Final = 16
_KEY_BYTES: Final = 32

# Bounds on scrypt parameters: strong enough to mean something, small enough that checking
# a password cannot exhaust memory (128 * N * r bytes <= 64 MiB) or hang a worker thread.
_SCRYPT_MAX_MEMORY: Final = 64 * 1024 * 1024
_SCRYPT_SHAPE: Final = "PasswordHash must have the form scrypt$N$r$p$salt_b64$hash_b64"


class InvalidPasswordHash(SpoolError, ValueError):
    """A PasswordHash that is not ``scrypt$N$r$p$salt_b64$hash_b64``.

    The message describes the shape only; it never repeats the value.
    """


@dataclass(frozen=True, slots=True)
class ScryptHash:
    """A parsed ``scrypt$N$r$p$salt_b64$hash_b64`` password hash.

    Verification is ``hashlib.scrypt(password, salt=salt, n=n, r=r, p=p, maxmem=maxmem,
    dklen=len(hash))`` compared with ``hmac.compare_digest``; it costs tens of
    milliseconds of CPU, so run it in a thread.
    """

    n: int
    r: int
    p: int
    salt: bytes = field(repr=False)
    hash: bytes = field(repr=False)

    @property
    def maxmem(self) -> int:
        """The ``maxmem`` that ``hashlib.scrypt`` needs for these parameters (plus slack)."""
        return 128 * self.r * (self.n + self.p + 2) + 1024 * 1024


def _b64(text: str, what: str) -> bytes:
    if not re.fullmatch(r"[A-Za-z0-9+/]+={0,2}", text):
        raise InvalidPasswordHash(f"{_SCRYPT_SHAPE}: the {what} is not base64")
    try:
        return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except binascii.Error as exc:
        raise InvalidPasswordHash(f"{_SCRYPT_SHAPE}: the {what} is not base64") from exc


def parse_password_hash(text: str) -> ScryptHash:
    """Check and split a PasswordHash.

    Rules: N a power of two >= 2, r and p in 1..64, 128*N*r <= 64 MiB, a salt of at least
    8 bytes, a hash of 16..1024 bytes; base64 with or without padding.

    Raises:
        InvalidPasswordHash: the shape or a parameter is wrong (the value is not repeated).
    """
    parts = text.split("$")
    if len(parts) != 6 or parts[0] != "scrypt":
        raise InvalidPasswordHash(_SCRYPT_SHAPE)
    numbers: list[int] = []
    for label, part in zip(("N", "r", "p"), parts[1:4], strict=True):
        if not (part.isascii() and part.isdigit()) or len(part) > 10:
            raise InvalidPasswordHash(f"{_SCRYPT_SHAPE}: {label} is not a number")
        numbers.append(int(part))
    n, r, p = numbers
    if n < 2 or n & (n - 1):
        raise InvalidPasswordHash(f"{_SCRYPT_SHAPE}: N must be a power of two >= 2")
    if not 1 <= r <= 64 or not 1 <= p <= 64:
        raise InvalidPasswordHash(f"{_SCRYPT_SHAPE}: r and p must be between 1 and 64")
    if 128 * n * r > _SCRYPT_MAX_MEMORY:
        raise InvalidPasswordHash(
            f"{_SCRYPT_SHAPE}: N and r need more than 64 MiB per check (128*N*r); lower them"
        )
    salt = _b64(parts[4], "salt")
    digest = _b64(parts[5], "hash")
    if len(salt) < 8:
        raise InvalidPasswordHash(f"{_SCRYPT_SHAPE}: the salt must be at least 8 bytes")
    if not 16 <= len(digest) <= 1024:
        raise InvalidPasswordHash(f"{_SCRYPT_SHAPE}: the hash must be 16..1024 bytes")
    return ScryptHash(n=n, r=r, p=p, salt=salt, hash=digest)


def _derive(password: str, params: ScryptHash) -> bytes:
    return hashlib.scrypt(
        password.encode("utf-8"),
        salt=params.salt,
        n=params.n,
        r=params.r,
        p=params.p,
        maxmem=params.maxmem,
        dklen=len(params.hash),
    )


def hash_password(password: str) -> str:
    """Hash a password for the ``PasswordHash`` element (random salt, scrypt N=2**14 r=8 p=1)."""
    params = ScryptHash(
        n=SCRYPT_N,
        r=SCRYPT_R,
        p=SCRYPT_P,
        salt=secrets.token_bytes(_SALT_BYTES),
        hash=bytes(_KEY_BYTES),
    )
    key = _derive(password, params)
    salt_b64 = base64.b64encode(params.salt).decode()
    key_b64 = base64.b64encode(key).decode()
    return f"scrypt${SCRYPT_N}${SCRYPT_R}${SCRYPT_P}${salt_b64}${key_b64}"


def verify_password(password: str, stored: str) -> bool:
    """Whether ``password`` matches ``stored``; False for a malformed hash (never raises).

    The hash is checked by :func:`parse_password_hash` (bounded parameters) and the derived
    key compared with :func:`hmac.compare_digest`.
    """
    try:
        params = parse_password_hash(stored)
    except InvalidPasswordHash:
        return False
    return hmac.compare_digest(_derive(password, params), params.hash)
