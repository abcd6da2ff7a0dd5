"""Topic names and topic regular expressions (the one definition, shared by config and router).

A topic is a regular expression when it contains one of ``^$*+?()[]{}|\\`` (the AMPS rule,
minus ``.`` so dotted names like ``md.ibm`` stay exact topics); it matches with
``re.search`` semantics.
"""

from __future__ import annotations

import re
from typing import Final

from server.protocol.errors import BadRegexTopic

_REGEX_CHARS: Final = frozenset("^$*+?()[]{}|\\")


def is_regex_topic(topic: str) -> bool:
    """Whether a subscription topic is a regular expression."""
    return not _REGEX_CHARS.isdisjoint(topic)


def compile_topic(topic: str) -> re.Pattern[str]:
    """Compile a regex topic, or raise ``bad regex topic`` with the reason."""
    try:
        return re.compile(topic)
    except re.error as exc:
        raise BadRegexTopic(f"{topic!r}: {exc}") from exc
