"""Message queues: views over recorded topics whose messages each go to one consumer.

Modules, highest first (each imports only those below it; an import-linter contract keeps
it so); docs/queues.md describes the behaviour and the decisions where the contracts are
silent::

    service     QueueService: commands (subscribe, unsubscribe, sow_delete as the ack),
                the lease timer, start-up from the log, the admin surface
    stage       the publish stage: messages of underlying topics enter their queues;
                recovery from the log (publishes and QUEUE_ACK records)
    machine     one queue as a pure state machine on the injected clock
"""
