"""Journal files: their names, the write seam, their bytes, and the list of them.

:mod:`.files` names every file of a log (the prefix rule) and is the ``FileSeam`` every
journal write goes through; :mod:`.source` reads a journal's bytes and records back
(plain or :mod:`.compression`-ed files, bounded windows, spans checked against the
index's block CRCs); :mod:`.journal` is one journal as the log tracks it and the ordered
list of them; :mod:`.search` finds a record by bookmark or time across journals from
their indexes, without scanning (blocking reads: worker threads or the CLI).
"""
