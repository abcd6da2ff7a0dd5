"""Webhooks: the ``<Actions><Webhooks>`` element and the options of ``spool-action-do-webhook``.

A webhook posts from inside the broker's network, so where it may post is the operator's
decision, written once: ``<Webhooks><Allow>`` lists URL prefixes, and every webhook's
``Url`` must lie under one. The check is made here, on the text of the option, and needs
the scheme, host and port written out (``{{VARIABLE}}`` references only in the path and
the query); the runtime checks the expanded URL again. A plain ``http`` URL needs an
``http://`` entry (an ``https://`` entry does not cover it). Dot segments are resolved and
encoded slashes refused before the comparison, so ``/spool/../admin`` is not under
``/spool/``.

Header values and the signing key are secrets: no error here quotes them, and a URL is
quoted without its query.

Shape::

    <Actions>
      <Webhooks>
        <Allow>https://hooks.example.com/spool/</Allow>     repeatable
        <Threads>4</Threads>                                  posting threads, 1..64
        <QueueDepth>10000</QueueDepth>                        posts waiting, at most
      </Webhooks>
      ...
"""

from __future__ import annotations

import re
from typing import Final, NamedTuple

import orjson

from spool.server.config.actions import Step, Webhook, WebhooksConfig, without_query
from spool.server.config.sections.actionmodules import ActionFacts, ActionScope, Options
from spool.server.config.template import Template, TemplateError
from spool.server.config.values import Context, read_duration, read_int, read_value
from spool.server.config.xmltree import Children, Spec, XmlNode, fail

__all__ = ["read_webhook", "read_webhooks"]

_WEBHOOKS_SPEC: Final[Spec] = {"Allow": True, "Threads": False, "QueueDepth": False}
_WEBHOOK_SPEC: Final[Spec] = {
    "Url": False, "Body": False, "ContentType": False, "Header": True, "SigningKey": False,
    "Timeout": False, "Retries": False, "Backoff": False, "Concurrency": False,
}  # fmt: skip
_ORIGIN: Final = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://([^/?#]*)")
_DEFAULT_PORTS: Final = {"http": 80, "https": 443}
_HEADER_NAME: Final = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,64}")
#: headers each post carries already (from other options, or always)
_SET_BY_SPOOL: Final = frozenset({
    "content-type", "content-length", "host", "user-agent", "transfer-encoding",
    "connection", "spool-event-id", "spool-action", "spool-signature",
})  # fmt: skip
_MEDIA_TYPE: Final = re.compile(
    r"[A-Za-z0-9!#$&^_.+-]{1,64}/[A-Za-z0-9!#$&^_.+-]{1,64}"
    r"(\s*;\s*[A-Za-z0-9_.-]+=[A-Za-z0-9_.\"-]+)*"
)
_SIGNING_KEY_MIN: Final = 16


class _Target(NamedTuple):
    """An absolute URL's scheme, host and port (lower case, the port always given), and
    its path with dot segments resolved."""

    scheme: str
    host: str
    port: int
    path: str

    def prefix(self) -> str:
        port = "" if _DEFAULT_PORTS[self.scheme] == self.port else f":{self.port}"
        return f"{self.scheme}://{self.host}{port}{self.path}"

    def under(self, allow: _Target, *, partial: bool) -> bool:
        """Whether this URL lies under the prefix ``allow`` (``partial``: the path goes on
        with a template, so it only begins with this one)."""
        if self[:3] != allow[:3]:
            return False
        if allow.path.endswith("/") or self.path.startswith(allow.path + "/"):
            return self.path.startswith(allow.path)
        return self.path == allow.path and not partial


