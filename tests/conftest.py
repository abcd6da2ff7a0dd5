"""Shared fixtures: real broker processes on 127.0.0.1 with ephemeral ports."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from tests.support.server import SpoolProcess, config_xml

ServerFactory = Callable[..., SpoolProcess]

# Property tests judge behaviour, not speed: on a loaded machine (CI shares its cores) the
# generation of an example may be slow and one example may take longer than hypothesis's
# default deadline; neither is a defect of the code under test.
settings.register_profile(
    "spool", deadline=None, suppress_health_check=[HealthCheck.too_slow], print_blob=True
)
settings.load_profile("spool")


@pytest.fixture
def spool_server_factory(tmp_path: Path) -> Iterator[ServerFactory]:
    """Start brokers with custom configs: ``factory(xml=None, name="a", **config_kw)``."""
    started: list[SpoolProcess] = []

    def factory(
        xml: str | None = None, *, name: str = "a", start: bool = True, **config_kw: object
    ) -> SpoolProcess:
        workdir = tmp_path / name
        if xml is None:
            xml = config_xml(workdir / "data", **config_kw)  # type: ignore[arg-type]
        proc = SpoolProcess(workdir, xml)
        started.append(proc)
        if start:
            proc.start()
        return proc

    yield factory
    for proc in started:
        proc.stop()


@pytest.fixture
def spool_server(spool_server_factory: ServerFactory) -> SpoolProcess:
    """A broker with the transaction log recording every topic."""
    return spool_server_factory()
