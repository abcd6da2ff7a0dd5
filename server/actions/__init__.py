"""Actions: scheduled and on-demand administration of an instance (docs/configuration.md ``Actions``).

An action runs on triggers (a schedule, start-up, shutdown, a REST call, disk usage, an
event), checks conditions and runs modules in order, each through the instance's admin
surface (:class:`spool.server.operations.Operations`, the one REST uses): archive, compress and
remove journals, truncate statistics, enable and disable transports, publish a message as
the broker, raise an event, shut down. Every run is recorded (``/api/actions``, the stats
database's ``action_run`` table).

Modules, each depending only on those below it (an import-linter contract keeps it so)::

    service     Actions: the instance's actions, their triggers and runs; what the API reads
    triggers    schedules (timers, calendar times) and disk-usage watchers, on the clock
    onpublish   the publish stage that offers published messages to on-publish actions
    runner      one action: steps in order, one run at a time, the record, the history
    eventrunner an event-driven action: its messages in batches, windows, derived messages
    eventrunner one event-driven action: its lane's worker, firings per message, windows
    steps       what each condition and module does
    plan        which policy will touch which journal next (the transaction-log page)
    describe    triggers and steps in words
    metricsdoc  the metrics document conditions are evaluated over
    journals    which journals a journal module acts on (oldest first, no gap, pins)
    schedule    when a calendar schedule fires (time zones, DST)
    lanes       the bounded queue of an event-driven action's candidate messages
    webhooks    the POSTs of spool-action-do-webhook: threads, queue, retries
    checkpoint  the file where on-publish actions resume after a restart
    history     where run records go (the stats database), one write at a time
    results     run and step records and their JSON shapes
    errors      why an action cannot be run on demand

The configuration model is :mod:`spool.server.config.actions`; docs/actions.md is the guide.
"""

from __future__ import annotations

from spool.server.actions.errors import (
    ActionBusy,
    ActionError,
    ActionNotFound,
    BadParameters,
    NotOnAdmin,
)
from spool.server.actions.results import RunDict, RunRecord
from spool.server.actions.service import ActionInfo, Actions

__all__ = [
    "ActionBusy",
    "ActionError",
    "ActionInfo",
    "ActionNotFound",
    "Actions",
    "BadParameters",
    "NotOnAdmin",
    "RunDict",
    "RunRecord",
]
