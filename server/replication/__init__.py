"""Replication between instances: leaderless, pushed from the transaction log.

A source instance connects to each of its destinations' ``/replication`` endpoint,
authenticates, both sides compare their configurations (validation), the source resyncs
from the earliest message the destination lacks and then streams every recorded message
the destination's topic blocks take, in its log order, once durable locally. The
destination records them through the same publish pipeline as client publishes (their
publisher's bookmark and path kept, de-duplicated by bookmark), delivers them to its
subscribers and acknowledges positions back once durable there. Persisted acks and
``fully_durable`` subscriptions wait on a horizon that includes every destination whose
effective sync type is sync. docs/replication.md has the model; docs/configuration.md the settings.

Modules, lowest first::

    errors       one exception class per failure reason; the refusal reason strings
    peerframes   the messages either end sends about the fabric (views, name claims)
    hops         a record's path: loop protection, passthrough
    frames       the wire format (sans-I/O): messages, record batches, the channel bit
    protocol     the link state machine (sans-I/O): bytes in, events and bytes out
    dialer       the failover address list and the back-off between attempts (pure)
    syncstate    configured / effective sync type, downgrade and upgrade (pure)
    validation   what each side says of its configuration; the checks and their fixes
    routing      which records go to a destination (topic blocks, filters, paths)
    state        acked positions, the log's and the instance's identity, in a file
    horizon      the sync durability horizon (local fsync and the sync destinations)
    transport    the pipes under links; one connection carrying a link each way
    conflicts    names found in use twice (instances, clients, publishers): REST, alerts
    topology     what a destination drops; a topic's route through the fabric (pure)
    fabricview   every instance's routing configuration, as learned over the links
    collisions   publishers that share an identity, found on the replicated stream
    clientnames  a logon asks the linked instances whether its client name is free
    outbound     a destination: its link (dial or run back over the peer's connection,
                 validate, resync, stream, acks)
    inbound      a link from a source: authenticate, check, record, ack
    service      Replication: the destinations and inbound links of an instance, the
                 admin reads and actions, metrics
    bootframes, bootproto, bootsource, bootstrap
                 an empty instance's first copy from a peer (docs/bootstrap.md)
    repairsource the records another instance lost, found in this log and sent
    repair       this instance's fenced (damaged) records, asked of its destinations
                 and written back in place (docs/replication.md "Repair")
"""
