"""A SparkSession for the pipeline: checked Java, loopback defaults, quiet logs, ``spool``.

:func:`spark_session` is what ``spool pipeline`` and the tests use; applications can use
it too or build their own session and call :func:`~spool.server.pipeline.source.register`.

- **Java**: Spark needs Java 17 or newer; a missing or older one is a
  :class:`~spool.server.pipeline.errors.JavaNotFound` naming what to install, before Spark
  prints a page of launcher errors.
- **Local by default, loopback only**: the master is ``local[*]`` unless given (or set by
  ``spark-submit``); in local mode the driver binds 127.0.0.1, the web UI is off (it
  would listen on every interface) and shuffles use twice as many partitions as cores
  (Spark's default, 200, is sized for clusters: thousands of tiny tasks for a stats job). Executors run this interpreter (``PYSPARK_PYTHON``),
  so they import the same Spool.
- **Settings the source needs**: Python filter pushdown on (the source :func:`register`
  adds takes a query's filters, and Spark refuses such a reader without it), session time
  zone UTC (the log's times).
- **Quiet**: Spark's log4j configured by ``log4j2.properties`` beside this module (warnings
  and errors only), its console progress bar off (``spool pipeline`` prints its own line).
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from pyspark.sql import SparkSession

from spool.server.pipeline.errors import JavaNotFound
from spool.server.pipeline.source import register

__all__ = ["LOG4J_CONFIG", "check_java", "spark_session"]

LOG4J_CONFIG: Final = Path(__file__).with_name("log4j2.properties")
_VERSION_RE: Final = re.compile(r'version "(\d+)(?:\.(\d+))?')


@functools.cache
def check_java() -> str:
    """The java executable Spark will use, checked to be Java 17 or newer.

    Raises:
        JavaNotFound: none, not runnable, or too old.
    """
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not java or not Path(java).exists():
        where = f"JAVA_HOME={home} has no bin/java" if home else "no java on PATH"
        raise JavaNotFound(where)
    try:
        done = subprocess.run(
            [java, "-version"], capture_output=True, text=True, timeout=60, check=False
        )
    except OSError as exc:
        raise JavaNotFound(f"{java} cannot run: {exc}") from exc
    m = _VERSION_RE.search(done.stderr + done.stdout)
    if m is None:
        raise JavaNotFound(f"{java} -version printed no version")
    major = int(m.group(1))
    if major == 1 and m.group(2):  # "1.8.0_402"
        major = int(m.group(2))
    if major < 17:
        raise JavaNotFound(f"{java} is Java {major}")
    return java


def spark_session(
    master: str | None = None,
    app_name: str = "spool-pipeline",
    conf: Mapping[str, str] | None = None,
    *,
    ui: bool = False,
) -> SparkSession:
    """The active session, or a new one with the defaults of the module docstring.

    Args:
        master: ``local[*]``, ``local[2]``, ``spark://host:7077``...; None keeps what
            ``spark-submit`` set, else ``local[*]``.
        app_name: shown by the cluster manager.
        conf: more Spark settings (they win over the defaults).
        ui: start Spark's web UI (off by default).

    Raises:
        JavaNotFound: see :func:`check_java`.
    """
    check_java()
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ and master is None
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    effective = master or ("" if submitted else "local[*]")
    local = effective.startswith("local")
    if local:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    java_opts = f"-Dlog4j2.configurationFile={LOG4J_CONFIG.as_uri()}"
    settings: dict[str, str] = {
        "spark.app.name": app_name,
        "spark.sql.python.filterPushdown.enabled": "true",
        "spark.sql.session.timeZone": "UTC",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.extraJavaOptions": java_opts,
        "spark.executor.extraJavaOptions": java_opts,
    }
    if effective:
        settings["spark.master"] = effective
    if local:
        settings.update(
            {
                "spark.driver.host": "127.0.0.1",
                "spark.driver.bindAddress": "127.0.0.1",
                "spark.ui.enabled": "true" if ui else "false",
                # one machine: a few shuffle partitions, not Spark's cluster-sized 200
                "spark.sql.shuffle.partitions": str(max(4, 2 * (os.cpu_count() or 2))),
            }
        )
    settings.update(conf or {})
    builder = SparkSession.builder
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    # an already running session (spark-submit, a notebook) keeps its JVM settings; the
    # SQL settings the source needs can still be set on it
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    register(spark)
    return spark
