"""Webhooks: the ``<Actions><Webhooks>`` element and the options of ``spool-action-do-webhook``.

A webhook posts from inside the broker's network, so where it may post is the operator's
decision, written once: ``<Webhooks><Allow>`` lists URL prefixes, and every webhook's
``Url`` must lie under one. The rule is :mod:`spool.server.config.webhookurls`, the one
the sender applies to the expanded URL before it posts; here it is applied to the text of
the option, which needs the scheme, host and port written out (``{{VARIABLE}}`` references
only in the path and the query), and its refusals become errors at the element. A plain
``http`` URL needs an ``http://`` entry (an ``https://`` entry does not cover it), and the
path must stay under the prefix however a server reads escaped dots and slashes, so
``/spool/../admin`` and ``/spool/..%2Fadmin`` are not under ``/spool/``.

Header values and the signing key are secrets: no error here quotes them, and a URL is
quoted through :func:`~spool.server.config.webhookurls.redact_url` (no query, no userinfo).

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
from typing import Final

import orjson

from spool.server.config.actions import (
    WEBHOOK_MAX_CONCURRENCY,
    WEBHOOK_MAX_RETRIES,
    WEBHOOK_SPOOL_HEADERS,
    WEBHOOK_TIMEOUT_RANGE,
    Step,
    Webhook,
    WebhooksConfig,
)
from spool.server.config.sections.actionmodules import ActionFacts, ActionScope, Options
from spool.server.config.template import Template, TemplateError
from spool.server.config.values import Context, read_duration, read_int, read_value
from spool.server.config.webhookurls import AllowList, parse_prefix
from spool.server.config.xmltree import Children, Spec, XmlNode, fail

__all__ = ["read_webhook", "read_webhooks"]

_WEBHOOKS_SPEC: Final[Spec] = {"Allow": True, "Threads": False, "QueueDepth": False}
_WEBHOOK_SPEC: Final[Spec] = {
    "Url": False, "Body": False, "ContentType": False, "Header": True, "SigningKey": False,
    "Timeout": False, "Retries": False, "Backoff": False, "Concurrency": False,
}  # fmt: skip
_HEADER_NAME: Final = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,64}")
_MEDIA_TYPE: Final = re.compile(
    r"[A-Za-z0-9!#$&^_.+-]{1,64}/[A-Za-z0-9!#$&^_.+-]{1,64}"
    r"(\s*;\s*[A-Za-z0-9_.-]+=[A-Za-z0-9_.\"-]+)*"
)
_SIGNING_KEY_MIN: Final = 16


def read_webhooks(node: XmlNode, ctx: Context) -> WebhooksConfig:
    """Read ``<Webhooks>`` (see the module docstring)."""
    kids = Children(node, _WEBHOOKS_SPEC)
    allow: list[str] = []
    for allow_node in kids.many("Allow"):
        prefix = parse_prefix(read_value(allow_node, ctx))
        if isinstance(prefix, str):
            raise fail(allow_node, f"the Allow entry {prefix}")
        text = prefix.text()
        if text in allow:
            raise fail(allow_node, f"{text!r} is allowed twice")
        allow.append(text)
    config = WebhooksConfig(tuple(allow))
    if (threads_node := kids.one("Threads")) is not None:
        config = WebhooksConfig(config.allow, read_int(threads_node, ctx, minimum=1, maximum=64))
    if (depth_node := kids.one("QueueDepth")) is not None:
        depth = read_int(depth_node, ctx, minimum=1, maximum=1_000_000)
        config = WebhooksConfig(config.allow, config.threads, depth)
    return config


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
        if name.lower() in WEBHOOK_SPOOL_HEADERS:
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
    reference = url.text.find("{{")
    known = None if reference < 0 else reference
    refusal = AllowList(facts.webhook_allow).refusal(url.text, what="the Url", known=known)
    if refusal is not None:
        raise fail(url_node, refusal)
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
        low, high = WEBHOOK_TIMEOUT_RANGE
        timeout = read_duration(node, ctx, minimum=low, maximum=high)
    if (node := opts.one("Retries")) is not None:
        retries = read_int(node, ctx, minimum=0, maximum=WEBHOOK_MAX_RETRIES)
    if (node := opts.one("Backoff")) is not None:
        backoff = read_duration(node, ctx, minimum=0.1, maximum=60.0)
    if (node := opts.one("Concurrency")) is not None:
        concurrency = read_int(node, ctx, minimum=1, maximum=WEBHOOK_MAX_CONCURRENCY)
    return Webhook(
        url, body, content_type, headers, signing_key, timeout, retries, backoff, concurrency,
        where=element.path,
    )  # fmt: skip
