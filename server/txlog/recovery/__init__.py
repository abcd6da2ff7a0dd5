"""Recovery: an instance's journals found, checked, cut, rewritten and re-indexed.

:func:`.recover.recover` runs at every open (and read-only for ``spool journal verify``
and ``find``) over parts that each do one step: :mod:`.discovery` (the files),
:mod:`.checking` (one journal, read-only), :mod:`.changes` (what recovery changes on
disk: cuts kept in ``damaged/``, trims, index files), :mod:`.rewrite` (a journal written
anew around its fences, safe to interrupt) and :mod:`.report` (what it found and did).
The same work on a running log: :mod:`.online` fences the damage of a finished journal
or writes a repair's records back in place of a fence, :mod:`.reindex` writes a damaged
index file again.
"""
