"""A thinking model in the window, in a real browser: SmolLM2 with a thinking template (tests/thinking_model.py),
steered by a grammar (the server's default sampling) to think and then answer. The thinking streams in an
open block above the answer, closes to "Thought for N s" (its tokens counted apart from the answer's under
it), opens again on a click, stays with the chat after
a reload, and the settings drawer offers the model's thinking switch."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Iterator

import pytest
from browser_kit import ARTIFACTS, LONG, WIDE, expect, needs_chromium, open_window
from thinking_model import ANSWER, thinking_copy
from ui_server import DEFAULTS, RunningUI, start_ui

from localchat.runtime.constraints.grammar import Grammar
from localchat.runtime.sampling import SamplingParams

pytestmark = needs_chromium


@pytest.fixture(scope="module")
def ui(model_path: Path, tmp_path_factory) -> Iterator[RunningUI]:
    folder = tmp_path_factory.mktemp("thinking-window")
    steered = dataclasses.replace(DEFAULTS, max_tokens=120, base=SamplingParams(grammar=Grammar(ANSWER)))
    yield from start_ui(thinking_copy(model_path, folder), folder / "conversations.sqlite3", defaults=steered)


@pytest.fixture()
def page(ui: RunningUI, browser):
    context = browser.new_context(viewport=WIDE)
    page = context.new_page()
    page.set_default_timeout(60_000)
    open_window(page, ui)
    yield page
    context.close()


def test_the_thinking_is_a_block_above_the_answer_that_closes_when_it_is_done(page, ui: RunningUI):
    page.locator("#message textarea").fill("What is the capital of France?")
    page.locator("#send").click()
    reply = page.locator("#chat .bot").last
    block = reply.locator("details.thinking")
    expect(block.locator("summary")).to_have_text(re.compile(r"Thought for \d+ s"), timeout=LONG)
    expect(block).not_to_have_attribute("open", "")
    expect(reply).to_contain_text("TTFT", timeout=LONG)  # the answer ended: its numbers are under it
    # Its thinking and its answer tokens apart, the rate the whole writing's.
    expect(reply).to_contain_text(re.compile(r"\d+ thinking \+ \d+ answer tokens at [\d.]+ tokens/s"))
    page.set_viewport_size({"width": 1400, "height": 900})
    page.screenshot(path=str(ARTIFACTS / "browser-thinking-tokens-1400.png"))
    page.set_viewport_size(WIDE)
    answer = reply.inner_text()
    assert "</think>" not in answer and "<think>" not in answer
    page.screenshot(path=str(ARTIFACTS / "browser-thinking-closed.png"))
    block.locator("summary").click()
    expect(block.locator(".thinking-text")).to_be_visible()
    page.screenshot(path=str(ARTIFACTS / "browser-thinking-open.png"))
    saved = ui.store.list()[0]
    stored = ui.store.get(saved.id).messages[-1]
    assert stored.stats["thinking"] and "</think>" not in stored.content and stored.content.strip()
    assert " ".join(stored.stats["thinking"].split()) == " ".join(block.locator(".thinking-text").inner_text().split())
    page.reload()
    page.locator("#message textarea").wait_for()
    expect(page.locator("#chat .bot details.thinking summary").last).to_have_text(re.compile(r"Thought for"))
    page.set_viewport_size({"width": 390, "height": 844})  # on a phone, the numbers wrap under the answer
    open_window(page, ui)
    expect(page.locator("#chat .bot").last).to_contain_text(re.compile(r"\d+ thinking \+ \d+ answer tokens"))
    page.screenshot(path=str(ARTIFACTS / "browser-thinking-tokens-390.png"))


def test_the_drawer_offers_the_models_thinking_switch(page):
    page.locator("#open-settings").click()
    expect(page.locator("#settings-panel")).to_have_class(re.compile(r"\bopen\b"))
    page.locator("#thinking").scroll_into_view_if_needed()
    expect(page.locator("#thinking")).to_be_in_viewport()
    expect(page.locator("#thinking")).to_contain_text("Thinking")
    page.screenshot(path=str(ARTIFACTS / "browser-thinking-switch.png"))
