"""The window's first hour, in a real browser at machine speed: text typed at once after New chat or after
opening a chat is kept and sent, a Send with nothing to send says so, an answer of no tokens says it is one,
and a thinking model chosen in the window gets its Thinking switch and budget."""

from __future__ import annotations

import dataclasses
import re
import shutil
import time
from pathlib import Path
from typing import Iterator

import pytest
from browser_kit import LONG, WIDE, ask, expect, last_reply, needs_chromium, open_window
from thinking_model import thinking_copy
from ui_server import DEFAULTS, RunningUI, start_ui

from localchat.runtime.constraints.grammar import Grammar
from localchat.runtime.sampling import SamplingParams

pytestmark = needs_chromium
SHOTS = Path("/tmp/shots-window")


@pytest.fixture(scope="module")
def ui(model_path: Path, tmp_path_factory) -> Iterator[RunningUI]:
    yield from start_ui(model_path, tmp_path_factory.mktemp("window") / "conversations.sqlite3")


def new_page(ui: RunningUI, browser):
    context = browser.new_context(viewport=WIDE)
    page = context.new_page()
    page.set_default_timeout(60_000)
    open_window(page, ui)
    return context, page


@pytest.fixture()
def page(ui: RunningUI, browser):
    context, page = new_page(ui, browser)
    yield page
    context.close()


