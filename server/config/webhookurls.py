"""Where a webhook may post (``<Actions><Webhooks><Allow>``), and how its URL is shown.

One rule with two callers: the configuration checks each webhook's ``Url`` option against
the ``Allow`` prefixes at start-up (only its written-out beginning when it holds
``{{VARIABLE}}`` references), and the sender (:mod:`spool.server.actions.webhooks`)
checks the expanded URL before it posts. Pure: text in, a verdict or the reason for a
refusal out; no I/O and no HTTP client.

A URL is read the way httpx, the sender's client, sends it: scheme and host in lower
case, the scheme's default port implied, literal ``.`` and ``..`` segments removed, the
characters a path may not hold percent-encoded (as UTF-8). It is allowed when one prefix
has exactly its scheme, host and port and the prefix's path segments begin the URL's
path, whole segments only: ``https://h/spool`` allows ``https://h/spool`` and
``https://h/spool/x``, not ``https://h/spoolx``; a trailing slash on a prefix changes
nothing. So plain ``http`` needs an ``http://`` prefix and another port is another
destination. An IPv6 address is compared as written, and a host name that is not ASCII
is refused (it is written in its ``xn--`` form).

The path has to stay under the prefix however the receiving server reads it: a server
may decode escaped unreserved characters (``%2E`` to ``.``) and take ``%2F``, ``%5C`` or
a backslash for a separator before it resolves dot segments, so ``/spool/..%2Fadmin``
may reach ``/admin``, while another server reads ``/spool%2Fx`` as one segment, outside
``/spool``. A URL is allowed only when every such reading keeps it under the prefix; dot
segments are resolved again in each (``..`` at the root stays there, and ``..;x``, which
some servers read as ``..``, counts as one). One level of escaping only: a server that
decodes twice is not accounted for. A URL with userinfo (``https://user:pw@h/``) is
never allowed: credentials go in a header.

:func:`redact_url` is the only form of a webhook URL that is shown (errors, describe
lines, outcomes, logs): the query, where tokens go, is cut to ``?…``, userinfo and the
fragment are dropped.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

__all__ = ["AllowList", "WebhookUrl", "parse_prefix", "parse_url", "redact_url"]

#: the schemes a webhook may use, with their default ports
_SCHEMES: Final = {"http": 80, "https": 443}
#: the scheme and authority of an absolute URL (the authority as httpx delimits it)
_ORIGIN: Final = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://([^/?#]*)")
#: a host name as compared (lower case), or an IPv6 address in brackets
_HOST: Final = re.compile(r"[a-z0-9._~-]+|\[[0-9a-f:.]+\]")
#: the characters httpx sends in a path as they are; it percent-encodes the others
_PATH_SAFE: Final = frozenset(chr(c) for c in range(0x21, 0x7F)) - frozenset('"#<>?`{}')
#: one percent-encoded byte
_PERCENT: Final = re.compile(r"%([0-9A-Fa-f]{2})")
#: the unreserved characters (RFC 3986 section 2.3, "." among them): a server may decode
#: their escapes, which mean the same as the characters
_UNRESERVED: Final = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
#: what a server may take for a segment separator besides "/"
_SLASHES: Final = re.compile(r"%2[Ff]|%5[Cc]|\\")
#: the ways a server may read a path: (decode escaped unreserved characters such as
#: ``%2E``, take ``%2F`` / ``%5C`` / a backslash as a separator); the first is the literal
#: one. A URL is allowed only when every reading keeps it under the prefix.
_READINGS: Final = ((False, False), (True, False), (False, True), (True, True))
#: every reading, and the literal one alone (a refusal says which failed)
_ALL: Final = range(len(_READINGS))
_LITERAL: Final = range(1)


@dataclass(frozen=True, slots=True)
class WebhookUrl:
    """An absolute http(s) URL as the allow rule compares it.

    Attributes:
        scheme: ``http`` or ``https``.
        host: the host name in lower case, or an IPv6 address in brackets as written.
        port: the port, the scheme's default when none is written.
        path: the path as sent (dot segments removed, percent-encoded), without the query.
        readings: the path's segments, one tuple per reading of :data:`_READINGS`.
    """

    scheme: str
    host: str
    port: int
    path: str
    readings: tuple[tuple[str, ...], ...]

    @property
    def origin(self) -> tuple[str, str, int]:
        return self.scheme, self.host, self.port

    def text(self) -> str:
        """The URL without its query, normalised: ``https://h/p`` for ``HTTPS://H:443/p``."""
        port = "" if _SCHEMES[self.scheme] == self.port else f":{self.port}"
        return f"{self.scheme}://{self.host}{port}{self.path or '/'}"


