"""Damage in journals: found, read past, and turned into fences; the scrub.

:mod:`.ranges` is what every check reports (:class:`~.ranges.DamagedRange`).
:mod:`.salvage` reads a journal past its damage (its intact pieces and lost spans);
:mod:`.fenceplan` turns lost spans into fences, with what a repair must ask a peer for;
:mod:`.fences` holds the fences themselves (placeholder records, the log's
``FenceTable``). :mod:`.scrub` reads every journal back at a paced rate and reports
what it finds. Writing journals anew around fences is recovery's
(:mod:`spool.server.txlog.recovery`).
"""
