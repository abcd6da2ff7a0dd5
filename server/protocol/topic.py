"""Topic names: when a name is a regular expression, and how it is compiled.

A topic is a regular expression when it contains one of ``^ $ * + ? { } [ ] \\ | ( )``
(the AMPS rule, minus ``.`` so that dotted names such as ``md.ibm`` or ``orders.eu`` stay
exact topics). Regex topics match with ``re.search`` semantics (anchor with ``^`` / ``$``
for whole names), in linear time: a client's pattern is compiled by server/regex.py (RE2),
which refuses what it cannot match in linear time (backreferences, lookarounds) and names
the construct.

The same line is drawn in three places that must agree: a subscription topic (the router
indexes exact topics in a dict and regexes in a list), a publish (a regex topic is refused)
and a ``TransactionLog/Topic`` rule of the configuration. This module is the one definition
all of them use.
"""

from __future__ import annotations

from typing import Final

from spool.server.protocol.errors import BadRegexTopic
from spool.server.regex import Regex, RegexRefused, compile_regex

__all__ = ["REGEX_METACHARACTERS", "compile_topic", "is_regex_topic"]

#: Characters that make a topic name a regular expression. ``.`` is deliberately not one.
REGEX_METACHARACTERS: Final[frozenset[str]] = frozenset("^$*+?{}[]\\|()")


def is_regex_topic(topic: str) -> bool:
    """Whether a topic name is a regular expression (contains a regex metacharacter).

    ``frozenset.isdisjoint`` walks the name in C: this runs on the first publish to every
    topic and on every subscribe, so it is kept cheaper than a generator over the name.
    """
    return not REGEX_METACHARACTERS.isdisjoint(topic)


def compile_topic(topic: str) -> Regex:
    """Compile a regex topic.

    Raises:
        BadRegexTopic: the pattern is refused (the detail says why, naming a construct
            RE2 does not support).
    """
    try:
        return compile_regex(topic)
    except RegexRefused as exc:
        shown = topic if len(topic) <= 200 else topic[:200] + "..."
        raise BadRegexTopic(f"{shown!r}: {exc.reason}") from None