def parse_url(url: str) -> WebhookUrl | str:
    """``url`` as compared, or why it cannot be posted to: the end of a sentence whose
    subject is the URL (``is not an absolute http:// or https:// URL``)."""
    if any(ch.isascii() and not ch.isprintable() for ch in url):
        return "has a control character"
    match = _ORIGIN.match(url)
    if match is None:
        return "is not an absolute http:// or https:// URL"
    scheme = match.group(1).lower()
    if scheme not in _SCHEMES:
        return f"is a {scheme}:// URL: webhooks post over http or https"
    authority = match.group(2)
    if "@" in authority:
        return "holds credentials (user@host): send them in a <Header>"
    if authority.startswith("["):  # an IPv6 address
        end = authority.find("]")
        host, port_text = authority[: end + 1], authority[end + 1 :]
        if end < 0 or (port_text and not port_text.startswith(":")):
            return "has a malformed host"
        port_text = port_text[1:]
    else:
        host, _, port_text = authority.partition(":")
    if not host:
        return "names no host"
    if not host.isascii():
        return "names a host that is not ASCII: write it in its xn-- form"
    host = host.lower()
    if not _HOST.fullmatch(host) or (host.startswith("[") and not _ipv6(host[1:-1])):
        return "has a malformed host"
    port = _SCHEMES[scheme]
    if port_text:
        if not (port_text.isascii() and port_text.isdigit() and 0 < int(port_text) < 65536):
            return "has a port that is not a number from 1 to 65535"
        port = int(port_text)
    path = _as_sent(re.split(r"[?#]", url[match.end() :], maxsplit=1)[0])
    relative = path.removeprefix("/")
    readings = tuple(_segments(relative, decode=d, split=s) for d, s in _READINGS)
    return WebhookUrl(scheme, host, port, path, readings)


def _ipv6(text: str) -> bool:
    try:
        ipaddress.IPv6Address(text)
    except ValueError:
        return False
    return True


def _as_sent(path: str) -> str:
    """``path`` as httpx sends it: literal ``.`` and ``..`` segments removed (a ``..``
    at the root stays there), then the characters it may not hold percent-encoded."""
    if "." in path:
        out: list[str] = []
        for segment in path.split("/"):
            if segment == "..":
                if out and out != [""]:
                    out.pop()
            elif segment != ".":
                out.append(segment)
        path = "/".join(out)
    if all(ch in _PATH_SAFE for ch in path):
        return path
    return "".join(
        ch if ch in _PATH_SAFE else "".join(f"%{b:02X}" for b in ch.encode()) for ch in path
    )


def _decode_unreserved(segment: str) -> str:
    """``%2E`` -> ``.`` and so on for unreserved characters; other escapes upper-cased."""

    def one(match: re.Match[str]) -> str:
        ch = chr(int(match.group(1), 16))
        return ch if ch in _UNRESERVED else match.group(0).upper()

    return _PERCENT.sub(one, segment)


def _segments(path: str, *, decode: bool, split: bool) -> tuple[str, ...]:
    """The segments of ``path`` (as sent, without its leading "/") as one kind of server
    reads them: escaped unreserved characters decoded (``decode``), ``%2F``, ``%5C`` and a
    backslash taken for separators (``split``), then dot segments resolved (see the module
    docstring)."""
    out: list[str] = []
    for part in _SLASHES.split(path) if split else (path,):
        for piece in part.split("/"):
            segment = _decode_unreserved(piece) if decode else piece
            dots = segment.split(";", 1)[0]
            if dots == "..":
                if out:
                    out.pop()
            elif dots != ".":
                out.append(segment)
    return tuple(out)


def _under(url: WebhookUrl, prefix: WebhookUrl, readings: range, *, partial: bool) -> bool:
    """Whether the path of ``url`` begins with the segments of ``prefix`` in each of
    ``readings``; ``partial``: the path goes on with unknown text, which must land in a
    segment after the prefix's."""
    for index in readings:
        segments, allowed = url.readings[index], prefix.readings[index]
        if segments[: len(allowed)] != allowed or (partial and len(segments) <= len(allowed)):
            return False
    return True


