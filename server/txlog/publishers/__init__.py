"""What the log holds per publisher, and the instance's own publisher identity.

:mod:`.table` is the publisher table (each publisher's highest sequence, duplicate
detection, late records) over :mod:`.gaps` (the sequences each publisher lacks) and
:mod:`.holdings` (the gap table rebuilt from the index summaries at start-up).
:mod:`.clientsack` is the ``NAME.clients.ack`` cache of the table. :mod:`.incarnation`
(``NAME.incarnation``) and :mod:`.ownfloor` (``NAME.ownfloor``) keep the instance's own
identity from numbering a record twice.
"""
