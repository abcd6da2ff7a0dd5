"""Spool: a message broker with a transaction log, bookmark replay and a built-in dashboard."""

__version__ = "0.1.0"