class AllowList:
    """The URL prefixes webhooks may post to (``<Actions><Webhooks><Allow>``); see the
    module docstring for when a URL lies under one.

    Attributes:
        prefixes: the prefixes, normalised (:meth:`WebhookUrl.text`).

    Raises:
        ValueError: a prefix that :func:`parse_prefix` refuses (the message shows the
            prefix redacted).
    """

    def __init__(self, prefixes: Iterable[str]) -> None:
        places: list[WebhookUrl] = []
        for text in prefixes:
            prefix = parse_prefix(text)
            if isinstance(prefix, str):
                raise ValueError(f"the allowed webhook prefix {redact_url(text)!r} {prefix}")
            places.append(prefix)
        self._places = tuple(places)
        self.prefixes = tuple(place.text() for place in places)

    def allows(self, url: str) -> bool:
        """Whether ``url`` lies under one of the prefixes."""
        return self.refusal(url) is None

    def refusal(self, url: str, *, what: str = "the URL", known: int | None = None) -> str | None:
        """Why ``url`` may not be posted to, as a sentence naming it ``what``; None when
        it may.

        ``known``: only ``url[:known]`` is known, the rest is still to come (a template
        expanded at each post). Its scheme, host and port must lie in that part, and the
        rest either comes after a whole path segment under a prefix or in the query; the
        expanded URL is checked again before it is posted to.
        """
        text = url if known is None else url[:known]
        partial = False
        if known is not None:
            origin = _ORIGIN.match(text)
            if origin is None or origin.end() == len(text):
                return (
                    f"the scheme, host and port of {what} are written out: {{{{VARIABLE}}}} "
                    "references only in its path and query"
                )
            partial = "?" not in text and "#" not in text
        parsed = parse_url(text)
        if isinstance(parsed, str):
            return f"{what} {parsed}"
        same = [prefix for prefix in self._places if prefix.origin == parsed.origin]
        if any(_under(parsed, prefix, _ALL, partial=partial) for prefix in same):
            return None
        if any(_under(parsed, prefix, _LITERAL, partial=partial) for prefix in same):
            return (
                f"{what} steps out of its <Webhooks><Allow> prefix where a server decodes "
                "%2E or reads %2F, %5C or \\ as a /"
            )
        if parsed.scheme == "http":
            secure = ("https", parsed.host, 443 if parsed.port == 80 else parsed.port)
            if any(
                prefix.origin == secure and _under(parsed, prefix, _ALL, partial=partial)
                for prefix in self._places
            ):
                return (
                    f"{what} posts in plain http, and only an https:// entry of "
                    "<Webhooks><Allow> covers it: add an http:// entry to allow plain http"
                )
        allowed = ", ".join(self.prefixes) or "none"
        return f"{redact_url(url)!r} is under no <Webhooks><Allow> prefix (allowed: {allowed})"

    def __bool__(self) -> bool:
        return bool(self._places)

    def __repr__(self) -> str:
        return f"AllowList({list(self.prefixes)!r})"


def parse_prefix(text: str) -> WebhookUrl | str:
    """The allowed prefix ``text`` as compared (a trailing "/" dropped from its readings),
    or why it cannot be one: the end of a sentence whose subject is the prefix."""
    if "?" in text or "#" in text:
        return "has a query or a fragment: a prefix ends with its path"
    prefix = parse_url(text)
    if isinstance(prefix, str):
        return prefix
    readings = tuple(r[:-1] if r and r[-1] == "" else r for r in prefix.readings)
    return WebhookUrl(prefix.scheme, prefix.host, prefix.port, prefix.path, readings)


def redact_url(url: str) -> str:
    """``url`` as it may be shown: its query cut to ``?…``, its fragment and userinfo
    dropped, the rest as written."""
    text, _, _ = url.partition("#")
    text, mark, _ = text.partition("?")
    scheme, slashes, rest = text.partition("://")
    if slashes:
        authority, slash, path = rest.partition("/")
        text = f"{scheme}{slashes}{authority.rpartition('@')[2]}{slash}{path}"
    return text + ("?…" if mark else "")
