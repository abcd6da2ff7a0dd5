"""Appending: encoded records placed, written and fsynced together, then the caches.

:mod:`.placement` puts the bytes of each append into the active journal's pending
buffer, its in-memory index and :mod:`.tail` (the newest records, kept for reads), and
rolls to the next journal. :mod:`.groupcommit` is the flusher: pending appends written
and fsynced as one batch on a worker thread (:mod:`.filethread`), the durable position,
and write outages with their retries (:mod:`.outage`). Sealing happens after the commit
that finishes a journal: :mod:`.cachewriter` writes its sealed index (the form
:mod:`spool.server.txlog.index.builder` produces), index entries and ``clients.ack``,
and swaps the mmapped index in. :mod:`.space` keeps preallocated journal files ready for
rolls and counts ``MaxSize``.
"""
