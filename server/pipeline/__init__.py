"""The transaction log on Spark: the ``spool`` data source and the journal jobs.

Journals are read as files, through the record codec and the index and file readers of
:mod:`spool.server.txlog` (never through a broker): :mod:`.catalog` finds an instance's journals
and their index blocks, :mod:`.planner` cuts them into input partitions and prunes blocks,
:mod:`.scanner` decodes a partition, :mod:`.arrow` makes Arrow batches of it. The PySpark
side (``pyspark.sql.datasource``) is :mod:`.source` (batch), :mod:`.stream` (streaming,
offsets = local sequences, retention pins over REST through :mod:`.admin`) and
:mod:`.sink` (publishing through :mod:`spool.server.client`, exactly-once by client name and
sequence). The jobs behind ``spool pipeline stats|grep|export`` are built on the source.
docs/pipeline.md is the user's guide. Nothing here imports the engine core.
"""
