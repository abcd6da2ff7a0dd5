"""The journal record: its values, its codec and bulk decoding (no I/O).

:mod:`.record` holds the record values (``Record``, kinds, flags, keys); :mod:`.codec`
is the one definition of the on-disk record (encode, decode, scan); :mod:`.batch`
decodes records in bulk for replay. ``_codec_c`` and ``_batch_c`` are their compiled
twins (built by setup.py; ``crc32c.h`` is the hardware CRC-32C they share with the SOW's
file format).
"""
