"""The commit-message check (tests/tools/commitmsg.py): good and bad messages, the hook's
reading of git's message file, and every commit since the rule began."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.tools.commitmsg import (
    MAX_BODY,
    MAX_SUBJECT,
    NOT_IMPERATIVE,
    UnrelatedBase,
    check_message,
    clean_hook_message,
    commits_in_range,
    history_missing,
    main,
)

ROOT = Path(__file__).resolve().parents[2]

GOOD = [
    "Add a commit-message check",
    "Fix the scrub rate when the log is empty\n\nThe rate was read before the first roll.",
    "queues: Keep a lease when the consumer reconnects",
    "Use `git rev-parse --git-path hooks` for the hook folder",
    "Split docs/performance.md by subsystem\n\nOne page per subsystem:\n\n"
    "    python -m tests.bench --quick --target txlog --seconds 30 --output results.json\n",
    "Link the design note\n\nSee https://example.org/a/very/long/path/that/goes/on/and/on/and/on/for-ever\n",
    "Vendor uPlot\n\n```\n" + "x" * 100 + "\n```\n",
    "Credit the fix\n\nCo-authored-by: A Person With A Long Name <a.person.with.a.long.name@example.org>",
    "A" * MAX_SUBJECT,
    "\n\nAdd a message after blank lines",
    "Revert the change of the flush interval",
]

BAD = [
    ("", "the subject line is empty"),
    ("\n\n\n", "the subject line is empty"),
    ("Added a commit-message check", "starts with 'Added'"),
    ("Fixed the scrub rate", "starts with 'Fixed'"),
    ("Adding eslint", "starts with 'Adding'"),
    ("Fixes the hook in worktrees", "starts with 'Fixes'"),
    ("updated the docs", "starts with 'updated'"),
    ("docs: Updated the guide", "starts with 'Updated'"),
    ("Add a commit-message check.", "ends with a period"),
    ("A" * (MAX_SUBJECT + 1), f"the subject has {MAX_SUBJECT + 1} characters"),
    ("Add the check\nwith a body on line two", "the second line is not blank"),
    ("Add the check\n\n" + "word " * 20, "line 3 has 99 characters"),
    ("fixup! Add the check", "fixup! commit left"),
    ("squash! Add the check", "squash! commit left"),
    ("amend! Add the check", "amend! commit left"),
]


@pytest.mark.parametrize("message", GOOD)
def test_good_messages_pass(message: str) -> None:
    assert check_message(message) == []


@pytest.mark.parametrize(("message", "problem"), BAD)
def test_bad_messages_are_refused_with_the_reason(message: str, problem: str) -> None:
    problems = check_message(message)
    assert any(problem in p for p in problems), problems


def test_the_hook_lets_autosquash_commits_through() -> None:
    assert check_message("fixup! Add the check", allow_autosquash=True) == []
    assert check_message("squash! Add the check\n\nand why", allow_autosquash=True) == []


def test_every_problem_of_a_message_is_reported() -> None:
    problems = check_message("Added things.\nsecond line\n" + "x" * (MAX_BODY + 1))
    assert len(problems) == 4, problems


def test_the_hook_reads_the_message_as_git_stores_it() -> None:
    text = (
        "Add the check\n"
        "\n"
        "Why it is needed.\n"
        "# Please enter the commit message for your changes. Lines starting\n"
        "# with '#' will be ignored.\n"
        "# ------------------------ >8 ------------------------\n"
        "diff --git a/x b/x\n"
        "+" + "y" * 200 + "\n"
    )
    assert clean_hook_message(text) == "Add the check\n\nWhy it is needed."


def test_the_not_imperative_forms_are_the_usual_ones() -> None:
    for word in ("added", "adding", "adds", "fixed", "fixing", "fixes", "updated", "made",
                 "dropped", "stopped", "simplified", "written", "kept"):  # fmt: skip
        assert word in NOT_IMPERATIVE, word
    for word in ("add", "fix", "update", "make", "drop", "keep", "test", "use", "merge"):
        assert word not in NOT_IMPERATIVE, word


_word = st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=1, max_size=10)
_line = st.lists(_word, min_size=1, max_size=8).map(" ".join).filter(lambda s: len(s) <= MAX_BODY)


@given(
    verb=st.sampled_from(["Add", "Fix", "Keep", "Use", "Test", "Make", "Drop", "Document"]),
    rest=st.lists(_word, max_size=6).map(" ".join),
    body=st.lists(_line, max_size=6),
)
def test_an_imperative_subject_with_short_lines_passes(
    verb: str, rest: str, body: list[str]
) -> None:
    subject = f"{verb} {rest}".strip()[:MAX_SUBJECT].rstrip(". ")
    message = subject + ("\n\n" + "\n".join(body) if body else "")
    assert check_message(message) == []


@given(
    form=st.sampled_from(sorted(NOT_IMPERATIVE)),
    rest=st.lists(_word, max_size=4).map(" ".join),
)
def test_a_subject_starting_with_a_listed_form_is_refused(form: str, rest: str) -> None:
    subject = f"{form.capitalize()} {rest}".strip()
    assert any("write it as an order" in p for p in check_message(subject))


@given(extra=st.integers(1, 40), prefix=st.sampled_from(["", "    ", "\t"]))
def test_only_code_lines_may_pass_the_body_width(extra: int, prefix: str) -> None:
    line = prefix + "z" * (MAX_BODY + extra - len(prefix))
    problems = check_message(f"Add the check\n\n{line}")
    assert (problems == []) == (prefix != "")


def test_the_file_mode_exit_status(tmp_path: Path) -> None:
    good = tmp_path / "good"
    good.write_text("Add the check\n\n# a comment git drops\n")
    bad = tmp_path / "bad"
    bad.write_text("Added the check.\n")
    assert main(["--file", str(good)]) == 0
    assert main(["--file", str(bad)]) == 1


def _rule_base() -> str:
    """The base commit of the rule, as `make lint` names it (Makefile's COMMIT_RULE_BASE)."""
    match = re.search(r"^COMMIT_RULE_BASE := (\w+)$", (ROOT / "Makefile").read_text(), re.M)
    assert match, "the Makefile names no COMMIT_RULE_BASE"
    return match.group(1)


def _require_checkout() -> None:
    inside = subprocess.run(
        ["git", "rev-parse", "--is-inside-work-tree"], cwd=ROOT, capture_output=True, text=True
    )
    if inside.stdout.strip() != "true":
        pytest.skip("not a git checkout: there is no history to check")


def test_a_range_whose_base_is_not_in_the_history_is_refused() -> None:
    _require_checkout()
    if history_missing("HEAD~1..HEAD", cwd=ROOT):
        pytest.skip("a shallow clone of one commit: HEAD has no parent here")
    with pytest.raises(UnrelatedBase):
        commits_in_range("HEAD..HEAD~1", cwd=ROOT)


def test_every_commit_since_the_rule_began_follows_it() -> None:
    _require_checkout()
    base = _rule_base()
    if history_missing(f"{base}..HEAD", cwd=ROOT):
        pytest.skip(f"a shallow clone without {base}: no history to check")
    known = subprocess.run(["git", "cat-file", "-e", f"{base}^{{commit}}"], cwd=ROOT)
    assert known.returncode == 0, f"{base} is not in this clone"
    failures = {
        f"{commit.sha[:12]} {commit.message.partition(chr(10))[0]}": problems
        for commit in commits_in_range(f"{base}..HEAD", cwd=ROOT)
        if (problems := check_message(commit.message))
    }
    assert failures == {}


def test_a_shallow_clone_without_the_base_has_nothing_to_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """CI may check out one commit only: the range check then says so and passes, while a
    full clone is checked as ever."""
    _require_checkout()
    shallow = tmp_path / "shallow"
    subprocess.run(
        ["git", "clone", "-q", "--depth", "1", f"file://{ROOT}", str(shallow)],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    base = _rule_base()
    assert history_missing(f"{base}..HEAD", cwd=shallow)
    assert not history_missing(f"{base}..HEAD", cwd=ROOT) or _is_shallow(ROOT)
    monkeypatch.chdir(shallow)  # the checker asks git in the working directory
    assert main(["--range", f"{base}..HEAD"]) == 0
    assert "does not hold the base commit" in capsys.readouterr().err


def _is_shallow(repo: Path) -> bool:
    out = subprocess.run(["git", "rev-parse", "--is-shallow-repository"], cwd=repo,
                         capture_output=True, text=True)  # fmt: skip
    return out.stdout.strip() == "true"
