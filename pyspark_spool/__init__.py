"""Lets Spark find the ``spool`` format by itself.

Spark looks, at the first use of a Python data source in a session, for installed
top-level modules named ``pyspark_*`` that define ``DefaultSource``, and registers each
under its ``name()``. With the Spool package installed (``pip install
'spool-broker[pipeline]'``, also on the executors of a cluster), ``spark.read.format(
"spool")`` works in any PySpark session without calling ``register`` and without any
setting: this source leaves a query's WHERE clause to Spark (``register`` adds the one
that applies it itself, with the setting that needs).
"""

from __future__ import annotations

from spool.server.pipeline.source import SpoolDataSource as DefaultSource

__all__ = ["DefaultSource"]
