"""Retention: who still needs which journals, and archiving, compressing, removing them.

:mod:`.pins` holds the retention pins (a replay, a queue, a replication destination
still needing records from a seq on); :mod:`.service` archives, compresses and removes a
journal and every older one, never the active one, and refuses while a pin needs them.
The compressed file format is :mod:`spool.server.txlog.storage.compression`; the
``MaxSize`` accounting that removals give room back to is
:mod:`spool.server.txlog.append.space`.
"""
