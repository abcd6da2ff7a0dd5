"""The nemesis: 3 to 5 replicating instances under mixed faults, and a checker.

``python -m tests.nemesis`` (``make nemesis``); docs/nemesis.md is the guide. The parts:
:mod:`.net` (namespaces and packet rules), :mod:`.proxy` (the links' delay),
:mod:`.cluster` (the instances), :mod:`.workloads` (the clients), :mod:`.history` (what
they record), :mod:`.schedule` (the seed's faults), :mod:`.nemesis` (injecting them),
:mod:`.damage` (a stopped instance's files), :mod:`.journals` (the logs read back),
:mod:`.checker`, :mod:`.report`, :mod:`.run` (a whole run), :mod:`.scenarios`.
"""
