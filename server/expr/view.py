"""The message as filters see it: one view per message, shared by every subscription.

The engine builds one :class:`MessageView` when it fans a message out and hands the same
object to every filter that looks at it, so the JSON body is parsed at most once per
message however many subscriptions filter it, and not at all when no filter reads the body
(``TOPIC() = 'x'``, ``CLIENT_NAME() = 'feed'``) or when no subscription has a filter.

Why parse whole bodies with orjson instead of scanning for the one field a filter reads:
orjson parses a 1 KB body in about 2.5 us in C, and a 750 KB one in about 9 ms; merely
tokenising that 750 KB body with a compiled regular expression (strings and brackets, the
minimum a correct "is this key at the top level?" scanner needs) takes about 30 ms in
Python. A scanner would also run once per *filter* where the parse runs once per
*message*. The lazy, shared parse is the fast path.

Thread-safety: a view is owned by the thread that made it (the event loop). The count of
body parses (:meth:`MessageView.parse_count`) is for tests and benchmarks, not for
correctness. It lives in a module-level cell, not a class attribute: writing a class
attribute per parse would bump the class's version tag and throw away every cached
attribute lookup on views (and those lookups are much of a filtered replay).
"""

from __future__ import annotations

import orjson

from spool.server.expr.values import Value

#: body parses so far (see the module docstring for why not a class attribute)
_PARSES: list[int] = [0]


class MessageView:
    """One message: topic, body and metadata, with the body parsed lazily and only once.

    A body that is not valid JSON, or whose top level is not an object, behaves as a
    document with no fields: every identifier is NULL. Parsing never raises.

    Attributes:
        topic: the topic the message was published to (``TOPIC()``).
        body: the raw body bytes (never modified).
        bookmark: the message's bookmark, ``""`` if it has none (``BOOKMARK()``).
        timestamp: when the message was recorded, ISO-8601, ``""`` if unknown
            (``TIMESTAMP()``).
        client_name: the name of the client that *published* the message
            (``CLIENT_NAME()``): a subscriber's filter sees the publisher, not itself.
    """

    __slots__ = ("_doc", "body", "bookmark", "client_name", "timestamp", "topic")

    @staticmethod
    def parse_count() -> int:
        """Body parses so far, process-wide (tests prove "parsed at most once")."""
        return _PARSES[0]

    def __init__(
        self,
        topic: str,
        body: bytes,
        *,
        bookmark: str = "",
        timestamp: str = "",
        client_name: str = "",
    ) -> None:
        self.topic = topic
        self.body = body
        self.bookmark = bookmark
        self.timestamp = timestamp
        self.client_name = client_name
        self._doc: dict[str, Value] | None = None

    @classmethod
    def of_document(
        cls,
        topic: str,
        document: dict[str, Value],
        *,
        body: bytes = b"",
        bookmark: str = "",
        timestamp: str = "",
        client_name: str = "",
    ) -> MessageView:
        """A view over a document that is already parsed (SOW records, Spark rows, tests).

        ``body`` is kept as given and is not parsed; the view reads ``document``.
        """
        view = cls(topic, body, bookmark=bookmark, timestamp=timestamp, client_name=client_name)
        view._doc = document if type(document) is dict else {}
        return view

    @property
    def document(self) -> dict[str, Value]:
        """The parsed body (``{}`` for a body that is not a JSON object); parses on first use."""
        doc = self._doc
        if doc is None:
            doc = self.load()
        return doc

    @property
    def parsed(self) -> bool:
        """Whether the body has been parsed (or a document was supplied)."""
        return self._doc is not None

    def load(self) -> dict[str, Value]:
        """Parse the body now (the filters call this on first field access)."""
        doc = self._doc
        if doc is not None:
            return doc
        _PARSES[0] += 1
        try:
            parsed = orjson.loads(self.body)
        except (orjson.JSONDecodeError, TypeError):
            parsed = {}
        if type(parsed) is not dict:
            parsed = {}
        self._doc = parsed
        return parsed

    def __repr__(self) -> str:
        state = "parsed" if self._doc is not None else "unparsed"
        return f"MessageView(topic={self.topic!r}, {len(self.body)} bytes, {state})"
