"""The entry points that read a configuration: from a file or from text.

Both resolve relative paths against a base directory fixed at load time (the file's own
directory, or the working directory for text), so the loaded configuration holds absolute
paths and behaves the same whatever directory the instance is started from.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from spool.server.config.build import build
from spool.server.config.errors import ConfigError
from spool.server.config.model import Config
from spool.server.config.values import Context
from spool.server.config.xmltree import parse_tree

__all__ = ["load_config", "parse_config"]


def _parse(
    data: bytes | str,
    *,
    source: str,
    base_dir: Path | None,
    env: Mapping[str, str] | None,
    source_path: Path | None,
) -> Config:
    base = (base_dir if base_dir is not None else Path.cwd()).absolute()
    ctx = Context(env=os.environ if env is None else env, base_dir=base)
    try:
        config = build(parse_tree(data), ctx)
    except ConfigError as exc:
        exc.source = source
        raise
    return replace(config, source_path=source_path)


def parse_config(
    text: str,
    *,
    source: str = "<string>",
    base_dir: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> Config:
    """Parse and validate configuration XML given as text.

    Args:
        text: the XML document.
        source: a name for the text, kept on errors as ``ConfigError.source``.
        base_dir: directory that relative paths resolve against; default the current
            working directory (resolved now, so the result holds absolute paths).
        env: variables for ``${NAME}`` expansion; default ``os.environ``.

    Returns:
        The validated configuration (``source_path`` is None).

    Raises:
        ConfigError: with the path and line of the first problem.
    """
    return _parse(text, source=source, base_dir=base_dir, env=env, source_path=None)


def load_config(path: str | Path, *, env: Mapping[str, str] | None = None) -> Config:
    """Read, parse and validate a configuration file.

    Relative paths inside the file resolve against the file's own directory, so an
    instance behaves the same whatever directory it is started from. This reads the file
    synchronously: call it before the event loop starts (or in a thread).

    Args:
        path: the file.
        env: variables for ``${NAME}`` expansion; default ``os.environ``.

    Raises:
        ConfigError: the file cannot be read (empty ``path``, no line) or is invalid.
    """
    file = Path(path).absolute()
    try:
        data = file.read_bytes()
    except OSError as exc:
        reason = exc.strerror or exc.__class__.__name__
        raise ConfigError("", None, f"cannot read {file}: {reason}", source=str(file)) from exc
    return _parse(data, source=str(file), base_dir=file.parent, env=env, source_path=file)
