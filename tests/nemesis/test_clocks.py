"""The jumping clock the nemesis's clock-jump fault steers through a control file."""

from __future__ import annotations

import time
from pathlib import Path

from tests.support.clocks import JumpingClock
from tests.support.wait import wait_until


def test_the_wall_clock_jumps_by_what_the_file_says_and_monotonic_time_does_not(
    tmp_path: Path,
) -> None:
    control = tmp_path / "clock.control"
    clock = JumpingClock(control, poll=0.01)
    assert abs(clock.time() - time.time()) < 1  # no file: no offset
    mono = clock.monotonic()
    control.write_text("3600\n")
    wait_until(lambda: clock.time() - time.time() > 3599, 5, message="the jump forward")
    control.write_text("-90")
    wait_until(lambda: -91 < clock.time() - time.time() < -89, 5, message="the jump back")
    # a file being written keeps the last offset: not a number yet, or emptied first
    for torn in ("not a number", "", "\n"):
        control.write_text(torn)
        clock._read()  # what the watcher does next, done here
        assert -91 < clock.time() - time.time() < -89, repr(torn)
    control.unlink()
    wait_until(lambda: abs(clock.time() - time.time()) < 1, 5, message="no file again")
    assert clock.monotonic() >= mono
