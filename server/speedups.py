"""Which implementation of the hot loops runs: the compiled (Cython) one or pure Python.

The per-message loops of the broker and the client (frame splitting and header parsing,
the publish run scanner, record encode and decode with their CRC, the delivery encoders,
the client's delivery parser) exist twice, with one API: a pure-Python implementation,
which is the specification and the oracle the tests compare against, and a Cython
implementation compiled at install time (``pip install`` builds the ``*_c.pyx`` modules
with the machine's C compiler; see setup.py). Each module that has a twin picks it at
import: the compiled one when it was built and :data:`ENABLED`, otherwise the Python one.
This is how aiohttp (``_http_parser.pyx`` beside ``http_parser.py``) and yarl do it.

``SPOOL_NO_EXTENSIONS=1`` in the environment forces pure Python everywhere (for tests of
the fallback, and to rule the extension out when chasing a bug). When the compiler was
missing at install the modules are simply absent: everything still works, slower, and
``spool serve`` says so once at start-up (:func:`startup_notice`). ``spool --version``
and ``GET /api/instance`` report :func:`status`.

Imports only the standard library: every layer may ask it.
"""

from __future__ import annotations

import importlib
import os
from typing import Final, Literal, TypedDict

#: the environment variable that forces the pure-Python implementations.
ENV_VAR: Final = "SPOOL_NO_EXTENSIONS"

#: whether compiled modules may be used at all (the environment variable is not set).
ENABLED: Final[bool] = os.environ.get(ENV_VAR, "") in ("", "0")

#: every compiled module, with the public module that selects it.
EXTENSIONS: Final[dict[str, str]] = {
    "spool.server.protocol._frame_c": "spool.server.protocol.frame, spool.server.protocol.delivery",
    "spool.server.protocol._commands_c": "spool.server.protocol.commands",
    "spool.server.txlog.format._codec_c": "spool.server.txlog.format.codec",
    "spool.server.txlog.format._batch_c": "spool.server.txlog.format.batch",
    "spool.server._wire_c": "spool.server.wire",
    "spool.server.sow._fileformat_c": "spool.server.sow.fileformat",
    "spool.server.replication._frames_c": "spool.server.replication.frames",
}

Implementation = Literal["compiled", "python", "partial"]


class Status(TypedDict):
    """What runs, for ``/api/instance`` and ``spool --version``.

    Attributes:
        implementation: ``compiled`` (every compiled module loaded), ``python`` (none:
            forced by the environment or never built) or ``partial``.
        reason: why not every module is compiled (``None`` when all are).
        modules: per compiled module, ``compiled`` or why it is not used.
    """

    implementation: Implementation
    reason: str | None
    modules: dict[str, str]


_cache: Status | None = None


def _probe(name: str) -> str:
    if not ENABLED:
        return f"disabled by {ENV_VAR}=1"
    try:
        importlib.import_module(name)
    except ImportError as exc:
        return f"not built ({exc})"
    return "compiled"


def status() -> Status:
    """Which implementation each twin uses in this process (computed once)."""
    global _cache
    if _cache is None:
        modules = {name: _probe(name) for name in EXTENSIONS}
        compiled = [n for n, state in modules.items() if state == "compiled"]
        impl: Implementation
        reason: str | None
        if len(compiled) == len(modules):
            impl, reason = "compiled", None
        elif not ENABLED:
            impl, reason = "python", f"{ENV_VAR}=1 is set"
        else:
            impl = "partial" if compiled else "python"
            reason = (
                "the compiled extension was not built (no C compiler at install?); "
                "reinstall with a compiler for full speed"
            )
        _cache = {"implementation": impl, "reason": reason, "modules": modules}
    return _cache


def describe() -> str:
    """One line for people: ``compiled extension`` or ``pure Python (why)``."""
    st = status()
    if st["implementation"] == "compiled":
        return "compiled extension"
    label = "pure Python" if st["implementation"] == "python" else "partly pure Python"
    return f"{label} ({st['reason']})"


def startup_notice() -> str | None:
    """What ``spool serve`` prints once at start-up when the hot loops are not compiled
    (``None`` when they are)."""
    st = status()
    if st["implementation"] == "compiled":
        return None
    return f"spool: hot loops run as {describe()}"


__all__ = [
    "ENABLED",
    "ENV_VAR",
    "EXTENSIONS",
    "Implementation",
    "Status",
    "describe",
    "startup_notice",
    "status",
]
