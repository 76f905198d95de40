"""The window as people use it, in a real browser (Debian's chromium through Playwright): a model started from a
file outside every folder the window searches, a page reloaded mid-answer, a phone's width, the keyboard, files
dropped anywhere, values typed out of range, colours read against their background.

One server per module, started on SmolLM2 under a name of its own in a folder of its own (as `--model PATH`
names it), the API loading other models by name as `localchat` does. Every wait is on what the page shows.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Iterator

import httpx
import pytest

from browser_kit import ARTIFACTS, LONG, WIDE, expect, needs_chromium, open_window
from ui_server import RunningUI, start_ui

pytestmark = needs_chromium

PHONE = {"width": 390, "height": 844}


@pytest.fixture(scope="module")
def start_file(model_path: Path, tmp_path_factory) -> Path:
    """SmolLM2 as a file of the user's own, in a folder no model search looks in."""
    target = tmp_path_factory.mktemp("elsewhere") / "my-own-model.gguf"
    try:
        os.link(model_path, target)  # another path to the same bytes: nothing to copy
    except OSError:
        shutil.copyfile(model_path, target)
    return target


@pytest.fixture(scope="module")
def ui(start_file: Path, tmp_path_factory) -> Iterator[RunningUI]:
    yield from start_ui(start_file, tmp_path_factory.mktemp("tour") / "conversations.sqlite3", by_name=True)


def new_page(browser, ui: RunningUI, viewport: dict = WIDE):
    context = browser.new_context(viewport=viewport)
    page = context.new_page()
    page.set_default_timeout(60_000)
    open_window(page, ui)
    return page


@pytest.fixture()
def page(ui: RunningUI, browser):
    page = new_page(browser, ui)
    yield page
    page.context.close()


@pytest.fixture()
def phone(ui: RunningUI, browser):
    page = new_page(browser, ui, PHONE)
    yield page
    page.context.close()


def shot(page, name: str) -> None:
    page.screenshot(path=str(ARTIFACTS / f"tour-{name}.png"))


def last_reply(page):
    return page.locator("#chat .bot").last


def ask(page, question: str) -> None:
    page.locator("#message textarea").fill(question)
    page.locator("#send").click()


def open_models(page) -> None:
    page.get_by_text("Models: catalog, downloads, import").click()
    expect(page.locator("#catalog")).to_contain_text("SmolLM2-135M-Instruct")


def choose_model(page, name: str) -> None:
    page.locator("#model input").click()
    page.get_by_role("option", name=name, exact=True).click()
    expect(page.locator("#status")).to_contain_text(re.compile(r"Model:\s*" + re.escape(name)), timeout=LONG)


def test_the_model_started_with_stays_listed_and_selectable_after_a_switch_and_the_loaded_one_is_marked(
        page, ui: RunningUI, start_file: Path, browser):
    open_models(page)
    # Loaded from a folder no search looks in, the file is still among the files here, marked as the one loaded.
    expect(page.locator("#local-models tr").filter(has_text=start_file.name)).to_contain_text("loaded now")

    choose_model(page, "smollm2-135m")
    expect(page.locator("#catalog tr[data-choice='smollm2-135m:Q4_1']")).to_contain_text("loaded now")
    models = httpx.get(ui.url + "/v1/models", timeout=30).json()["data"]
    assert start_file.stem in [m["id"] for m in models], models

    # A page opened after the switch lists the first model too, and choosing it loads it again.
    later = new_page(browser, ui)
    try:
        later.locator("#model input").click()
        expect(later.get_by_role("option", name=start_file.name, exact=True)).to_be_visible()
        later.keyboard.press("Escape")
        choose_model(later, start_file.name)
        assert ui.runtime.engine.worker.model_path.name == start_file.name
        shot(later, "1-back-to-the-first-model")
    finally:
        later.context.close()
