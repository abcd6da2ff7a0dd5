from spool.server.txlog.format.codec import Special

def decode_columns(
    buf: bytes,
    pos: int,
    end: int,
    expect_seq: int,
    max_count: int,
    max_bytes: int,
    upto_seq: int | None,
    t_start: int,
    t_stop: int,
) -> (
    tuple[
        list[str],
        list[bytes],
        list[int],
        list[int],
        list[int],
        set[int],
        dict[int, Special],
        int,
        int,
        bytearray,
    ]
    | None
): ...
