"""What a SOW and a queue rebuilt from the log make of a delayed message, and what the
live fan-out does with its records.

A delayed message is in the log twice: its scheduled record where it was published and
its due record where it fell due. Only the due record is a message (``MESSAGE_KINDS``):
a SOW rebuilt from the log puts its key at the due record (a publish of that key in
between is overwritten by it), a queue rebuilt from the log holds it at the due record's
seq, and the fan-out delivers a due run and never a scheduled one.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from spool.server.clock import VirtualClock
from spool.server.config import SowTopicConfig
from spool.server.config.model import QueueConfig
from spool.server.queues.stage import QueueRuntime, QueueStage
from spool.server.sow.history import LogApplier
from spool.server.sow.keys import KeySpec
from spool.server.sow.memory import MemoryStore
from spool.server.txlog import TransactionLog
from spool.server.txlog.format.batch import RecordBatch
from spool.server.txlog.format.record import MESSAGE_KINDS, RecordKind, schedule_field
from tests.unit.txlog.helpers import INSTANCE, config, read_all

PUB = 101
TOPIC = "orders"


async def _log(tmp: Path) -> tuple[TransactionLog, dict[str, int], list[RecordBatch]]:
    """A log with k1 published (P|1), then a delayed update of k1 (P|2), then k1 and k2
    published (P|3, P|4), then P|2's due record: its seqs by name, and its batches as
    start-up reads them."""
    log = TransactionLog(config(tmp), INSTANCE)
    await log.open()
    seqs: dict[str, int] = {}

    def publish(name: str, pub_seq: int, key: str, kind: RecordKind = RecordKind.PUBLISH,
                field: str | None = None) -> None:  # fmt: skip
        assert log.append_many(
            topic=TOPIC, message_type="json", pub_hash=PUB, pub_seqs=[pub_seq],
            bodies=[b'{"id":"%s","v":%d}' % (key.encode(), pub_seq)],
            sow_keys=[field] if field is not None else None, kind=kind,
        ) == 1  # fmt: skip
        seqs[name] = log.last_seq

    publish("p1", 1, "k1")
    publish("p2 scheduled", 2, "k1", RecordKind.SCHEDULED, schedule_field(1, ""))
    publish("p3", 3, "k1")
    publish("p4", 4, "k2")
    assert log.append_due(
        topic=TOPIC, message_type="json", pub_hash=PUB, pub_seqs=[2],
        bodies=[b'{"id":"k1","v":2}'],
    ) == 1  # fmt: skip
    seqs["p2 due"] = log.last_seq
    await log.wait_durable(log.last_seq)
    return log, seqs, await read_all(log)


def test_message_kinds_hold_the_due_record_not_the_scheduled_one() -> None:
    assert {RecordKind(k) for k in MESSAGE_KINDS} == {
        RecordKind.PUBLISH, RecordKind.DELTA_PUBLISH, RecordKind.DUE,
    }  # fmt: skip


@pytest.mark.parametrize("whole", [True, False], ids=["batches", "record-by-record"])
def test_a_sow_rebuilt_from_the_log_puts_the_key_at_the_due_record(
    tmp_path: Path, whole: bool
) -> None:
    async def body() -> None:
        log, seqs, batches = await _log(tmp_path)
        try:
            rule = SowTopicConfig(TOPIC, keys=("/id",))
            store = MemoryStore(TOPIC)
            applier = LogApplier(
                lambda t: rule if t == TOPIC else None,
                lambda r: KeySpec(r.name, r.keys),
                lambda t, r: store,
            )
            for batch in batches:
                if whole:
                    applier.apply(batch)
                else:
                    for rec in batch:
                        applier.apply(RecordBatch.from_records([rec]))
            k1, k2 = store.get("k1"), store.get("k2")
            assert k1 is not None and k2 is not None
            # the due record came after p3: its body is the one kept, at its seq
            assert (k1.seq, k1.pub_seq, k1.body) == (seqs["p2 due"], 2, b'{"id":"k1","v":2}')
            assert k2.seq == seqs["p4"]
            assert applier.counts.puts == 4  # p1, p3, p4 and the due record
        finally:
            await log.close()

    asyncio.run(body())


def test_a_queue_rebuilt_from_the_log_holds_the_due_message_at_its_seq(
    tmp_path: Path,
) -> None:
    async def body() -> None:
        log, seqs, batches = await _log(tmp_path)
        try:
            cfg = QueueConfig(name="work", underlying=TOPIC)
            q = QueueRuntime.build(cfg, VirtualClock(), "a")
            stage = QueueStage([q], lambda _: None)
            for batch in batches:
                stage.recover(batch)
            stage.recovered()
            held = sorted((m.seq, m.bookmark) for m in q.machine.messages())
            assert held == [
                (seqs["p1"], f"{PUB}|1|"), (seqs["p3"], f"{PUB}|3|"),
                (seqs["p4"], f"{PUB}|4|"), (seqs["p2 due"], f"{PUB}|2|"),
            ]  # fmt: skip
            assert stage.recovered_messages == 4
        finally:
            await log.close()

    asyncio.run(body())
