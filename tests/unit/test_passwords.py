"""server/passwords.py: the scrypt$N$r$p$salt$hash format, written, parsed and verified."""

from __future__ import annotations

import base64
import hashlib
import hmac
import re

import pytest

from spool.server.passwords import (
    InvalidPasswordHash,
    hash_password,
    parse_password_hash,
    verify_password,
)
from spool.server.protocol.errors import SpoolError

SALT = base64.b64encode(bytes(range(16))).decode()
DIGEST = base64.b64encode(bytes(range(100, 132))).decode()
HASH = f"scrypt$16384$8$1${SALT}${DIGEST}"


def test_hash_format_and_verification() -> None:
    stored = hash_password("correct horse")
    parsed = parse_password_hash(stored)
    assert (parsed.n, parsed.r, parsed.p) == (2**14, 8, 1)
    assert stored.startswith("scrypt$16384$8$1$")
    assert verify_password("correct horse", stored)
    assert not verify_password("correct horse ", stored)
    assert hash_password("x") != hash_password("x")  # salted


@pytest.mark.parametrize("stored", ["", "scrypt$", "bcrypt$1$2$3$4$5", "scrypt$3$8$1$AAAA$AAAA"])
def test_malformed_hashes_never_verify(stored: str) -> None:
    assert not verify_password("anything", stored)


def test_parse_password_hash() -> None:
    parsed = parse_password_hash(HASH)
    assert (parsed.n, parsed.r, parsed.p) == (16384, 8, 1)
    assert parsed.salt == bytes(range(16)) and parsed.hash == bytes(range(100, 132))
    assert SALT not in repr(parsed)
    # Unpadded base64 is accepted too.
    unpadded = HASH.replace("=", "")
    assert parse_password_hash(unpadded) == parsed


def test_password_hash_verifies_with_hashlib() -> None:
    salt = b"0123456789abcdef"
    digest = hashlib.scrypt(b"pw", salt=salt, n=16, r=8, p=1, dklen=32)
    text = f"scrypt$16$8$1${base64.b64encode(salt).decode()}${base64.b64encode(digest).decode()}"
    h = parse_password_hash(text)
    again = hashlib.scrypt(b"pw", salt=h.salt, n=h.n, r=h.r, p=h.p, maxmem=h.maxmem, dklen=32)
    assert hmac.compare_digest(again, h.hash)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "must have the form"),
        ("bcrypt$1$1$1$AAAAAAAAAAA=$AAAAAAAAAAAAAAAAAAAAAA==", "must have the form"),
        (f"scrypt$x$8$1${SALT}${DIGEST}", "N is not a number"),
        (f"scrypt$1$8$1${SALT}${DIGEST}", "N must be a power of two"),
        (f"scrypt$16384$0$1${SALT}${DIGEST}", "r and p must be between 1 and 64"),
        (f"scrypt$16384$8$65${SALT}${DIGEST}", "r and p must be between 1 and 64"),
        (f"scrypt$1048576$8$1${SALT}${DIGEST}", "more than 64 MiB"),
        (f"scrypt$16384$8$1$AAAA${DIGEST}", "the salt must be at least 8 bytes"),
        (f"scrypt$16384$8$1${SALT}$AAAA", "the hash must be 16..1024 bytes"),
        (f"scrypt$16384$8$1${SALT}$@@@@", "the hash is not base64"),
        (f"scrypt$16384$8$1${SALT}$A", "the hash is not base64"),
    ],
)
def test_parse_password_hash_refuses(text: str, fragment: str) -> None:
    with pytest.raises(InvalidPasswordHash, match=re.escape(fragment)) as info:
        parse_password_hash(text)
    assert isinstance(info.value, SpoolError) and isinstance(info.value, ValueError)
    assert SALT not in str(info.value) and DIGEST not in str(info.value)
