"""The publisher table recovery rebuilds from ``clients.ack`` and index summaries."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from spool.server.txlog.index.answers import PublisherSummary
from spool.server.txlog.publishers.clientsack import (
    encode_clients_ack,
    parse_clients_ack,
    rebuild_publishers,
)


@dataclass
class FakeIndex:
    """A journal's index as far as the publisher table is concerned."""

    last_seq: int
    summaries: list[PublisherSummary]
    reads: int = 0

    def publishers(self) -> Iterator[PublisherSummary]:
        self.reads += 1
        yield from self.summaries


def journals() -> list[FakeIndex]:
    """Two journals (seqs 1..10 and 11..20); publisher 7 in both, 8 only in the first."""
    return [
        FakeIndex(10, [PublisherSummary(7, 1, 5, 9, 5), PublisherSummary(8, 1, 3, 10, 3)]),
        FakeIndex(20, [PublisherSummary(7, 6, 9, 18, 4)]),
    ]


def test_the_file_round_trips_and_damage_is_refused() -> None:
    data = encode_clients_ack(20, {7: (9, 18), 8: (3, 10)})
    assert parse_clients_ack(data) == (20, {7: (9, 18), 8: (3, 10)})
    assert parse_clients_ack(data[:-1]) is None
    assert parse_clients_ack(bytes([data[0] ^ 1]) + data[1:]) is None
    assert parse_clients_ack(data[:20] + bytes([data[20] ^ 1]) + data[21:]) is None


def test_a_file_covering_the_log_is_used_and_no_index_is_read() -> None:
    indexes = journals()
    # 99 was only in a journal removed since: the file remembers it
    data = encode_clients_ack(20, {7: (9, 18), 8: (3, 10), 99: (4, 0)})
    table, use = rebuild_publishers(data, indexes)
    assert use == "used"
    assert table == {7: (9, 18), 8: (3, 10), 99: (4, 0)}
    assert [j.reads for j in indexes] == [0, 0]


def test_a_file_behind_the_log_is_completed_from_the_journals_it_does_not_cover() -> None:
    indexes = journals()
    table, use = rebuild_publishers(encode_clients_ack(10, {7: (5, 9), 8: (3, 10)}), indexes)
    assert use == "partial"
    assert table == {7: (9, 18), 8: (3, 10)}
    assert [j.reads for j in indexes] == [0, 1]


def test_a_file_ahead_of_a_cut_log_drops_what_was_cut() -> None:
    indexes = journals()[:1]  # recovery cut the second journal
    table, use = rebuild_publishers(encode_clients_ack(20, {7: (9, 18), 8: (3, 10)}), indexes)
    assert use == "partial"
    assert table == {7: (5, 9), 8: (3, 10)}


def test_without_a_usable_file_every_journal_is_read() -> None:
    for data in (None, b"garbage"):
        table, use = rebuild_publishers(data, journals())
        assert use == "rebuilt"
        assert table == {7: (9, 18), 8: (3, 10)}
    assert rebuild_publishers(None, []) == ({}, "rebuilt")