def _target(node: XmlNode, text: str, what: str) -> _Target:
    """Parse the absolute ``http``/``https`` URL (or the beginning of one) ``text``."""
    match = _ORIGIN.match(text)
    if match is None:
        raise fail(node, f"{what} is not an absolute http:// or https:// URL")
    scheme = match.group(1).lower()
    if scheme not in _DEFAULT_PORTS:
        raise fail(node, f"{what} is a {scheme}:// URL: webhooks post over http or https")
    authority = match.group(2)
    if "@" in authority:
        raise fail(node, f"{what} holds credentials (user@host): send them in a <Header>")
    if authority.startswith("["):  # an IPv6 address
        end = authority.find("]")
        host, port_text = authority[: end + 1], authority[end + 1 :]
        if end < 0 or (port_text and not port_text.startswith(":")):
            raise fail(node, f"{what} has a malformed host")
        port_text = port_text[1:]
    else:
        host, _, port_text = authority.partition(":")
    port = _DEFAULT_PORTS[scheme]
    if port_text:
        if not (port_text.isascii() and port_text.isdigit() and 0 < int(port_text) < 65536):
            raise fail(node, f"{what} has a port that is not a number from 1 to 65535")
        port = int(port_text)
    if not host:
        raise fail(node, f"{what} names no host")
    path = text[match.end() :].partition("?")[0].partition("#")[0]
    return _Target(scheme, host.lower(), port, _resolved(node, path, what))


def _resolved(node: XmlNode, path: str, what: str) -> str:
    """``path`` with its dot segments (``.``, ``..``, also percent-encoded) resolved."""
    lowered = path.lower()
    if "%2f" in lowered or "%5c" in lowered or "\\" in path:
        raise fail(node, f"{what} has an encoded / or a \\ in its path, which could step out "
                   "of an Allow prefix")  # fmt: skip
    path = re.sub("%2e", ".", path, flags=re.IGNORECASE) or "/"
    segments: list[str] = []
    for segment in path.split("/")[1:]:
        if segment == "..":
            if segments:
                segments.pop()
        elif segment != ".":
            segments.append(segment)
    resolved = "/" + "/".join(segments)
    if path.endswith(("/.", "/..")) and not resolved.endswith("/"):
        resolved += "/"
    return resolved


def read_webhooks(node: XmlNode, ctx: Context) -> WebhooksConfig:
    """Read ``<Webhooks>`` (see the module docstring)."""
    kids = Children(node, _WEBHOOKS_SPEC)
    allow: list[str] = []
    for allow_node in kids.many("Allow"):
        text = read_value(allow_node, ctx)
        if "?" in text or "#" in text:
            raise fail(allow_node, "an Allow entry is a URL prefix, without a query or a fragment")
        prefix = _target(allow_node, text, "the Allow entry").prefix()
        if prefix in allow:
            raise fail(allow_node, f"{prefix!r} is allowed twice")
        allow.append(prefix)
    config = WebhooksConfig(tuple(allow))
    if (threads_node := kids.one("Threads")) is not None:
        config = WebhooksConfig(config.allow, read_int(threads_node, ctx, minimum=1, maximum=64))
    if (depth_node := kids.one("QueueDepth")) is not None:
        depth = read_int(depth_node, ctx, minimum=1, maximum=1_000_000)
        config = WebhooksConfig(config.allow, config.threads, depth)
    return config


def _check_url(node: XmlNode, text: str, allow: tuple[str, ...]) -> None:
    """Refuse a ``Url`` whose destination is not written out, or not allowed."""
    origin = _ORIGIN.match(text)
    first_reference = text.find("{{")
    if first_reference >= 0 and (origin is None or first_reference < origin.end()):
        raise fail(node, "the scheme, host and port of a webhook Url are written out: "
                   "{{VARIABLE}} references only in its path and query")  # fmt: skip
    constant = text if first_reference < 0 else text[:first_reference]
    target = _target(node, constant, "the Url")
    partial = first_reference >= 0 and "?" not in constant and "#" not in constant
    allowed = [_target(node, prefix, "the Allow entry") for prefix in allow]
    if any(target.under(entry, partial=partial) for entry in allowed):
        return
    if target.scheme == "http" and any(
        target._replace(scheme="https", port=443 if target.port == 80 else target.port).under(
            entry, partial=partial
        )
        for entry in allowed
    ):
        raise fail(node, "the Url posts in plain http, and only an https:// entry of "
                   "<Webhooks><Allow> covers it: add an http:// entry to allow plain http")  # fmt: skip
    raise fail(node, f"{without_query(text)!r} is under no <Webhooks><Allow> prefix "
               f"(allowed: {', '.join(allow)})")  # fmt: skip


