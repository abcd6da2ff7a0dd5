"""The users several REST tests log on as: an admin with a token and a password, a reader
with a token only who may read every topic (REST shows a topic's data to its readers
only), and a feed allowed to read and write every topic."""

from __future__ import annotations

from spool.server.passwords import hash_password

ADMIN_PASSWORD = "ops-password"


def three_users(admin_token: str, reader_token: str, feed_token: str) -> str:
    """``<User>`` elements of ``ops`` (admin), ``viewer`` and ``feed``."""
    return (
        f"<User><Name>ops</Name><Token>{admin_token}</Token>"
        f"<PasswordHash>{hash_password(ADMIN_PASSWORD)}</PasswordHash><Admin>true</Admin></User>"
        f"<User><Name>viewer</Name><Token>{reader_token}</Token><Read>.*</Read></User>"
        f"<User><Name>feed</Name><Token>{feed_token}</Token><Read>.*</Read><Write>.*</Write>"
        "</User>"
    )


def bearer(token: str) -> dict[str, str]:
    """The header of a REST request made with ``token``."""
    return {"Authorization": f"Bearer {token}"}
