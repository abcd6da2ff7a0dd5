from spool.server.protocol.message import Message

def take_publish_run(
    msgs: list[Message], start: int, ack_cache: dict[str, frozenset[str]], scan_type: type
) -> object | None: ...
