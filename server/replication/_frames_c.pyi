from collections.abc import Callable

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
