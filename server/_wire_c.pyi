from collections.abc import Sequence

def bookmarked(
    head: bytes,
    hashes: Sequence[int] | None,
    pub_hash: int,
    pub_seqs: Sequence[int],
    tail: bytes,
    bodies: Sequence[bytes],
    part: Sequence[int] | range,
) -> bytes | None: ...
def plain(head: bytes, bodies: Sequence[bytes], part: Sequence[int] | range) -> bytes | None: ...
