"""Delayed delivery: messages published now and delivered at a later time.

Not wired into the broker yet. Modules, highest first (each imports only those below it;
an import-linter contract keeps it so)::

    checkpoint  the NAME.delayed.ack file format: the pending entries as of a log record (pure)
    dueindex    DueIndex: the pending messages in due-time order (pure)
"""
