"""The wheel as a user gets it: built from the sources, installed into a fresh virtualenv
outside the checkout, ``spool serve`` run from an empty directory, the dashboard loaded in
Chromium, the statistics database migrated, and ``spark.read.format("spool")`` in a plain
PySpark session with no setting and no registration call.

The wheel is the pure-Python one (``SPOOL_NO_EXTENSIONS=1``): the compiled one differs
only by the optional extension modules. It is built without build isolation (offline) and
installed with ``--no-deps``; the fresh venv finds the dependencies (never the project)
through a path file naming this venv's site-packages, where no ``spool`` package lies
(the project's editable install is an import hook there, which a path file does not run).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from alembic.script import ScriptDirectory
from playwright.sync_api import Page, expect

from tests.support.server import ROOT
from tests.support.wait import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.spark]


@dataclass(frozen=True)
class Installed:
    wheel: Path
    venv: Path
    env: dict[str, str]  # an activated venv: its bin first on PATH, no PYTHONPATH

    def bin(self, name: str) -> str:
        return str(self.venv / "bin" / name)


def _copy_sources(src: Path) -> None:
    for name in ("setup.py", "pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    with open(ROOT / "pyproject.toml", "rb") as f:
        folders = tomllib.load(f)["tool"]["setuptools"]["package-dir"].values()
    for folder in folders:
        shutil.copytree(
            ROOT / folder,
            src / folder,
            ignore=shutil.ignore_patterns("*.so", "*_c.c", "__pycache__"),
        )


def _run(argv: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False, **kwargs)  # type: ignore[call-overload]
    assert done.returncode == 0, f"{argv}: {done.stdout[-2000:]}{done.stderr[-3000:]}"
    return done  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    base = tmp_path_factory.mktemp("wheel")
    src, dist, venv = base / "src", base / "dist", base / "venv"
    src.mkdir()
    _copy_sources(src)
    pip = [sys.executable, "-m", "pip"]
    # nothing of a checkout on the path: the venv must find the project in the wheel only
    clean = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    _run([*pip, "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(dist), str(src)],
         env={**clean, "SPOOL_NO_EXTENSIONS": "1"}, cwd=base)  # fmt: skip
    (wheel,) = dist.glob("*.whl")
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], env=clean)
    _run([*pip, "--python", str(venv / "bin" / "python"), "install", "-q", "--no-deps", str(wheel)],
         env=clean, cwd=base)  # fmt: skip
    purelib = Path(sysconfig.get_paths(vars={"base": str(venv)})["purelib"])
    (purelib / "spool-test-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    env = dict(clean)
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(venv)
    return Installed(wheel, venv, env)


def test_the_wheel_holds_only_the_projects_names_and_every_file_it_serves(
    installed: Installed,
) -> None:
    assert installed.wheel.name.endswith("-py3-none-any.whl")
    names = zipfile.ZipFile(installed.wheel).namelist()
    assert {n.split("/")[0] for n in names} == {
        "spool",
        "pyspark_spool",
        "spool_broker-0.1.0.dist-info",
    }
    for shipped in (
        "spool/static/spool-client.js",
        "spool/static/spool-codec.js",
        "spool/static/js/overview.js",
        "spool/static/css/dashboard.css",
        "spool/templates/base.html",
        "spool/migrations/env.py",
        "spool/migrations/script.py.mako",
        "spool/server/ops/alerts.yml",
        "spool/vendor/uplot/LICENSE",
        "spool/vendor/uplot/dist/uPlot.iife.min.js",
        "spool/vendor/cytoscape/LICENSE",
        "spool/vendor/cytoscape/dist/cytoscape.esm.min.mjs",
    ):
        assert shipped in names
    # every migration of the checkout is in the wheel
    versions = {p.name for p in (ROOT / "migrations" / "versions").glob("*.py")}
    assert {f"spool/migrations/versions/{v}" for v in versions} <= set(names)
    # the declared dependencies are met, and the code runs from the venv, not the checkout
    _run([sys.executable, "-m", "pip", "--python", installed.bin("python"), "check"],
         env=installed.env)  # fmt: skip
    where = _run([installed.bin("python"), "-c", "import spool.server; print(spool.server.__file__)"],
                 env=installed.env, cwd=installed.venv)  # fmt: skip
    assert Path(where.stdout.strip()).is_relative_to(installed.venv)
    refused = subprocess.run([installed.bin("python"), "-c", "import server"],
                             env=installed.env, cwd=installed.venv, capture_output=True,
                             text=True, timeout=60, check=False)  # fmt: skip
    assert "No module named 'server'" in refused.stderr


@contextlib.contextmanager
def _installed_broker(installed: Installed, base: Path) -> Iterator[tuple[str, Path]]:
    """The installed ``spool serve``, started from an empty directory, until SIGTERM: its
    address and its data directory. It must stop cleanly and write nothing beside it."""
    empty, data, port_file = base / "empty", base / "data", base / "port"
    empty.mkdir()
    proc = subprocess.Popen(
        [installed.bin("spool"), "serve", "--data-dir", str(data),
         "--listen", "127.0.0.1:0", "--port-file", str(port_file)],
        cwd=empty, env=installed.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        port = wait_until(lambda: port_file.exists() and port_file.read_text().strip(), 60,
                          0.05, "the installed broker to listen")  # fmt: skip
        yield f"127.0.0.1:{port}", data
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGTERM, err.decode()[-3000:]  # drained, then the signal
    assert "Traceback" not in err.decode()
    assert list(empty.iterdir()) == []  # nothing written beside the working directory


@pytest.fixture(scope="module")
def serving(
    installed: Installed, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, Path]]:
    with _installed_broker(installed, tmp_path_factory.mktemp("serve")) as broker:
        yield broker


def test_the_installed_broker_serves_its_dashboard_from_an_empty_directory(
    installed: Installed, serving: tuple[str, Path], page: Page
) -> None:
    address, data = serving
    for body in ('{"n":1}', '{"n":2}'):
        _run([installed.bin("spool"), "publish", "-q", address, "orders", body], env=installed.env)
    base = f"http://{address}"
    for path in ("/static/vendor/uplot/uPlot.iife.min.js",
                 "/static/vendor/cytoscape/cytoscape.esm.min.mjs", "/static/spool-client.js"):  # fmt: skip
        assert httpx.get(base + path).status_code == 200, path
    page.goto(f"{base}/")
    expect(page.locator("#chart-rates canvas")).to_have_count(1)  # uPlot drew
    page.goto(f"{base}/fabric")
    page.wait_for_function("document.querySelectorAll('#fabric-graph canvas').length > 0")

    head = ScriptDirectory(str(ROOT / "migrations")).get_current_head()
    with sqlite3.connect(data / "stats.db") as db:
        assert db.execute("SELECT version_num FROM alembic_version").fetchall() == [(head,)]


def test_a_plain_pyspark_session_reads_the_installed_brokers_log(
    installed: Installed, tmp_path: Path
) -> None:
    with _installed_broker(installed, tmp_path) as (address, data):
        for i in range(5):
            _run([installed.bin("spool"), "publish", "-q", address, "orders", f'{{"i":{i}}}'],
                 env=installed.env)  # fmt: skip
    script = (
        "from pyspark.sql import SparkSession\n"
        "spark = SparkSession.builder.master('local[1]').getOrCreate()\n"
        "spark.sparkContext.setLogLevel('ERROR')\n"
        f"df = spark.read.format('spool').load({str(data / 'journal')!r})\n"
        "for r in df.orderBy('seq').collect(): print(r.topic, bytes(r.data).decode())\n"
        "spark.stop()\n"
    )
    done = _run([installed.bin("python"), "-c", script], env=installed.env, cwd=tmp_path / "empty")
    rows = [line for line in done.stdout.splitlines() if line.startswith("orders ")]
    assert rows == [f'orders {{"i":{i}}}' for i in range(5)]
