"""Check commit messages against the commit rule of CONTRIBUTING.md ("Commits").

    python -m tests.tools.commitmsg --file .git/COMMIT_EDITMSG   # one message (the hook)
    python -m tests.tools.commitmsg --range BASE..HEAD           # every commit of a range

The rule, as checked here:

- a subject line: at most :data:`MAX_SUBJECT` characters, no period at its end;
- the subject reads as an order ("Add", "Fix", "Keep"): its first word (after an optional
  ``area:`` prefix such as ``queues:``) is none of :data:`NOT_IMPERATIVE`, the past-tense,
  gerund and third-person forms of the verbs subjects most often start with. A list, not
  grammar: it catches the habit and never refuses an imperative;
- the second line blank, when there is a body;
- body lines at most :data:`MAX_BODY` characters, except a line holding a URL, a code
  line (indented by four spaces or a tab, or inside a ``` fence) and a trailer such as
  ``Co-authored-by:``;
- in a range, no ``fixup!`` / ``squash!`` / ``amend!`` commit left over: those are for
  ``git rebase --autosquash`` before the branch is shared. The hook (``--file``) lets them
  through, so ``git commit --fixup`` works.

Merge commits are not checked: their subjects are written by git. The message of
``--file`` is read as git hands it to the commit-msg hook: comment lines (``#``) and
everything below the scissors line of ``git commit -v`` are dropped first.

Imports only the standard library: the hook runs it with any ``python3``.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

MAX_SUBJECT: Final = 72
MAX_BODY: Final = 72

#: subjects that ``git commit --fixup/--squash`` writes, for ``rebase --autosquash``
AUTOSQUASH: Final = ("fixup!", "squash!", "amend!")

_VERBS: Final = (
    "add", "adjust", "allow", "avoid", "build", "bump", "change", "check", "clean",
    "correct", "create", "delete", "deprecate", "document", "drop", "enable", "disable",
    "ensure", "extract", "fix", "handle", "implement", "improve", "introduce", "keep",
    "make", "merge", "migrate", "move", "optimize", "refactor", "reject", "remove",
    "rename", "reorder", "replace", "restore", "revert", "rewrite", "run", "set",
    "simplify", "skip", "split", "stop", "support", "test", "tidy", "tweak", "update",
    "upgrade", "use", "write",
)  # fmt: skip

#: past tenses that are not the verb + "ed" (an empty tuple: the same as the verb)
_IRREGULAR: Final = {
    "build": ("built",), "keep": ("kept",), "make": ("made",), "rewrite": ("rewrote", "rewritten"),
    "run": ("ran",), "set": (), "split": (), "write": ("wrote", "written"),
}  # fmt: skip


def _forms(verb: str) -> set[str]:
    """The past tense, gerund and third-person forms of a regular English verb."""
    if verb in _IRREGULAR:
        past = set(_IRREGULAR[verb])
    elif verb.endswith("e"):
        past = {verb + "d"}
    elif verb.endswith("y") and verb[-2] not in "aeiou":
        past = {verb[:-1] + "ied"}
    elif re.fullmatch(r"[^aeiou]*[aeiou][bdgmnprt]", verb):
        past = {verb + verb[-1] + "ed"}  # one syllable ending consonant-vowel-consonant
    else:
        past = {verb + "ed"}
    if verb.endswith("e") and not verb.endswith("ee"):
        gerund = verb[:-1] + "ing"
    elif re.fullmatch(r"[^aeiou]*[aeiou][bdgmnprt]", verb):
        gerund = verb + verb[-1] + "ing"
    else:
        gerund = verb + "ing"
    if verb.endswith(("s", "x", "z", "ch", "sh")):
        third = verb + "es"
    elif verb.endswith("y") and verb[-2] not in "aeiou":
        third = verb[:-1] + "ies"
    else:
        third = verb + "s"
    return past | {gerund, third}


#: first words of a subject that describe instead of order ("Added", "Fixing", "Updates")
NOT_IMPERATIVE: Final[frozenset[str]] = frozenset(form for verb in _VERBS for form in _forms(verb))

#: ``queues:`` / ``docs/queues.md:`` before the subject proper
_AREA: Final = re.compile(r"^[\w./-]+:\s+")
#: ``Co-authored-by: ...``: a hyphenated key, a colon, a value
_TRAILER: Final = re.compile(r"^[A-Z][a-z]*(-[A-Za-z]+)+: \S")
_SCISSORS: Final = "# ------------------------ >8 ------------------------"


def clean_hook_message(text: str) -> str:
    """The message as git will store it: without comment lines and without the diff
    ``git commit -v`` appends below its scissors line."""
    lines: list[str] = []
    for line in text.splitlines():
        if line == _SCISSORS:
            break
        if not line.startswith("#"):
            lines.append(line.rstrip())
    return "\n".join(lines).strip("\n")


def _first_word(subject: str) -> str:
    rest = _AREA.sub("", subject, count=1)
    match = re.match(r"[A-Za-z']+", rest)
    return match.group(0) if match else ""


def check_message(message: str, *, allow_autosquash: bool = False) -> list[str]:
    """The problems of one commit message (empty: it follows the rule).

    Args:
        message: the message without comment lines (leading blank lines are ignored).
        allow_autosquash: accept a ``fixup!`` / ``squash!`` / ``amend!`` message as it is
            (the hook); a range check refuses them.
    """
    lines = [line.rstrip() for line in message.strip("\n").splitlines()]
    if not lines or not lines[0].strip():
        return ["the subject line is empty"]
    subject = lines[0]
    if subject.startswith(AUTOSQUASH):
        if allow_autosquash:
            return []
        return [f"{subject.split()[0]} commit left: squash it with git rebase --autosquash"]
    problems: list[str] = []
    if len(subject) > MAX_SUBJECT:
        problems.append(f"the subject has {len(subject)} characters (at most {MAX_SUBJECT})")
    if subject.endswith("."):
        problems.append("the subject ends with a period")
    word = _first_word(subject)
    if word.lower() in NOT_IMPERATIVE:
        problems.append(
            f"the subject starts with {word!r}: write it as an order "
            "('Add', 'Fix'), saying what the commit does"
        )
    if len(lines) > 1 and lines[1].strip():
        problems.append("the second line is not blank (subject, blank line, body)")
    fenced = False
    for number, line in enumerate(lines[2:], start=3):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if len(line) <= MAX_BODY or fenced or "://" in line or _TRAILER.match(line):
            continue
        if line.startswith(("    ", "\t")):
            continue
        problems.append(f"line {number} has {len(line)} characters (at most {MAX_BODY})")
    return problems


@dataclass(frozen=True)
class Commit:
    sha: str
    message: str


class UnrelatedBase(Exception):
    """The base of ``BASE..HEAD`` is not in HEAD's history (rewritten, or another branch):
    the range would hold the whole older history instead of the commits after it."""


def commits_in_range(revisions: str, cwd: Path | None = None) -> list[Commit]:
    """The commits of ``revisions`` (``BASE..HEAD``), oldest first, merges left out.

    Raises:
        UnrelatedBase: BASE is not an ancestor of HEAD.
        subprocess.CalledProcessError: git refused a revision (unknown in this clone).
    """
    base, dots, tip = revisions.partition("..")
    if dots and base and not tip.startswith("."):
        ancestor = subprocess.run(
            ["git", "merge-base", "--is-ancestor", base, tip or "HEAD"],
            cwd=cwd,
            capture_output=True,
            text=True,
        )
        if ancestor.returncode == 1:
            raise UnrelatedBase(f"{base} is not an ancestor of {tip or 'HEAD'}")
        if ancestor.returncode != 0:
            raise subprocess.CalledProcessError(
                ancestor.returncode, ancestor.args, ancestor.stdout, ancestor.stderr
            )
    out = subprocess.run(
        ["git", "log", "--no-merges", "--reverse", "--format=%x1e%H%x00%B", revisions],
        cwd=cwd,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    commits = []
    for entry in out.split("\x1e")[1:]:
        sha, _, message = entry.partition("\x00")
        commits.append(Commit(sha, message))
    return commits


def history_missing(revisions: str, cwd: Path | None = None) -> bool:
    """Whether this is a shallow clone that lacks the base of ``revisions``: then there is
    no history to check (a CI checkout of depth 1), which is not an error."""
    base = revisions.partition("..")[0] or "HEAD"
    shallow = subprocess.run(
        ["git", "rev-parse", "--is-shallow-repository"], cwd=cwd, capture_output=True, text=True
    )
    if shallow.stdout.strip() != "true":
        return False
    known = subprocess.run(
        ["git", "cat-file", "-e", f"{base}^{{commit}}"], cwd=cwd, capture_output=True
    )
    return known.returncode != 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.tools.commitmsg",
        description="Check commit messages against the commit rule (CONTRIBUTING.md).",
    )
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--file", type=Path, help="one message file (the commit-msg hook)")
    mode.add_argument("--range", dest="revisions", help="every commit of BASE..HEAD")
    args = parser.parse_args(argv)
    failed = False
    if args.file is not None:
        message = clean_hook_message(args.file.read_text(encoding="utf-8"))
        for problem in check_message(message, allow_autosquash=True):
            print(f"commit message: {problem}", file=sys.stderr)
            failed = True
        if failed:
            print(f"(the message is kept in {args.file})", file=sys.stderr)
    else:
        if history_missing(args.revisions):
            print(f"{args.revisions}: this shallow clone does not hold the base commit; "
                  "no commit to check", file=sys.stderr)  # fmt: skip
            return 0
        try:
            commits = commits_in_range(args.revisions)
        except subprocess.CalledProcessError as exc:
            print(f"git cannot read {args.revisions}: {exc.stderr.strip()}", file=sys.stderr)
            return 2
        except UnrelatedBase as exc:
            print(f"{args.revisions}: {exc}", file=sys.stderr)
            return 2
        for commit in commits:
            subject = commit.message.partition("\n")[0]
            for problem in check_message(commit.message):
                print(f"{commit.sha[:12]} {subject}: {problem}", file=sys.stderr)
                failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
