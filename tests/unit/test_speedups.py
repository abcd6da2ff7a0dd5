"""What spool.server.speedups reports when some or all compiled modules are missing (the
"no compiler at install" case), without uninstalling anything: the import is refused."""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from types import ModuleType

import pytest

from spool.server import speedups


@pytest.fixture
def fresh_status(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(speedups, "_cache", None)
    monkeypatch.setattr(speedups, "ENABLED", True)
    yield
    speedups._cache = None


def _refuse(monkeypatch: pytest.MonkeyPatch, names: set[str]) -> None:
    real = importlib.import_module

    def fake(name: str, package: str | None = None) -> ModuleType:
        if name in names:
            raise ImportError(f"No module named {name!r}")
        return real(name, package)

    monkeypatch.setattr(speedups.importlib, "import_module", fake)


def test_no_module_built_is_pure_python_with_a_notice(
    fresh_status: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    _refuse(monkeypatch, set(speedups.EXTENSIONS))
    st = speedups.status()
    assert st["implementation"] == "python"
    assert st["reason"] is not None and "not built" in st["reason"]
    assert all(v.startswith("not built (No module named") for v in st["modules"].values())
    notice = speedups.startup_notice()
    assert notice is not None and notice.startswith("spool: hot loops run as pure Python")


def test_some_modules_built_is_partial(fresh_status: None, monkeypatch: pytest.MonkeyPatch) -> None:
    _refuse(monkeypatch, {"spool.server._wire_c"})
    st = speedups.status()
    assert st["implementation"] == "partial"
    assert st["modules"]["spool.server._wire_c"].startswith("not built")
    assert speedups.describe().startswith("partly pure Python")


def test_all_built_needs_no_notice(fresh_status: None) -> None:
    assert speedups.status()["implementation"] == "compiled"
    assert speedups.startup_notice() is None
    assert speedups.describe() == "compiled extension"
