"""An instance whose log holds damage no check found yet still starts.

A flipped byte in the middle of a finished journal passes the checks at open (they read
the edges; the scrub reads the rest later). When the start-up rebuild of SOW state from
the log meets it first, the journal is checked there and then, the damaged record is
fenced and skipped (an error event names it; the replication peers repair it), and the
instance serves everything else.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson

from spool.server.txlog.format.codec import HEADER, scan
from tests.support.engine import EngineHarness
from tests.support.server import config_xml, sow_topic

XML_KW = {
    "sow": sow_topic("t", "/k", durability="transient"),
    "journal_size": "1MB",
    "txlog_extra": "<PreallocatedJournalFiles>1</PreallocatedJournalFiles>",
}
PAD = "x" * 1000
COUNT = 3000  # three 1 MB journals


def _journals(data: Path) -> list[Path]:
    return sorted(p for p in (data / "journal").iterdir() if p.name.endswith(".journal"))


def _middle_record(path: Path) -> tuple[int, int]:
    """``(offset, seq)`` of a record in the middle of a journal (not in an edge block)."""
    raw = path.read_bytes()
    base = HEADER.unpack_from(raw, 0)[4]
    rows = scan(raw, 0, len(raw), base, final=True).rows
    i = len(rows) // 2
    return rows[i][0], base + i


def test_damage_met_by_the_start_up_rebuild_is_fenced_and_the_instance_starts(
    tmp_path: Path,
) -> None:
    xml = config_xml(tmp_path / "data", **XML_KW)

    async def first_life() -> None:
        async with EngineHarness(tmp_path, xml=xml) as h:
            p = await h.logon("pub")
            p.send(
                *(
                    ({"c": "publish", "t": "t"}, orjson.dumps({"k": i, "pad": PAD}))
                    for i in range(COUNT)
                )
            )
            await h.settle()
            await h.commit()

    asyncio.run(first_life())
    journal = _journals(tmp_path / "data")[1]
    offset, seq = _middle_record(journal)
    raw = bytearray(journal.read_bytes())
    raw[offset + 40] ^= 0xFF  # inside the record: its CRC no longer matches
    journal.write_bytes(bytes(raw))

    async def second_life() -> None:
        async with EngineHarness(tmp_path, xml=xml) as h:
            assert h.broker.ready
            txlog = h.broker.txlog
            assert txlog is not None
            assert [(f.first_seq, f.last_seq) for f in txlog.fences] == [(seq, seq)]
            skipped = [
                e for e in h.broker.events.recent(500) if e["event"] == "recovery_skipped_fence"
            ]
            assert [(e["first_seq"], e["last_seq"]) for e in skipped] == [(seq, seq)]
            # the SOW was rebuilt from every other message (one key each)
            assert h.broker.sow.keys("t")["records"] == COUNT - 1

    asyncio.run(second_life())
