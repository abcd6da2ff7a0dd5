"""The browser client's replay rate: static/spool-client.js in Chromium (Playwright).

A page of the broker's own origin (the broker refuses websockets from foreign origins)
imports the module, subscribes from EPOCH with a batch callback that counts every message
and reads its bookmark (so every message object is built), and reports ``performance.now()`` stamps; the harness converts
them to the broker-side monotonic clock by the offset measured just before (the page and
the harness are different processes, so each stamp is taken where the event happens and
the elapsed time comes from one clock, the page's).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Final

CHROMIUM: Final = Path(os.environ.get("SPOOL_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS: Final = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]

_SCRIPT: Final = """async ({url, name, topic, expected, timeoutMs}) => {
  const { SpoolClient } = await import('/static/spool-client.js');
  const client = new SpoolClient(url, { name });
  await client.connect();
  let count = 0;
  let first = 0;
  let last = 0;
  let bookmark = null;
  let resolve;
  const done = new Promise((r) => { resolve = r; });
  const start = performance.now();
  await client.subscribe(topic, {
    bookmark: '0',
    onBatch: (batch) => {
      if (!first) first = performance.now();
      count += batch.length;
      bookmark = batch[batch.length - 1].bookmark;
      if (count >= expected) { last = performance.now(); resolve(); }
    },
  });
  await Promise.race([done, new Promise((_, reject) =>
    setTimeout(() => reject(new Error(`replay timed out at ${count}`)), timeoutMs))]);
  client.close();
  return { start, first, last, count, bookmark };
}"""


def browser_replay(
    *, url: str, name: str, topic: str, expected: int, timeout: float
) -> dict[str, Any]:
    """One replay in a fresh Chromium; stamps are nanoseconds from the page's start stamp
    (``start_ns`` is 0)."""
    from playwright.sync_api import sync_playwright

    http_url = url.replace("ws://", "http://").rsplit("/amps/", 1)[0]
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            page.goto(f"{http_url}/healthz")
            res = page.evaluate(
                _SCRIPT,
                {"url": url, "name": name, "topic": topic, "expected": expected,
                 "timeoutMs": int(timeout * 1000)},
            )  # fmt: skip
        finally:
            browser.close()
    to_ns = 1e6  # performance.now() is in milliseconds
    return {
        "start_ns": 0,
        "first_ns": int((res["first"] - res["start"]) * to_ns),
        "last_ns": int((res["last"] - res["start"]) * to_ns),
        "count": int(res["count"]),
    }


__all__ = ["browser_replay"]
