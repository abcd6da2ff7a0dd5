"""One fuzz target under atheris: ``python -m tests.fuzz.run TARGET [libFuzzer args]``.

The broker's modules are imported inside :func:`atheris.instrument_imports`, so libFuzzer
sees the coverage of their Python code (the compiled twins are run and compared, but
their C is not instrumented). ``SPOOL_NO_EXTENSIONS=1`` makes the frame target compare the
pure-Python parser with itself: the run then covers only the fallback.
"""

from __future__ import annotations

import sys

import atheris

with atheris.instrument_imports(include=["spool"]):
    from tests.fuzz.targets import TARGETS


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] not in TARGETS:
        print(f"usage: python -m tests.fuzz.run {{{','.join(TARGETS)}}} [libFuzzer args]")
        sys.exit(2)
    target = TARGETS[sys.argv[1]]
    atheris.Setup([sys.argv[0], *sys.argv[2:]], target)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
