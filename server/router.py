"""The subscription index and fan-out lookup.

Live (non-bookmark) subscriptions are indexed two ways: by exact topic in a dict, and, for
regular-expression topics, in a list that is searched once per *topic* and cached (most
brokers see a few thousand distinct topics and millions of messages, so the cache turns a
per-message regex scan into a dict lookup). Any change to the regex set clears the cache.

Which topics are regular expressions is decided by :mod:`spool.server.protocol.topic`; a regex
subscription matches with ``re.search`` semantics.
"""

from __future__ import annotations

from typing import Final

from spool.server.subscription import SessionSubscription

_CACHE_LIMIT: Final = 20_000


class Router:
    """Index of live subscriptions by topic. Owned by the event loop: no locks."""

    def __init__(self) -> None:
        self._exact: dict[str, list[SessionSubscription]] = {}
        self._regex: list[SessionSubscription] = []
        self._regex_cache: dict[str, tuple[SessionSubscription, ...]] = {}

    def add(self, sub: SessionSubscription) -> None:
        if sub.pattern is None:
            self._exact.setdefault(sub.topic, []).append(sub)
        else:
            self._regex.append(sub)
            self._regex_cache.clear()

    def remove(self, sub: SessionSubscription) -> None:
        if sub.pattern is None:
            subs = self._exact.get(sub.topic)
            if subs is not None:
                try:
                    subs.remove(sub)
                except ValueError:
                    return
                if not subs:
                    del self._exact[sub.topic]
        else:
            try:
                self._regex.remove(sub)
            except ValueError:
                return
            self._regex_cache.clear()

    def match(self, topic: str) -> list[SessionSubscription]:
        """Every live subscription whose topic matches, exact ones first."""
        exact = self._exact.get(topic)
        if not self._regex:
            return exact if exact is not None else []
        regex = self._regex_cache.get(topic)
        if regex is None:
            regex = tuple(s for s in self._regex if s.pattern is not None and s.pattern.test(topic))
            if len(self._regex_cache) >= _CACHE_LIMIT:
                self._regex_cache.clear()
            self._regex_cache[topic] = regex
        if not regex:
            return exact if exact is not None else []
        if exact is None:
            return list(regex)
        return [*exact, *regex]

    def __len__(self) -> int:
        return sum(len(v) for v in self._exact.values()) + len(self._regex)
