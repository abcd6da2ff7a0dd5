"""Delayed delivery: messages published now and delivered at a later time.

Not wired into the broker yet. Modules::

    dueindex    DueIndex: the pending messages in due-time order (pure)
"""
