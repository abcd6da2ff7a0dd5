from collections.abc import Callable, Sequence

def decode_run_fields(
    payload: bytes,
    count: int,
    strings: Callable[[bytes, int, int, str], tuple[list[str], int]],
) -> (
    list[
        tuple[
            str,
            int,
            int,
            tuple[str, ...],
            list[int],
            list[int],
            list[int],
            list[bytes],
            list[str] | None,
            list[str] | None,
        ]
    ]
    | None
): ...
def pack_fixed(
    source_seqs: Sequence[int],
    timestamps_us: Sequence[int],
    pub_seqs: Sequence[int],
    bodies: Sequence[bytes],
) -> bytes | None: ...
