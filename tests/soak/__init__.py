"""The soak: clients that must lose nothing while the broker is killed, frozen and starved.

``python -m tests.soak --minutes N`` (``make soak``) runs one broker process under a load
of publishers with persisted acks, bookmark subscribers, live subscribers and a slow
reader, while faults are injected in turn: SIGKILL and restart, SIGSTOP past the heartbeat
and SIGCONT, and (as root) a full disk on a small tmpfs that is freed again. At the end an
oracle reads the journals through the transaction log's read-only APIs and checks what
every client saw. See docs/soak.md.

Modules: :mod:`tests.soak.actors` (the clients), :mod:`tests.soak.faults` (the faults),
:mod:`tests.soak.oracle` (the checks), :mod:`tests.soak.harness` (the run and its summary).
"""
