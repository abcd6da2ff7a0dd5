"""The files Spool ships beside its code: the dashboard's static files and templates, the
statistics database's migrations, and the vendored front-end packages (uPlot, cytoscape).

Each is a package of data under ``spool`` (pyproject.toml's package-dir table maps it to
its folder in a checkout, and the wheel carries it), so it is found by the import system
the same way in a checkout, an editable install and an installed wheel, from any working
directory. None of them holds Python code to import: they are namespace packages, found
with :func:`importlib.util.find_spec`, whose search locations are their directories.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Final

STATIC: Final = "spool.static"
TEMPLATES: Final = "spool.templates"
MIGRATIONS: Final = "spool.migrations"
UPLOT: Final = "spool.vendor.uplot"
CYTOSCAPE: Final = "spool.vendor.cytoscape"


def find_resource_dir(package: str) -> Path | None:
    """The directory holding ``package``'s files, or None when it is not installed (the
    vendored front-end packages of a checkout before ``npm ci``)."""
    try:
        spec = importlib.util.find_spec(package)
    except ModuleNotFoundError:  # a parent package is missing
        return None
    if spec is None or spec.submodule_search_locations is None:
        return None
    for location in spec.submodule_search_locations:
        path = Path(location)
        if path.is_dir():
            return path
    return None


def resource_dir(package: str) -> Path:
    """The directory holding ``package``'s files.

    Raises:
        FileNotFoundError: the package is not installed: the installation is incomplete.
    """
    path = find_resource_dir(package)
    if path is None:
        raise FileNotFoundError(
            f"{package} is not installed: the installation of Spool is incomplete "
            "(reinstall the spool-broker package; in a checkout, run `make install`)"
        )
    return path
