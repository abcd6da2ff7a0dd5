from collections.abc import Callable

from spool.server.ports import SowRecord

def encode_puts(
    records: list[SowRecord], fallback: Callable[[list[SowRecord]], bytes]
) -> bytes: ...
def live_changes(
    buf: bytes, pos: int, base_seq: int
) -> tuple[dict[str, tuple[int, int]], int, tuple[int, str] | None]: ...
