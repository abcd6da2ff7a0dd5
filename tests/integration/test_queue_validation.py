"""Replicated queue definitions compared between two real ``spool serve`` processes when
their links connect: a mismatched queue Filter is refused with the reason and the fix on
both sides (the link stays down, the admin API shows it), and an archive copy that takes
only the underlying topic connects without the queue."""

from __future__ import annotations

from pathlib import Path

from tests.support.replication import Cluster, destination
from tests.support.wait import wait_until


def _queue(flt: str) -> str:
    return (
        "<Queue><Name>work</Name><MessageType>json</MessageType>"
        f"<UnderlyingTopic>work-in</UnderlyingTopic><Filter>{flt}</Filter></Queue>"
    )


def test_a_mismatched_queue_filter_is_refused_with_its_reason(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, ["a", "b"])
    for name, other, flt in (("a", "b", "/kind = 'job'"), ("b", "a", "/kind = 'any'")):
        cluster.add(
            name,
            destinations=[destination(other, [cluster.address(other)], passthrough=(".*",))],
            topics=("work-in", "work"),
            sow=_queue(flt),
        )
    cluster.start()
    try:
        link = wait_until(
            lambda: (d := cluster.destination("a", "b"))["validation_failures"] and d, 30,
            message="a's link to b refused",
        )  # fmt: skip
        assert not link["connected"]
        (failure,) = [f for f in link["validation_failures"] if f.startswith("[queue]")]
        assert "queue 'work' has Filter \"/kind = 'job'\" on 'a' and \"/kind = 'any'\" on 'b'" in (
            failure
        )
        assert "fix: give queue 'work' the same <Filter> on both instances" in failure
        # the destination logged the refusal too, with the same reason
        wait_until(lambda: "the copies would disagree on which messages" in
                   cluster.procs["b"].log(), 15, message="b logged it")  # fmt: skip
    finally:
        cluster.stop()


def test_an_archive_copy_of_the_underlying_topic_needs_no_queue(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, ["a", "archive"])
    cluster.add(
        "a",
        destinations=[
            destination(
                "archive",
                [cluster.address("archive")],
                topics=(("work-in", None),),
                exclude="replicate",
            )
        ],
        topics=("work-in", "work"),
        sow=_queue("/kind = 'job'"),
    )
    cluster.add("archive", topics=("work-in",))
    cluster.start()
    try:
        link = wait_until(
            lambda: (d := cluster.destination("a", "archive"))["connected"] and d, 30,
            message="a connected to its archive",
        )  # fmt: skip
        assert link["validation_failures"] == []
    finally:
        cluster.stop()
