"""Reading a live log: records back by sequence, lookups by bookmark and time.

:mod:`.recordreader` returns durable records by seq, from the in-memory tail
(:mod:`spool.server.txlog.append.tail`) or from the journal files (through
:mod:`spool.server.txlog.storage.source`, in a worker thread), and never a fence's
placeholder. :mod:`.locator` finds the seq of a bookmark or a time (planned in memory by
:mod:`spool.server.txlog.storage.search`, one index block read when memory cannot answer)
and prefetches the answers replay planning needs off the loop. Both read the append
side's positions, so this package sits above :mod:`spool.server.txlog.append`.
"""