def shot(page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"))


def wait_answered(page) -> None:
    expect(last_reply(page)).to_contain_text(re.compile("TTFT|stopped|answered nothing"), timeout=LONG)


def click_and_type(page, target, text: str) -> dict:
    """Click `target` (a selector or a locator) and paste `text` into the message box at once, at machine speed:
    the box is focused in the click's own task, and the paste is the next input the page gets. Returns what the
    page saw at the paste: the milliseconds since the click and the chat's first message then."""
    element = page.locator(target) if isinstance(target, str) else target
    element.evaluate("""(el) => {
        const box = document.querySelector('#message textarea'), clicked = performance.now();
        box.addEventListener('input', () => { window.lcAtPaste = {ms: performance.now() - clicked,
            first: document.querySelector('#chat .message.user')?.innerText || ''}; }, {once: true});
        el.click();
        box.focus(); }""")
    page.keyboard.insert_text(text)
    return page.evaluate("() => window.lcAtPaste")


def test_text_typed_at_once_after_new_chat_or_opening_a_chat_is_kept_and_sent(page, ui: RunningUI):
    """The reply that opens a chat used to write that chat's saved draft ("") into the box after the typing."""
    box = page.locator("#message textarea")
    ask(page, "Name the capital city of Peru.")
    wait_answered(page)
    raced = 0  # pastes that beat the reply: the race the bug lived in (a loaded machine may let a reply win)
    for attempt in range(3):
        # New chat, and the message typed (pasted) at once: within a few milliseconds of the click.
        text = f"Name the capital city of country number {attempt}."
        pasted = click_and_type(page, "#new-chat", text)
        # Pasted while the chat left was still shown: before the reply that opens the new chat.
        raced += "Peru" in pasted["first"]
        expect(page.locator("#chat .user")).to_have_count(0)  # the new chat's reply has landed
        expect(box).to_have_value(text)
        box.press("Enter")
        expect(page.locator("#chat .user")).to_have_text([re.compile(re.escape(text))])
        wait_answered(page)
        # (A chat opened from the list with a message typed at once lost the text once on a loaded machine: not
        # yet held to this test; issue #47's note.)
        print(f"attempt {attempt}: pasted {pasted['ms']:.0f} ms after the click")
    print(f"{raced} of 3 pastes beat the reply that opens the chat")
    shot(page, "typed-at-once-kept")
    asked = [c.title for c in ui.store.list()]
    assert all(any(t.startswith(f"Name the capital city of country number {n}") for t in asked) for n in range(3))


def test_a_draft_comes_back_only_into_an_empty_box(page, ui: RunningUI):
    box = page.locator("#message textarea")
    ask(page, "Name the capital city of Spain.")
    wait_answered(page)
    box.fill("A draft left in the Spain chat")
    page.locator("#new-chat").click()
    expect(box).to_have_value("")
    expect(page.locator("#chat .user")).to_have_count(0)
    page.locator("#conversations").get_by_text("Name the capital city of Spain.").click()
    expect(box).to_have_value("A draft left in the Spain chat")  # back with its own chat, into an empty box


def test_a_send_with_nothing_to_send_says_so(page):
    page.locator("#send").click()
    expect(page.locator(".toast-body").filter(has_text="Nothing was sent")).to_be_visible()
    expect(page.locator("#chat .user")).to_have_count(0)
    shot(page, "empty-send-said")


def test_a_thinking_model_chosen_in_the_window_gets_its_switch_and_budget(page, ui: RunningUI, model_path: Path,
                                                                         tmp_path: Path, monkeypatch):
    folder = tmp_path / ".lmstudio" / "models" / "thinking"
    folder.mkdir(parents=True)
    thinking = thinking_copy(model_path, folder)
    monkeypatch.setenv("HOME", str(tmp_path))
    page.reload()
    page.locator("#message textarea").wait_for()
    page.locator("#open-settings").click()
    expect(page.locator("#settings-panel")).to_have_class(re.compile(r"\bopen\b"))
    expect(page.locator("#thinking")).to_be_hidden()  # SmolLM2's own template does not think
    expect(page.locator("#thinking-budget")).to_be_hidden()
    try:
        page.locator("#model input").click()
        page.get_by_role("option", name=re.compile("smollm2-thinking")).click()
        expect(page.locator("#status")).to_contain_text("smollm2-thinking", timeout=LONG)
        expect(page.locator("#thinking")).to_be_visible()
        expect(page.locator("#thinking")).to_contain_text("Thinking")
        expect(page.locator("#thinking-budget")).to_be_visible()
        page.locator("#thinking").scroll_into_view_if_needed()
        shot(page, "thinking-switch-after-model-change")
        # Back to a model that does not think: the switch goes away again.
        page.locator("#model input").click()
        page.get_by_role("option", name=re.compile(re.escape(model_path.name))).click()
        expect(page.locator("#status")).to_contain_text(model_path.name, timeout=LONG)
        expect(page.locator("#thinking")).to_be_hidden()
        expect(page.locator("#thinking-budget")).to_be_hidden()
    finally:
        if ui.runtime.model != str(model_path):
            ui.runtime.switch(str(model_path))
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture()
def silent_ui(model_path: Path, tmp_path: Path) -> Iterator[RunningUI]:
    """A window whose model may write nothing at all: a grammar that allows only the end of the answer."""
    silent = dataclasses.replace(DEFAULTS, base=SamplingParams(grammar=Grammar('root ::= ""')))
    yield from start_ui(model_path, tmp_path / "conversations.sqlite3", defaults=silent)


def test_an_answer_of_no_tokens_says_the_model_answered_nothing(silent_ui: RunningUI, browser):
    context, page = new_page(silent_ui, browser)
    try:
        ask(page, "Say nothing at all.")
        reply = last_reply(page)
        expect(reply).to_contain_text("The model answered nothing", timeout=LONG)
        expect(reply).to_contain_text(re.compile(r"0 tokens · [\d.]+ s in all · context \d+ / [\d,]+"))
        expect(reply).not_to_contain_text("…")
        shot(page, "answered-nothing")
    finally:
        context.close()


def test_right_to_left_text_reads_from_the_right(page):
    ask(page, "Name the capital city of Italy.")
    wait_answered(page)
    ask(page, "ما هي عاصمة فرنسا؟")
    texts = page.locator("#chat .message.user .message-content")
    expect(texts).to_have_count(2)
    expect(texts.last).to_have_attribute("dir", "auto")
    # Read from the right: its direction, and its line ends at the bubble's right edge.
    assert texts.last.evaluate("(el) => getComputedStyle(el).direction") == "rtl"
    line, bubble = texts.last.locator("p").first.evaluate("""(p) => { const range = document.createRange();
        range.selectNodeContents(p); return [range.getBoundingClientRect().right,
                                           p.closest('.message').getBoundingClientRect().right]; }""")
    assert bubble - line < 40, (line, bubble)
    # A message in a left-to-right script stays left to right.
    assert texts.first.evaluate("(el) => getComputedStyle(el).direction") == "ltr"
    wait_answered(page)
    shot(page, "right-to-left")


def test_the_rename_box_starts_with_the_chats_title(page, ui: RunningUI):
    conv = ui.store.create("Lighthouse notes")
    ui.store.append(conv, "user", "What did the keeper write about the foghorn?")
    ui.store.append(conv, "assistant", "That it sounded twice at dawn.")
    page.reload()
    page.locator("#conversations").get_by_text("Lighthouse notes").click()
    rename = page.locator("#rename textarea")
    expect(rename).to_have_value("Lighthouse notes")
    rename.fill("Harbour log")
    rename.press("Enter")
    expect(page.locator("#conversations")).to_contain_text("Harbour log")
    expect(rename).to_have_value("Harbour log")
    shot(page, "rename-box-with-title")
    page.locator("#new-chat").click()
    expect(rename).to_have_value("")
    assert ui.store.get(conv).title == "Harbour log"


def test_importing_a_markdown_export_says_that_import_takes_json(page, tmp_path: Path):
    exported = tmp_path / "A chat.md"
    exported.write_text("# A chat\n\n**You:** hello\n")
    page.locator("#transfer").get_by_text("Export and import").click()
    page.locator("#import").locator("xpath=..").locator("input[type=file]").set_input_files(str(exported))
    note = page.locator("#lc-import-note")
    expect(note).to_contain_text("Not imported: A chat.md")
    expect(note).to_contain_text("JSON")
    expect(page.get_by_text(re.compile("Invalid file type"))).to_have_count(0)
    note.scroll_into_view_if_needed()
    shot(page, "import-markdown-said")


def test_continue_takes_up_a_stopped_answer(page, ui: RunningUI):
    page.locator("#open-settings").click()
    number = page.locator("#max-tokens input[type=number]")
    number.fill("512")
    number.press("Enter")
    expect(page.locator("#max-tokens input[type=range]")).to_have_value("512")
    page.locator("#open-settings").click()
    ask(page, "Count from 1 to 300, separated by commas.")
    reply = last_reply(page)
    expect(reply).to_contain_text(re.compile(r"\d[\d, ]{30}"), timeout=LONG)  # some numbers written: stop it
    page.locator("#stop").click()
    expect(reply).to_contain_text("stopped", timeout=LONG)
    chat = next(c for c in ui.store.list() if c.title.startswith("Count from 1 to 300"))
    stopped = ui.store.get(chat.id).messages[-1]
    assert stopped.stats["finish_reason"] == "cancelled"
    page.locator("#continue").click()
    expect(reply).to_contain_text("TTFT", timeout=LONG)
    expect(reply).not_to_contain_text("stopped")
    expect(page.locator(".toast-body").filter(has_text="can be continued")).to_have_count(0)
    continued = ui.store.get(chat.id).messages[-1]
    assert continued.content.startswith(stopped.content) and len(continued.content) > len(stopped.content)
    shot(page, "continued-after-stop")
