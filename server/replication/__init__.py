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
The map of this package's modules is docs/replication.md "Modules".
"""
