def crc32c(data: bytes) -> int: ...
def hardware_crc() -> bool: ...
def encode_run(
    first_seq: int,
    timestamp_us: int,
    pub_hash: int,
    pub_seqs: list[int],
    topic: str,
    message_type: str,
    bodies: list[bytes],
    path_bytes: bytes = b"",
    npath: int = 0,
) -> list[bytes]: ...
