"""Event topics: the broker's own life as messages clients subscribe to (docs/protocol.md
"Event topics"). ``messages`` says what each carries, ``budget`` how many may go,
``service`` hears the happenings and publishes them."""

from spool.server.eventtopics.messages import EVENT_TOPICS, FIELDS
from spool.server.eventtopics.service import EventTopics

__all__ = ["EVENT_TOPICS", "FIELDS", "EventTopics"]
