"""Build the compiled twins of the hot loops (see server/speedups.py) and list the
packages; metadata is in pyproject.toml.

The import names map to the repository's folders in pyproject.toml
(``[tool.setuptools.package-dir]``); every subfolder holding Python code is a subpackage
of its folder's name, found here so the list never drifts from the tree.

Every extension is *optional*: when the C compiler is missing or fails, setuptools warns
and the installation goes on with the pure-Python implementations (the broker says so at
start-up). ``SPOOL_NO_EXTENSIONS=1`` at install time skips the build altogether. Cython is
a build requirement (pyproject.toml), so pip brings it for the build; without it (a build
without isolation on a machine lacking Cython) nothing is compiled either.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

from setuptools import Extension, setup

_HERE = Path(__file__).resolve().parent

_SOURCES = {
    "spool.server.protocol._frame_c": ["server/protocol/_frame_c.pyx"],
    "spool.server.protocol._commands_c": ["server/protocol/_commands_c.pyx"],
    "spool.server.txlog.format._codec_c": ["server/txlog/format/_codec_c.pyx"],
    "spool.server.txlog.format._batch_c": ["server/txlog/format/_batch_c.pyx"],
    "spool.server._wire_c": ["server/_wire_c.pyx"],
    "spool.server.sow._fileformat_c": ["server/sow/_fileformat_c.pyx"],
    "spool.server.replication._frames_c": ["server/replication/_frames_c.pyx"],
}


def _extensions() -> list[Extension]:
    if os.environ.get("SPOOL_NO_EXTENSIONS", "") not in ("", "0"):
        return []
    try:
        from Cython.Build import cythonize
    except ImportError:
        print("spool: Cython is not installed: building no compiled extension")
        return []
    exts = [Extension(name, sources) for name, sources in _SOURCES.items()]
    # server/ on the include path: the twins share inline helpers through
    # server/_buffers.pxd (``from _buffers cimport ...``), which a package-qualified
    # cimport would look for under spool/server/, a folder only the installed tree has
    built = list(
        cythonize(
            exts,
            compiler_directives={"language_level": "3"},
            include_path=[str(_HERE / "server")],
            quiet=True,
        )
    )
    for ext in built:
        # set after cythonize, which does not carry the flag over to the Extensions it makes
        ext.optional = True
    return built


def _packages() -> list[str]:
    with open(_HERE / "pyproject.toml", "rb") as f:
        tool = tomllib.load(f)["tool"]["setuptools"]
    layout: dict[str, str] = tool["package-dir"]
    data: dict[str, list[str]] = tool["package-data"]
    found: set[str] = set()
    for name, folder in layout.items():
        root = _HERE / folder
        if not root.is_dir():
            raise SystemExit(
                f"spool: {folder}/ is missing (the package {name}); "
                "run `npm ci` first for the front-end packages the dashboard ships"
            )
        found.add(name)
        # a subfolder is a subpackage when it holds Python code or files the package ships
        # (listing those keeps setuptools from warning about importable data folders)
        subfolders = {p.parent.relative_to(root) for p in root.rglob("*.py")}
        subfolders |= {Path(pattern).parent for pattern in data.get(name, [])}
        for rel in subfolders:
            if rel.parts and "__pycache__" not in rel.parts:
                found.add(".".join((name, *rel.parts)))
    return sorted(found)


setup(packages=_packages(), ext_modules=_extensions())
