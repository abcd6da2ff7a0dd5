"""Coverage-guided fuzzing of the parsers a client or an operator can reach (atheris).

``python -m tests.fuzz [--seconds S] [--target NAME ...]`` (``make fuzz``) runs each
target of :mod:`tests.fuzz.targets` in its own process under libFuzzer for a bounded
time, starting from the seed corpus in ``tests/fuzz/corpus/TARGET/`` and keeping what it
finds in ``test-artifacts/fuzz/corpus/TARGET/``; a crash is written to
``test-artifacts/fuzz/crashes/`` and fails the run. The seed corpus is replayed by
``tests/unit/test_fuzz_corpus.py`` in every ``make test``. See docs/fuzzing.md.
"""
