"""The HA example of docs/js-client.md, run as written in a page of a real broker, twice:
the second run (after a reload) resumes after what the first one discarded."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from playwright.sync_api import Page

from tests.support.server import SpoolProcess

pytestmark = pytest.mark.browser

DOC = Path(__file__).resolve().parents[2] / "docs" / "js-client.md"


def example() -> str:
    """The ```js block after the `ha-example` marker, its static import made dynamic (a
    page.evaluate body is a function, not a module)."""
    text = DOC.read_text()
    start = text.index("<!-- ha-example")
    block = re.search(r"```js\n(.*?)```", text[start:], re.S)
    assert block is not None
    return re.sub(
        r'import \{([^}]*)\} from "([^"]+)";', r'const {\1} = await import("\2");', block.group(1)
    )


def test_the_documented_example_runs_and_resumes(
    page: Page, dashboard_server: SpoolProcess
) -> None:
    page.goto(f"{dashboard_server.http_url}/query")
    # wait until the last message published by this run was discarded: a run that started
    # over from EPOCH would have handed over the earlier run's messages before it
    script = (
        "async (last) => {\n"
        + example()
        + "\nconst deadline = Date.now() + 10000;"
        + "\nconst done = () => (ha.bookmarkStore.resumePoint('orders-view') || '').includes(`|${last}|`);"
        + "\nwhile (!done() && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));"
        + "\nconst out = { seen, unpersisted: ha.unpersistedCount(), done: done() };"
        + "\nawait ha.close(); return out; }"
    )
    first = page.evaluate(script, 3)
    page.reload()
    second = page.evaluate(script, 6)
    expected = [{"id": i, "qty": 10 * i} for i in (1, 2, 3)]
    assert first == {"seen": expected, "unpersisted": 0, "done": True}
    # the second run published seqs 4..6 and resumed after the first run's three
    assert second == {"seen": expected, "unpersisted": 0, "done": True}
