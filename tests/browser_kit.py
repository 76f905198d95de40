"""What the Playwright suites share: the system Chromium, where screenshots go, launching it, and a window
opened and ready."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest

from ui_server import RunningUI

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"
BROWSER_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                "--disable-component-update", "--no-first-run"]
WIDE = {"width": 1280, "height": 900}
LONG = 180_000  # ms: an answer of a few hundred tokens, or a download, with one core busy elsewhere

needs_chromium = pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium "
                                    "(apt-get install -y chromium)")
sync_api = pytest.importorskip("playwright.sync_api", reason="needs the playwright Python package")
expect = sync_api.expect
expect.set_options(timeout=60_000)  # waits on the page, never a short fixed time: the machine may be busy


def launched() -> Iterator[Any]:
    """One headless system Chromium, closed afterwards (conftest's `browser` fixture)."""
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=BROWSER_ARGS, headless=True)
        yield browser
        browser.close()


def open_window(page, ui: RunningUI) -> None:
    page.goto(ui.url + "/")
    page.locator("#message textarea").wait_for()
    expect(page.locator("#status")).to_contain_text("Context")  # the page's load event has run


def last_reply(page):
    return page.locator("#chat .bot").last


def ask(page, question: str) -> None:
    page.locator("#message textarea").fill(question)
    page.locator("#send").click()
