"""The ``logs`` fixture: replay tests that take it run over both log backends."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.replay.backends import BACKENDS, Backend, LogFactory


@pytest.fixture(params=BACKENDS)
def logs(request: pytest.FixtureRequest, tmp_path: Path) -> LogFactory:
    """Each test that takes it runs once over the fake and once over a real log."""
    backend: Backend = request.param
    return LogFactory(backend, tmp_path)
