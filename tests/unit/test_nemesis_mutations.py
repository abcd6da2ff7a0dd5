"""The nemesis's mutation patches (tests/nemesis/mutations/) still apply to the code.

Each patch breaks the broker on purpose so that ``check.sh`` can show the checker
reports the bug; a patch that no longer applies would make that check fail for a reason
that has nothing to do with the checker, and nobody would notice until it is run.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MUTATIONS = ROOT / "tests" / "nemesis" / "mutations"
PATCHES = sorted(MUTATIONS.glob("*.patch"))


def test_check_sh_knows_every_patch_and_nothing_else() -> None:
    table = re.findall(r"^\s+\[([a-z0-9-]+)\]=", (MUTATIONS / "check.sh").read_text(), re.M)
    assert sorted(table) == [p.stem for p in PATCHES]


@pytest.mark.parametrize("patch", PATCHES, ids=[p.stem for p in PATCHES])
def test_a_mutation_patch_applies_to_the_code(patch: Path, tmp_path: Path) -> None:
    touched = re.findall(r"^\+\+\+ b/(\S+)$", patch.read_text(), re.M)
    assert touched, "a patch that changes no file"
    for name in touched:  # a copy of what it changes, so the check never edits the tree
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, tmp_path / name)
    done = subprocess.run(
        ["patch", "-p1", "--dry-run", "--force", "--fuzz=0", "-i", str(patch)],
        cwd=tmp_path, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr  # context exact, lines may move