def _headers(opts: Options, scope: ActionScope, ctx: Context) -> tuple[tuple[str, Template], ...]:
    """The ``Header`` options (``Name: value``); a value is a secret, never quoted."""
    headers: list[tuple[str, Template]] = []
    seen: set[str] = set()
    for node in opts.many("Header"):
        name, colon, value = read_value(node, ctx).partition(":")
        name, value = name.strip(), value.strip()
        if (
            not colon or not _HEADER_NAME.fullmatch(name) or not value
            or any(ord(ch) < 32 or ord(ch) == 127 for ch in value)
        ):  # fmt: skip
            raise fail(node, "a Header is 'Name: value' (a name of letters, digits and "
                       "-, a value without control characters)")  # fmt: skip
        if name.lower() in _SET_BY_SPOOL:
            raise fail(node, f"the header {name} is set by Spool (ContentType sets "
                       "Content-Type; SigningKey, Spool-Signature)")  # fmt: skip
        if name.lower() in seen:
            raise fail(node, f"the header {name} is given twice")
        seen.add(name.lower())
        try:
            Template.parse(value)
        except TemplateError:  # its message would quote the value
            raise fail(
                node, f"the header {name} has a malformed {{{{VARIABLE}}}} reference"
            ) from None
        headers.append((name, scope.parse(node, value)))
    return tuple(headers)


def read_webhook(
    element: XmlNode, options: XmlNode | None, ctx: Context, facts: ActionFacts, scope: ActionScope
) -> Step:
    """Read a ``spool-action-do-webhook`` (see the module docstring)."""
    name = "spool-action-do-webhook"
    if not facts.webhook_allow:
        raise fail(element, f"{name} posts only under the URL prefixes of <Actions><Webhooks>"
                   "<Allow>, and none is given; add the prefixes webhooks may post to")  # fmt: skip
    opts = Options(element, options, _WEBHOOK_SPEC, name)
    url_node = opts.require("Url", name, " (where it posts, under a <Webhooks><Allow> prefix)")
    url = scope.template(url_node, ctx)
    _check_url(url_node, url.text, facts.webhook_allow)
    content_type = "application/json"
    if (type_node := opts.one("ContentType")) is not None:
        content_type = read_value(type_node, ctx)
        if not _MEDIA_TYPE.fullmatch(content_type):
            raise fail(type_node, f"{content_type!r} is not a media type (type/subtype, e.g. "
                       "application/json)")  # fmt: skip
    body_node = opts.require("Body", name, " (what it posts)")
    body = scope.template(body_node, ctx)
    if body.constant and "json" in content_type.lower():
        try:
            orjson.loads(body.text)
        except orjson.JSONDecodeError as exc:
            raise fail(body_node, f"the Body is not JSON ({content_type}): {exc}") from None
    headers = _headers(opts, scope, ctx)
    signing_key: str | None = None
    if (key_node := opts.one("SigningKey")) is not None:
        signing_key = read_value(key_node, ctx)
        if len(signing_key) < _SIGNING_KEY_MIN:
            raise fail(key_node, f"a SigningKey has at least {_SIGNING_KEY_MIN} characters")
    timeout, retries, backoff, concurrency = 5.0, 3, 1.0, 1
    if (node := opts.one("Timeout")) is not None:
        timeout = read_duration(node, ctx, minimum=0.1, maximum=60.0)
    if (node := opts.one("Retries")) is not None:
        retries = read_int(node, ctx, minimum=0, maximum=10)
    if (node := opts.one("Backoff")) is not None:
        backoff = read_duration(node, ctx, minimum=0.1, maximum=60.0)
    if (node := opts.one("Concurrency")) is not None:
        concurrency = read_int(node, ctx, minimum=1, maximum=16)
    return Webhook(
        url, body, content_type, headers, signing_key, timeout, retries, backoff, concurrency,
        where=element.path,
    )  # fmt: skip
