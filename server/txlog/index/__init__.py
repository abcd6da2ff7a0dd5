"""Indexing: the sparse per-journal indexes and their file.

:mod:`.answers` says what an index answers (blocks of about 16 KB: seq, time, CRC,
publisher ranges); :mod:`.fileformat` is the ``.index`` file's byte layout, open and
sealed forms (sans-I/O); :mod:`.builder` is the active journal's index, built in memory
as records are appended, which produces both forms; :mod:`.sealed` is a finished
journal's index read in place through ``mmap``. Indexes are caches: recovery rebuilds
a missing or invalid one.
"""
