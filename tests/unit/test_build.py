"""Installing without a working C compiler still works: every compiled twin is optional,
setuptools warns and the build succeeds with the pure-Python implementations only."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

from tests.support.server import ROOT


def test_build_without_a_compiler_succeeds_with_no_extension(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    for name in ("setup.py", "pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    with open(ROOT / "pyproject.toml", "rb") as f:
        folders = tomllib.load(f)["tool"]["setuptools"]["package-dir"].values()
    for folder in folders:  # every folder the packages come from (setup.py lists them)
        shutil.copytree(
            ROOT / folder,
            src / folder,
            ignore=shutil.ignore_patterns("*.so", "*_c.c", "__pycache__"),
        )
    done = subprocess.run(
        [sys.executable, "setup.py", "build_ext", "--build-lib", "out", "--build-temp", "tmp"],
        cwd=src,
        capture_output=True,
        text=True,
        env={**os.environ, "CC": str(tmp_path / "no-such-compiler")},
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert 'building extension "spool.server.protocol._frame_c" failed' in done.stderr
    assert not list(src.rglob("*.so"))  # nothing was compiled, nothing half-built left
