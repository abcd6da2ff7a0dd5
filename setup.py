"""Build the compiled twins of the hot loops (see server/speedups.py); metadata is in
pyproject.toml.

Every extension is *optional*: when the C compiler is missing or fails, setuptools warns
and the installation goes on with the pure-Python implementations (the broker says so at
start-up). ``SPOOL_NO_EXTENSIONS=1`` at install time skips the build altogether. Cython is
a build requirement (pyproject.toml), so pip brings it for the build; without it (a build
without isolation on a machine lacking Cython) nothing is compiled either.
"""

from __future__ import annotations

import os

from setuptools import Extension, setup

_SOURCES = {
    "server.protocol._frame_c": ["server/protocol/_frame_c.pyx"],
    "server.protocol._commands_c": ["server/protocol/_commands_c.pyx"],
    "server.txlog._codec_c": ["server/txlog/_codec_c.pyx"],
    "server.txlog._batch_c": ["server/txlog/_batch_c.pyx"],
    "server._wire_c": ["server/_wire_c.pyx"],
    "server.sow._fileformat_c": ["server/sow/_fileformat_c.pyx"],
    "server.replication._frames_c": ["server/replication/_frames_c.pyx"],
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
    built = list(cythonize(exts, compiler_directives={"language_level": "3"}, quiet=True))
    for ext in built:
        # set after cythonize, which does not carry the flag over to the Extensions it makes
        ext.optional = True
    return built


setup(ext_modules=_extensions())
