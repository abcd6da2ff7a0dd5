"""The fuzzers' seed corpus and every crash they found, replayed through their targets.

``make fuzz`` (tests/fuzz) explores from ``tests/fuzz/corpus/TARGET/``; an input that
crashed a target is added there (named ``crash-...``) once fixed, so it is checked here in
every run, without atheris.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from spool.server.protocol.frame import ParsedFrame
from tests.fuzz import targets
from tests.fuzz.targets import COMPILED, TARGETS

CORPUS = Path(__file__).resolve().parents[1] / "fuzz" / "corpus"
INPUTS = sorted(p for p in CORPUS.glob("*/*") if p.is_file())


def test_every_target_has_a_seed_corpus() -> None:
    assert {p.parent.name for p in INPUTS} == set(TARGETS)


@pytest.mark.parametrize("path", INPUTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_corpus_input_passes_its_target(path: Path) -> None:
    TARGETS[path.parent.name](path.read_bytes())


@pytest.mark.skipif(not COMPILED, reason="the compiled twins are not built here")
def test_the_frame_target_fails_when_the_twins_disagree(monkeypatch: pytest.MonkeyPatch) -> None:
    class Broken:
        @staticmethod
        def parse_frame(data: bytes) -> ParsedFrame:
            return ParsedFrame([])

    monkeypatch.setattr(targets, "_FRAME_C", Broken)
    with pytest.raises(AssertionError):
        targets.frame(b'{"c":"publish","t":"a"}x')
