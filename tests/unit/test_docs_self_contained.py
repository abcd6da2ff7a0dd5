"""The repository documents itself: its docs are the specifications of record.

Two checks over every tracked text file (``git ls-files``; binary files and
``node_modules`` skipped):

1. Nothing refers to the specifications' old home outside the repository: no ``../shared``
   and none of the file names ``PROTOCOL.md``, ``CONFIG.md``, ``ADMIN_API.md``,
   ``ARCHITECTURE.md``, ``STYLE.md``, ``TOOLCHAIN.md`` (case-sensitive, so
   ``docs/protocol.md`` is fine). A clone has none of them; the docs say what they said.

2. Every section citation names a heading that exists. The citation syntax, as the tree
   writes it::

       docs/NAME.md "Section"
       docs/NAME.md, "Section"
       docs/NAME.md "Section", "Other section"

   on one line: the path, an optional comma, one space, then one or more double-quoted
   section names separated by ``", "``. Inside ``docs/`` the ``docs/`` prefix may be left
   out (``protocol.md "Slow clients"``) when ``NAME.md`` is a page of ``docs/``. A section
   name matches a heading of the cited page (any level, ``#`` marks and backquotes
   removed) when it equals the heading, or the heading's leading phrase: its part before
   the first ``": "``, ``", "``, ``" ("`` or ``" - "`` (``"Logon options"`` cites
   ``## Logon options: failover notices and replicated acks``). Case counts. Headings
   inside fenced code blocks are not headings. A failure names the citing ``file:line``.

This file is the one place the old names are written, to say what is forbidden.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: what must not appear: the specifications' old home outside the repository
OUTSIDE = re.compile(
    r"\.\./shared|(?<![\w-])(?:PROTOCOL|CONFIG|ADMIN_API|ARCHITECTURE|STYLE|TOOLCHAIN)\.md"
)

#: ``docs/NAME.md "A"`` / ``docs/NAME.md, "A", "B"`` (group 1: the page, 2: the names)
CITATION = re.compile(
    r'(?<![\w/.-])((?:docs/)?[a-z0-9][a-z0-9-]*\.md),? ("[^"\n]+"(?:, "[^"\n]+")*)'
)
SECTION = re.compile(r'"([^"\n]+)"')
#: where a heading's leading phrase, by which it may be cited, ends
LEADING_PHRASE_ENDS = (": ", ", ", " (", " - ")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")


def tracked_text_files() -> Iterator[tuple[str, str]]:
    """(path, text) of every tracked text file outside node_modules."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=False)
    if listed.returncode != 0:
        pytest.skip("not a git checkout: no list of tracked files")
    names = listed.stdout.split(b"\0")
    for raw in names:
        name = raw.decode()
        if not name or "node_modules/" in name:
            continue
        path = ROOT / name
        if not path.is_file():
            continue
        data = path.read_bytes()
        if b"\0" in data[:8192]:
            continue
        try:
            yield name, data.decode()
        except UnicodeDecodeError:
            continue


@cache
def headings(page: str) -> frozenset[str]:
    """The names a section of ``docs/PAGE`` may be cited by (empty: no such page)."""
    path = ROOT / "docs" / page
    if not path.is_file():
        return frozenset()
    names: set[str] = set()
    fenced = False
    for line in path.read_text().splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        m = None if fenced else HEADING.match(line)
        if m:
            title = m.group(1).replace("`", "")
            names.add(title)
            names.update(title.split(sep, 1)[0] for sep in LEADING_PHRASE_ENDS if sep in title)
    return frozenset(names)


THIS_FILE = Path(__file__).resolve().relative_to(ROOT).as_posix()


def test_nothing_refers_outside_the_repository() -> None:
    found = [
        f"{name}:{n}: {m.group(0)}"
        for name, text in tracked_text_files()
        if name != THIS_FILE
        for n, line in enumerate(text.splitlines(), 1)
        for m in OUTSIDE.finditer(line)
    ]
    assert not found, "references to files outside the repository:\n" + "\n".join(found)


def citations() -> Iterator[tuple[str, int, str, str]]:
    """(citing file, line, cited page, section) of every section citation."""
    for name, text in tracked_text_files():
        in_docs = name.startswith("docs/")
        for n, line in enumerate(text.splitlines(), 1):
            for m in CITATION.finditer(line):
                cited = m.group(1)
                if cited.startswith("docs/"):
                    page = cited.removeprefix("docs/")
                elif in_docs and (ROOT / "docs" / cited).is_file():
                    page = cited
                else:
                    continue
                for section in SECTION.findall(m.group(2)):
                    yield name, n, page, section


def test_cited_sections_exist() -> None:
    seen = 0
    bad = []
    for name, n, page, section in citations():
        seen += 1
        known = headings(page)
        if not known:
            bad.append(f"{name}:{n}: docs/{page} does not exist")
        elif section.replace("`", "") not in known:
            bad.append(f'{name}:{n}: docs/{page} has no section "{section}"')
    assert not bad, "citations of missing sections:\n" + "\n".join(bad)
    # the syntax still matches how the tree cites (a check that sees nothing proves nothing)
    assert seen > 100


def test_headings_and_leading_phrases() -> None:
    known = headings("protocol.md")
    assert {"Acks", "Transport and framing", "Logon options"} <= known
    assert "Framing" not in known and "acks" not in known
