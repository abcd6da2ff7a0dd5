"""The link's sync notice: the source tells its destination the effective sync type."""

from __future__ import annotations

import pytest

from spool.server.replication.errors import ReplicationProtocolError
from spool.server.replication.frames import FrameParser, SyncNotice, encode
from spool.server.replication.protocol import LinkClosed, LinkProtocol, Side, SyncNoticed
from tests.unit.replication.test_protocol import _hello, _welcome


def _streaming() -> tuple[LinkProtocol, LinkProtocol]:
    src, dst = LinkProtocol(Side.SOURCE), LinkProtocol(Side.DESTINATION)
    _hello(src)
    dst.receive_data(src.data_to_send())
    dst.events_received()
    _welcome(dst)
    src.receive_data(dst.data_to_send())
    src.events_received()
    src.start_stream(1, 0)
    return src, dst


@pytest.mark.parametrize("effective", ["sync", "async", "upgrading"])
def test_round_trip(effective: str) -> None:
    assert FrameParser().feed(encode(SyncNotice(effective))) == [SyncNotice(effective)]


def test_an_unknown_sync_type_is_a_protocol_error() -> None:
    with pytest.raises(ReplicationProtocolError, match="unknown sync type 'maybe'"):
        FrameParser().feed(encode(SyncNotice("maybe")))


def test_the_destination_hears_each_change_while_streaming() -> None:
    src, dst = _streaming()
    src.notify_sync("sync")
    src.notify_sync("async")
    dst.receive_data(src.data_to_send())
    events = dst.events_received()
    assert [e for e in events if isinstance(e, SyncNoticed)] == [
        SyncNoticed("sync"), SyncNoticed("async"),
    ]  # fmt: skip


def test_not_before_the_stream() -> None:
    src = LinkProtocol(Side.SOURCE)
    with pytest.raises(ReplicationProtocolError):
        src.notify_sync("sync")
    dst = LinkProtocol(Side.DESTINATION)
    _hello_src = LinkProtocol(Side.SOURCE)
    _hello(_hello_src)
    dst.receive_data(_hello_src.data_to_send() + encode(SyncNotice("sync")))
    assert isinstance(dst.events_received()[-1], LinkClosed)
