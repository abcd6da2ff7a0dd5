"""Message queues: views over recorded topics whose messages each go to one consumer.

Modules, highest first (each imports only those below it; an import-linter contract keeps
it so); docs/queues.md describes the behaviour and the decisions where the AMPS model
leaves room::

    service     QueueService: commands (subscribe, unsubscribe, sow_delete as the ack),
                the lease timer, start-up from the log, the admin surface
    transfers   Transfers: the replicated queues' ownership traffic (link state,
                transfer requests, proxied transfer, QUEUE_TRANSFER records)
    stage       the publish stage: messages of underlying topics enter their queues;
                recovery from the log (publishes and QUEUE_ACK records)
    records     the bodies of QUEUE_ACK / QUEUE_TRANSFER records
    machine     one queue as a pure state machine on the injected clock
    ownership   a replicated queue's owner per message, pure
"""
