"""A real browser (Debian's chromium, driven by Playwright) against the running chat window.

One server and one browser per module; each test gets a fresh browser context (its own storage),
so what one test leaves in the page never reaches the next. Every wait is on what the page shows.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Iterator

import pytest
from browser_kit import ARTIFACTS, LONG, WIDE, ask, expect, last_reply, needs_chromium, open_window
from ui_server import RunningUI, start_ui

FILLER = ("The quarterly report covers deliveries, staffing and the state of the warehouse. "
          "Shipments arrived on schedule and the team handled the seasonal peak without overtime. ")

pytestmark = needs_chromium


@pytest.fixture(scope="module")
def ui(model_path: Path, tmp_path_factory) -> Iterator[RunningUI]:
    yield from start_ui(model_path, tmp_path_factory.mktemp("browser") / "conversations.sqlite3")


@pytest.fixture()
def page(ui: RunningUI, browser):
    context = browser.new_context(viewport=WIDE, permissions=["clipboard-read", "clipboard-write"])
    page = context.new_page()
    page.set_default_timeout(60_000)
    open_window(page, ui)
    yield page
    context.close()


def shot(page, name: str, full_page: bool = False) -> None:
    page.screenshot(path=str(ARTIFACTS / f"browser-{name}.png"), full_page=full_page)


def open_new_chat(page) -> None:
    """New chat, from a chat with messages, waited for: a message sent before the server has opened the
    new chat would go to the chat that was open, then be drawn over."""
    expect(page.locator("#chat .user")).not_to_have_count(0)
    page.locator("#new-chat").click()
    expect(page.locator("#chat .user")).to_have_count(0)


def wait_answered(page, timeout: float = LONG) -> None:
    """Until the last reply carries its final stats (the streaming line says "generating" instead)."""
    expect(last_reply(page)).to_contain_text(re.compile("TTFT|stopped"), timeout=timeout)


def wait_until(check, what: str, timeout_s: float = 60.0) -> None:
    """Poll something the page cannot be asked to wait for (the clipboard)."""
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"waited {timeout_s:.0f} s for {what}"
        time.sleep(0.2)


def open_settings(page) -> None:
    """Open the settings drawer (it starts closed)."""
    page.locator("#open-settings").click()
    expect(page.locator("#settings-panel")).to_have_class(re.compile(r"\bopen\b"))


def attach_files(page, *paths: Path) -> None:
    """Choose files with the composer's attach button (its file input sits beside it)."""
    page.locator("#attach").locator("xpath=..").locator("input[type=file]").set_input_files([str(p) for p in paths])


def set_max_tokens(page, n: int) -> None:
    open_settings(page)
    number = page.locator("#max-tokens input[type=number]")
    number.fill(str(n))
    number.press("Enter")
    expect(page.locator("#max-tokens input[type=range]")).to_have_value(str(n))


def conversation_titled(ui: RunningUI, title: str):
    return next((c for c in ui.store.list() if c.title == title), None)


def test_chat_streams_an_answer_and_reads_an_attached_document(page, tmp_path: Path):
    ask(page, "Name the capital city of France.")
    expect(last_reply(page)).to_contain_text("Paris")
    wait_answered(page)
    expect(page.locator("#conversations")).to_contain_text("Name the capital city of France.")
    shot(page, "1-answer")

    open_new_chat(page)
    expect(page.locator("#chat .bot")).to_have_count(0)
    doc = tmp_path / "vault-notes.txt"
    doc.write_text(FILLER * 6 + "\n\nThe vault code is 7341.\n\n" + FILLER * 6)
    attach_files(page, doc)
    expect(page.locator("#attachments .lc-chip")).to_contain_text("vault-notes.txt")
    expect(page.locator("#meter")).to_contain_text("they fit")
    shot(page, "2-attached")
    ask(page, "What is the vault code?")
    expect(last_reply(page)).to_contain_text("7341")
    expect(last_reply(page)).to_contain_text(re.compile(r"Included:.*vault-notes\.txt whole"))
    wait_answered(page)
    expect(page.locator("#chat .user").last).to_contain_text("Attached: vault-notes.txt")
    shot(page, "3-document-answer", full_page=True)


def test_copy_copies_only_the_answer_as_markdown(page, ui: RunningUI):
    conv = ui.store.create("Copy check")
    ui.store.append(conv, "user", "Show me bold text and a tag.")
    answer = "Here is **bold** and a <tag> & more."
    ui.store.append(conv, "assistant", answer, {"prompt_tokens": 20, "cached_tokens": 0, "completion_tokens": 12,
                                                "ttft_ms": 80.0, "tokens_per_s": 90.0, "n_ctx": 4096,
                                                "finish_reason": "stop", "included": "notes.txt whole"})
    page.reload()
    page.locator("#conversations").get_by_text("Copy check").click()
    expect(last_reply(page)).to_contain_text("Included:")
    page.locator("#chat button[aria-label='Copy message']").last.click()
    wait_until(lambda: page.evaluate("navigator.clipboard.readText()") == answer, "the clipboard holds the answer")


def test_a_chat_exported_as_json_imports_back_as_a_new_chat_and_markdown_downloads(page, ui: RunningUI, tmp_path: Path):
    conv = ui.store.create("Export check")
    ui.store.append(conv, "user", "Which pier?")
    ui.store.append(conv, "assistant", "Pier 4, by the old crane.")
    page.reload()
    page.locator("#conversations").get_by_text("Export check").click()
    expect(last_reply(page)).to_contain_text("Pier 4")
    page.locator("#transfer").get_by_text("Export and import").click()
    for button, suffix in (("#export-markdown", ".md"), ("#export-json", ".json")):
        page.locator(button).click()
        link = page.locator(f'#exported a[download$="{suffix}"]')
        expect(link).to_have_count(1)
        with page.expect_download() as download:
            link.click()
        saved = tmp_path / download.value.suggested_filename
        download.value.save_as(saved)
    assert "## localchat\n\nPier 4, by the old crane." in (tmp_path / "Export check.md").read_text()
    shot(page, "export-import")
    before = len([c for c in ui.store.list() if c.title == "Export check"])
    page.locator("#import").locator("xpath=..").locator("input[type=file]").set_input_files(str(tmp_path / "Export check.json"))
    expect(page.locator("#conversations label").filter(has_text="Export check")).to_have_count(before + 1)
    imported = [c for c in ui.store.list() if c.title == "Export check" and c.id != conv]
    assert [m.content for m in ui.store.get(imported[0].id).messages] == ["Which pier?", "Pier 4, by the old crane."]


def test_html_in_a_reply_is_shown_as_text_and_never_runs(page, ui: RunningUI):
    conv = ui.store.create("Markup check")
    ui.store.append(conv, "user", "Show me some HTML.")
    ui.store.append(conv, "assistant", 'Here: <script>window.__pwned = 1</script> '
                    '<img src="x" onerror="window.__pwned = 2"> <b>bold?</b>')
    open_window(page, ui)  # loaded again, and waited for: a chat clicked before the page's load event is not opened
    page.locator("#conversations").get_by_text("Markup check").click()
    reply = last_reply(page)
    expect(reply).to_contain_text('<img src="x" onerror="window.__pwned = 2">')
    expect(reply).to_contain_text("<script>window.__pwned = 1</script>")
    assert reply.locator("img, script, b").count() == 0
    page.wait_for_timeout(500)  # an onerror handler would have fired by now
    assert page.evaluate("window.__pwned") is None
    shot(page, "4-inert-html")


def test_typing_during_an_answer_is_kept_and_a_message_sent_then_is_answered_next(page, ui: RunningUI):
    set_max_tokens(page, 400)
    ask(page, "Count from 1 to 300, separated by commas.")
    expect(last_reply(page)).to_contain_text("generating", timeout=LONG)
    box = page.locator("#message textarea")
    box.fill("Which city is the capital of France?")
    # The answer keeps streaming for a while: every update used to clear the box.
    grown = len(last_reply(page).inner_text()) + 40
    page.wait_for_function("n => document.querySelector('#chat .bot:last-of-type, #chat .bot') &&"
                           " [...document.querySelectorAll('#chat .bot')].pop().innerText.length > n", arg=grown)
    expect(box).to_have_value("Which city is the capital of France?")
    shot(page, "5-typing-while-streaming")
    box.press("Enter")  # sent mid-stream: answered once the answer in progress ends
    page.locator("#stop").click()
    expect(page.locator("#chat .user")).to_have_count(2, timeout=LONG)
    expect(page.locator("#chat .bot")).to_have_count(2, timeout=LONG)  # the message sent mid-stream is answered
    wait_answered(page)
    conv = conversation_titled(ui, "Count from 1 to 300, separated by commas.")
    messages = ui.store.get(conv.id).messages
    assert [m.role for m in messages] == ["user", "assistant", "user", "assistant"]
    assert messages[2].content == "Which city is the capital of France?"
    assert messages[-1].content.strip()  # the model's own words: the small model may not say "Paris"
    shot(page, "6-sent-mid-stream")


def test_a_message_sent_mid_answer_waits_in_the_chat_and_one_cancelled_is_never_sent(page, ui: RunningUI):
    set_max_tokens(page, 3008)  # an answer long enough to outlast what the test does meanwhile
    question = "Count from 1 to 900, separated by commas."
    ask(page, question)
    expect(last_reply(page)).to_contain_text("generating", timeout=LONG)
    waiting = page.locator("#chat .user").filter(has_text="waiting — sent when the answer ends")
    ask(page, "Name the capital city of Japan.")
    expect(waiting).to_have_count(1)
    ask(page, "Which city is the capital of France?")
    expect(waiting).to_have_count(2)
    expect(page.locator("#message textarea")).to_have_value("")
    expect(waiting.first).to_contain_text("Japan")  # in the order sent, under the answer streaming
    assert waiting.first.bounding_box()["y"] > last_reply(page).bounding_box()["y"]
    expect(last_reply(page)).to_contain_text("generating")
    shot(page, "27-waiting-messages")
    waiting.filter(has_text="Japan").get_by_role("link", name="Cancel").click()
    expect(waiting).to_have_count(1)
    expect(waiting).to_contain_text("France")
    expect(page.locator("#message textarea")).to_have_value("Name the capital city of Japan.")  # back, to edit
    expect(last_reply(page)).to_contain_text("generating")  # taken back before its turn came
    shot(page, "28-waiting-cancelled")
    page.locator("#message textarea").fill("")
    page.locator("#stop").click()  # stops the answer; the message still waiting goes next
    expect(page.locator("#chat .user")).to_have_count(2, timeout=LONG)
    expect(waiting).to_have_count(0, timeout=LONG)
    expect(page.locator("#chat .bot")).to_have_count(2, timeout=LONG)  # the waiting one is answered
    wait_answered(page)
    messages = ui.store.get(conversation_titled(ui, question).id).messages
    assert [m.content for m in messages if m.role == "user"] == [question, "Which city is the capital of France?"]
    assert messages[-1].role == "assistant" and messages[-1].content.strip()  # what it says is the model's own
    shot(page, "29-waiting-sent")


def test_expected_errors_are_toasts_that_keep_the_window_and_log_no_traceback(page, capfd):
    badges = page.locator("#chat .error, #conversations .error, #status .error, #message .error, #meter .error")
    # With no chat open there is nothing to answer again, edit, rename or delete: those wait, switched off.
    for button in ("#regenerate", "#edit", "#delete"):
        expect(page.locator(button)).to_be_disabled()
    expect(page.locator("#rename textarea")).to_be_disabled()
    shot(page, "7-empty-chat")
    too_long = "word " * 5000
    ask(page, too_long)
    expect(page.locator(".toast-body").filter(has_text="context")).to_be_visible()
    # The refusal's line comes with the event's outputs, after its toast: what the box holds then is what Send
    # left there (it held the message before Send too).
    expect(page.locator("#refusal")).to_contain_text("Not sent")
    expect(page.locator("#message textarea")).to_have_value(too_long)  # kept, to shorten it
    expect(badges).to_have_count(0)
    expect(page.locator("#conversations")).not_to_contain_text("word word")  # no empty chat made for it
    assert "Traceback" not in capfd.readouterr().err


def toggle_clickable_beside(page, toast, toggle) -> None:
    """The toggle is what a click at its middle reaches, the toast showing beside it, clear of it."""
    expect(toast).to_be_visible()
    shown, button = toast.bounding_box(), toggle.bounding_box()
    assert (shown["y"] >= button["y"] + button["height"] or shown["x"] + shown["width"] <= button["x"]
            or shown["x"] >= button["x"] + button["width"]), (shown, button)
    middle = [button["x"] + button["width"] / 2, button["y"] + button["height"] / 2]
    assert page.evaluate("([x, y]) => !!document.elementFromPoint(x, y)?.closest('#settings-panel .toggle-button')",
                         middle)


def test_a_toast_leaves_the_settings_toggle_uncovered_and_clickable(page):
    toggle, drawer = page.locator("#settings-panel .toggle-button"), page.locator("#settings-panel")
    too_long = "word " * 5000  # refused, with a toast
    ask(page, too_long)
    toast = page.locator(".toast-body").filter(has_text="context").last
    toggle_clickable_beside(page, toast, toggle)
    shot(page, "32-toast-beside-the-toggle")
    toggle.click()  # while the toast shows
    expect(drawer).to_have_class(re.compile(r"\bopen\b"))
    page.locator("#save-preset").click()  # another toast, the drawer open: its toggle has moved to the drawer's edge
    toast = page.locator(".toast-body").filter(has_text="a preset needs a name").last
    toggle_clickable_beside(page, toast, toggle)
    shot(page, "33-toast-beside-the-open-drawer")
    toggle.click()
    expect(drawer).not_to_have_class(re.compile(r"\bopen\b"))


def test_a_failed_model_switch_keeps_the_picker_on_the_model_that_answers(page, ui: RunningUI, model_path: Path,
                                                                         tmp_path: Path, monkeypatch):
    broken = tmp_path / ".lmstudio" / "models" / "broken" / "broken-model.gguf"
    broken.parent.mkdir(parents=True)
    broken.write_bytes(model_path.read_bytes()[: 1 << 20])  # a GGUF header without its weights
    monkeypatch.setenv("HOME", str(tmp_path))
    page.reload()
    before = ui.runtime.model
    page.locator("#model input").click()
    page.get_by_role("option", name=re.compile("broken-model")).click()
    expect(page.locator(".toast-body").filter(has_text=re.compile("broken-model|load", re.I))).to_be_visible(
        timeout=LONG)
    expect(page.locator("#model input")).to_have_value(Path(before).name)
    expect(page.locator("#status .error, #model .error")).to_have_count(0)
    assert ui.runtime.model == before
    shot(page, "8-failed-switch")


def test_a_long_model_name_in_the_picker_stops_before_its_arrow(page, ui: RunningUI):
    picker = page.locator("#model")
    expect(picker.locator("input")).to_have_value(Path(ui.runtime.model).name)
    # The name's text box (the input less its padding) ends left of the arrow, and a name too long for it ends
    # in "…" instead of running on under the arrow.
    text_right, arrow_left, cut = picker.locator("input").evaluate("""(box) => {
        const style = getComputedStyle(box), arrow = box.parentElement.querySelector(".icon-wrap");
        const right = box.getBoundingClientRect().right - parseFloat(style.paddingRight)
            - parseFloat(style.borderRightWidth);
        return [right, arrow.getBoundingClientRect().left, style.textOverflow]; }""")
    assert text_right <= arrow_left, (text_right, arrow_left)
    assert cut == "ellipsis"
    picker.screenshot(path=str(ARTIFACTS / "browser-8b-picker-long-name.png"))


def test_an_answer_cut_by_max_tokens_says_so(page):
    ask(page, "Count from 1 to 100, separated by commas.")  # the test server's limit is 48 tokens
    expect(last_reply(page)).to_contain_text("cut at max tokens", timeout=LONG)
    expect(last_reply(page)).to_contain_text(re.compile(r"TTFT [\d,]+ ms · 48 tokens at [\d.]+ tokens/s · [\d.]+ s in all"))
    shot(page, "9-cut-at-max-tokens")


def test_stop_while_reading_shows_only_stopped(page):
    # A long prompt no earlier test left in the cache: reading it takes many steps.
    notes = " ".join(f"Note {i}: crate {i * 7} left the dock at {i % 24}:00." for i in range(160))
    ask(page, notes + "\nWhich crate left last?")
    expect(last_reply(page)).to_contain_text("Reading the prompt", timeout=LONG)
    page.locator("#stop").click()
    expect(last_reply(page)).to_contain_text("stopped", timeout=LONG)
    expect(last_reply(page)).not_to_contain_text(re.compile("TTFT|tokens/s|Reading"))
    shot(page, "9b-stopped-while-reading")


def test_the_meter_says_whole_only_when_the_reply_will_read_the_document_whole(page, ui: RunningUI, tmp_path: Path):
    # Just under what the old meter compared with (n_ctx - 512): it said "they fit", and the reply
    # then read the document in chunks, as this message's own answer budget leaves less room.
    room, lines, text = ui.runtime.engine.n_ctx - 512, [], ""
    while ui.runtime.engine.count_tokens(text) < room - 60:
        lines.append(f"Line {len(lines)}: the shipment of week {len(lines) % 52} arrived on time.")
        text = "\n".join(lines)
    doc = tmp_path / "shipments.txt"
    doc.write_text(text)
    attach_files(page, doc)
    meter = page.locator("#meter")
    expect(meter).to_contain_text("context tokens")
    says_whole = "they fit" in meter.inner_text()
    ask(page, "Which shipment came last?")
    expect(last_reply(page)).to_contain_text("Included:", timeout=LONG)
    read_whole = re.search(r"shipments\.txt whole", last_reply(page).inner_text()) is not None
    assert says_whole == read_whole, (meter.inner_text(), last_reply(page).inner_text())
    page.locator("#stop").click()
    wait_answered(page)


def test_each_follow_up_about_a_long_document_cites_its_own_passage_which_opens(page, ui: RunningUI, tmp_path: Path,
                                                                               monkeypatch):
    monkeypatch.setattr("localchat.ingest.fit.PASSAGE_SHARE", 0.1)  # fewer passages to read: a quicker test
    facts = {40: "The keeper's cat is called Pepperpot.", 200: "The schooner Marigold ran aground on the north reef.",
             360: "The lantern room was painted a deep saffron yellow."}
    doc = tmp_path / "keeper-log.txt"
    doc.write_text("\n".join(facts.get(i, f"Day {i}: the keeper logged calm weather and trimmed the wicks.")
                             for i in range(420)))
    set_max_tokens(page, 16)
    attach_files(page, doc)
    expect(page.locator("#meter")).to_contain_text("too long for the context")
    questions = ["What is the keeper's cat called?", "Which schooner ran aground?", "What colour is the lantern room?"]
    for turn, (question, fact) in enumerate(zip(questions, facts.values())):
        ask(page, question)
        expect(page.locator("#chat .bot")).to_have_count(turn + 1)
        wait_answered(page)
        reply = last_reply(page)
        expect(reply).to_contain_text(re.compile(r"Included:.*keeper-log\.txt: lines"))
        cited = reply.locator("details.passage").filter(has_text=fact)
        expect(cited).to_have_count(1)
        expect(cited.locator(".passage-text")).not_to_be_visible()  # closed until asked for
        cited.locator("summary").click()
        expect(cited.locator(".passage-text")).to_be_visible()
        expect(cited.locator(".passage-text")).to_contain_text(fact)
    shot(page, "follow-ups-cite-their-passages", full_page=True)


def test_an_attached_document_is_read_before_the_question_and_a_detach_ends_the_read(page, ui: RunningUI,
                                                                                    tmp_path: Path):
    reading = page.locator("#reading")
    long_doc = tmp_path / "long-ledger.txt"
    long_doc.write_text("\n".join(f"Ledger {i}: vessel {i * 13 % 500} paid {i * 7 % 90} marks at gate {i % 6}."
                                  for i in range(100)))  # fits whole: read ahead
    attach_files(page, long_doc)
    expect(reading).to_contain_text("reading the document", timeout=LONG)
    shot(page, "9c-reading-ahead")
    page.get_by_role("button", name="Remove long-ledger.txt").click()
    expect(reading).not_to_contain_text("reading", timeout=LONG)  # the detach ended the read
    wait_until(lambda: not ui.runtime.engine.scheduler.running, "the read-ahead to end")

    doc = tmp_path / "auditors.txt"
    doc.write_text(FILLER * 8 + "\nThe auditor of the northern depot is called Mirela.\n" + FILLER * 4)
    attach_files(page, doc)
    expect(reading).to_contain_text("reading the document", timeout=LONG)
    expect(reading).not_to_contain_text("reading", timeout=LONG)  # read whole before any question
    ask(page, "Who is the auditor of the northern depot?")
    wait_answered(page)
    stats = re.search(r"([\d,]+) prompt tokens reused", last_reply(page).inner_text())
    n_doc = ui.runtime.engine.count_tokens(doc.read_text())
    assert stats is not None and int(stats.group(1).replace(",", "")) >= n_doc, last_reply(page).inner_text()
    shot(page, "9d-asked-after-reading")


def test_the_status_panel_gives_the_models_own_size(page):
    expect(page.locator("#status")).to_contain_text("135M parameters")
    expect(page.locator("#status")).not_to_contain_text("256M")


def test_the_title_follows_an_edit_of_the_first_message(page, ui: RunningUI):
    ask(page, "Name the capital city of Spain.")
    wait_answered(page)
    page.locator("#edit").click()  # opens the last message's own edit box: the same edit as its pencil
    box = page.locator("#chat textarea.edit-textarea")
    expect(box).to_have_value("Name the capital city of Spain.")
    page.reload()  # nothing is cut before the edit is sent
    page.locator("#message textarea").wait_for()
    expect(page.locator("#chat .user")).to_contain_text("Name the capital city of Spain.")
    page.locator("#edit").click()
    box.fill("Name the capital city of Italy.")
    page.locator("#chat button[aria-label='Submit']").click()
    # The old question is a branch, kept: shown once the edit is stored, with the new reply in place of the old
    # one (whose stats would end the wait for an answer at once).
    expect(page.locator("#chat .user").first).to_contain_text("‹ 2/2 ›")
    wait_answered(page)
    expect(page.locator("#conversations")).to_contain_text("Name the capital city of Italy.")
    conv = conversation_titled(ui, "Name the capital city of Italy.")
    assert conv is not None and conversation_titled(ui, "Name the capital city of Spain.") is None
    shot(page, "10-title-follows-edit")


def test_delete_asks_first_and_a_reload_reopens_the_last_chat(page, ui: RunningUI):
    ask(page, "Name the capital city of Germany.")
    wait_answered(page)
    page.reload()
    page.locator("#message textarea").wait_for()
    expect(page.locator("#chat .user").last).to_contain_text("Name the capital city of Germany.")
    shot(page, "11-reload-reopens")
    title = "Name the capital city of Germany."
    page.locator("#delete").click()
    confirm = page.locator("#delete-confirm")
    expect(confirm).to_be_visible()
    assert conversation_titled(ui, title) is not None  # nothing is gone before the user confirms
    shot(page, "12-delete-asks")
    page.locator("#delete-cancel").click()
    expect(confirm).to_be_hidden()
    page.locator("#delete").click()
    page.locator("#delete-yes").click()
    expect(page.locator("#chat .bot")).to_have_count(0)
    expect(page.locator("#conversations")).not_to_contain_text(title)
    assert conversation_titled(ui, title) is None


def test_the_chats_trash_icon_deletes_after_asking(page, ui: RunningUI):
    ask(page, "Name the capital city of Chile.")
    wait_answered(page)
    page.locator("#chat button[aria-label='Clear']").click()
    expect(page.locator("#delete-confirm")).to_be_visible()
    expect(page.locator("#chat .user")).to_contain_text("Name the capital city of Chile.")  # shown while it asks
    shot(page, "11b-trash-asks")
    page.locator("#delete-cancel").click()
    expect(page.locator("#delete-confirm")).to_be_hidden()  # Keep it has been heard: the chat and the store after it
    expect(page.locator("#chat .user")).to_contain_text("Name the capital city of Chile.")
    assert conversation_titled(ui, "Name the capital city of Chile.") is not None
    page.locator("#chat button[aria-label='Clear']").click()
    page.locator("#delete-yes").click()
    expect(page.locator("#conversations")).not_to_contain_text("Name the capital city of Chile.")
    expect(page.locator("#chat .user")).to_have_count(0)
    assert conversation_titled(ui, "Name the capital city of Chile.") is None


def test_the_chats_label_and_trash_icon_sit_above_the_messages_never_over_them(page, ui: RunningUI):
    conv = ui.store.create("Lighthouse log")
    for i in range(4):  # taller than the chat: its messages scroll
        ui.store.append(conv, "user", f"Entry {i}: what did the keeper write about the lamp?")
        ui.store.append(conv, "assistant", "The keeper trimmed the wicks and logged the weather. " * 10)
    page.reload()
    page.locator("#conversations").get_by_text("Lighthouse log").click()
    expect(last_reply(page)).to_contain_text("trimmed the wicks")  # opened: a reload brings it back
    for name, size in (("wide", WIDE), ("390", {"width": 390, "height": 844})):
        page.set_viewport_size(size)
        open_window(page, ui)  # the chat last open comes back
        expect(last_reply(page)).to_contain_text("trimmed the wicks")
        # The messages scroll in a box that starts below the label and the icon: nothing passes under them.
        messages_top = page.locator("#chat .bubble-wrap").evaluate("(wrap) => wrap.getBoundingClientRect().top")
        for part in ("#chat [data-testid='block-label']", "#chat button[aria-label='Clear']"):
            box = page.locator(part).bounding_box()
            assert box["y"] + box["height"] <= messages_top, (part, box, messages_top)
        page.wait_for_function("""() => { const chat = document.querySelector("#chat .bubble-wrap");
            chat.scrollTop = chat.scrollHeight / 3;
            return chat.scrollTop > 0; }""")
        shot(page, f"11c-chat-label-{name}")


def test_an_unsent_draft_stays_with_its_chat(page, ui: RunningUI):
    ask(page, "Name the capital city of Peru.")
    wait_answered(page)
    box = page.locator("#message textarea")
    box.fill("And of Bolivia?")  # not sent
    page.locator("#new-chat").click()
    expect(box).to_have_value("")  # the new chat does not inherit it
    box.fill("A draft for the new chat")
    page.locator("#conversations").get_by_text("Name the capital city of Peru.").click()
    expect(page.locator("#chat .user")).to_contain_text("Name the capital city of Peru.")
    expect(box).to_have_value("And of Bolivia?")  # back with its own chat


def test_an_answer_streaming_in_one_chat_leaves_another_chat_opened_meanwhile_alone(page, ui: RunningUI):
    """Opening another chat mid-answer: the answer goes on and is saved in its own chat, and the chat on
    screen stays the one opened (every streaming update used to draw the answering chat over it)."""
    ask(page, "Name the capital city of Chile.")
    wait_answered(page)
    open_new_chat(page)
    set_max_tokens(page, 320)
    ask(page, "Count from 1 to 200, separated by commas.")
    expect(last_reply(page)).to_contain_text("generating", timeout=LONG)
    page.locator("#conversations").get_by_text("Name the capital city of Chile.").click()
    question = re.compile(r"^Name the capital city of Chile\.\s*(Delete)?\s*$")  # the question and its Delete
    expect(page.locator("#chat .user")).to_have_text([question])
    counting = conversation_titled(ui, "Count from 1 to 200, separated by commas.")
    wait_until(lambda: [m.role for m in ui.store.get(counting.id).messages] == ["user", "assistant"],
               "the counting answer's end", 300)
    expect(page.locator("#chat .user")).to_have_text([question])  # still this chat
    ask(page, "And of Argentina?")  # sent to the chat on screen
    expect(page.locator("#chat .bot")).to_have_count(2)  # its own reply: the one before it carries stats already
    wait_answered(page)
    chile = conversation_titled(ui, "Name the capital city of Chile.")
    assert [m.content for m in ui.store.get(chile.id).messages if m.role == "user"] == [
        "Name the capital city of Chile.", "And of Argentina?"]
    shot(page, "37-other-chat-kept-while-one-answers")


def test_chats_show_dates_and_can_be_searched_and_renamed(page, ui: RunningUI):
    conv = ui.store.create("Lighthouse notes")
    ui.store.append(conv, "user", "What did the keeper write about the foghorn?")
    ui.store.append(conv, "assistant", "That it sounded twice at dawn.")
    ui.store.create("Tide tables")
    page.reload()
    chats = page.locator("#conversations")
    expect(chats).to_contain_text(re.compile(r"Lighthouse notes · \d\d:\d\d"))  # changed today: the time
    search = page.locator("#search textarea")
    search.press_sequentially("foghorn")  # typed (a filled value sends no input event); in a message, not the title
    expect(chats.locator("input[type=radio]")).to_have_count(1)
    expect(chats).to_contain_text("Lighthouse notes")
    shot(page, "16-search")
    chats.get_by_text("Lighthouse notes").click()
    expect(last_reply(page)).to_contain_text("twice at dawn")
    rename = page.locator("#rename textarea")
    rename.fill("Harbour log")
    rename.press("Enter")
    expect(chats).to_contain_text("Harbour log")
    assert ui.store.get(conv).title == "Harbour log"
    search.press("Control+a")
    search.press("Backspace")
    expect(chats).to_contain_text("Tide tables")  # every chat again


def test_a_search_that_finds_no_chat_says_so_until_the_search_changes(page, ui: RunningUI):
    conv = ui.store.create("Ferry timetable")
    ui.store.append(conv, "user", "When does the last ferry leave?")
    page.reload()
    chats, note = page.locator("#conversations"), page.locator("#search-empty")
    search = page.locator("#search textarea")
    expect(chats).to_contain_text("Ferry timetable")
    expect(note).to_be_hidden()
    search.press_sequentially("zebra crossing")
    expect(note).to_have_text("No chat matches “zebra crossing”.")
    expect(chats.locator("input[type=radio]")).to_have_count(0)
    shot(page, "30-search-no-match")
    for _ in "crossing":
        search.press("Backspace")
    search.press("Backspace")
    expect(note).to_have_text("No chat matches “zebra”.")  # follows what is typed
    search.press("Control+a")
    search.press_sequentially("ferry")  # changed to a search that finds one
    expect(chats.locator("input[type=radio]")).to_have_count(1)  # "f" alone found it too, among others
    expect(chats).to_contain_text("Ferry timetable")
    expect(note).to_be_hidden()
    # Opened, so that the new chat below changes what the page shows: the page opened with no chat, an empty
    # list and the line already, and those alone cannot tell the New chat's answer from the page before it.
    chats.get_by_text("Ferry timetable").click()
    expect(page.locator("#chat .user")).to_contain_text("When does the last ferry leave?")
    search.press_sequentially(" to nowhere")
    expect(note).to_have_text("No chat matches “ferry to nowhere”.")
    page.locator("#new-chat").click()  # the list keeps to the search: still no chat, and still said
    expect(page.locator("#chat .user")).to_have_count(0)  # the new chat, with the list as its event left it
    expect(page.locator("#chat .bot")).to_have_count(0)
    expect(chats.locator("input[type=radio]")).to_have_count(0)
    expect(note).to_have_text("No chat matches “ferry to nowhere”.")
    search.press("Control+a")
    search.press("Backspace")  # emptied: every chat again, and no line
    expect(chats).to_contain_text("Ferry timetable")
    expect(note).to_be_hidden()
    shot(page, "31-search-emptied")


def test_the_chat_list_keeps_to_the_typed_search_through_a_new_chat_and_its_answer(page, ui: RunningUI):
    conv = ui.store.create("Skerryvore keeper")  # a word no other test's chat has
    ui.store.append(conv, "user", "What did the keeper write about the foghorn?")
    ui.store.create("Tide tables")
    page.reload()
    chats, search = page.locator("#conversations"), page.locator("#search textarea")
    expect(chats).to_contain_text("Tide tables")
    search.press_sequentially("skerryvore")
    radios = chats.locator("input[type=radio]")
    expect(radios).to_have_count(1)
    chats.get_by_text("Skerryvore keeper").click()
    open_new_chat(page)  # a new chat: the list as the search finds it, not every chat
    expect(page.locator("#chat .bot")).to_have_count(0)
    expect(radios).to_have_count(1)
    # The answer's updates redraw the list (the new chat goes first) many times: each one keeps to the search.
    page.evaluate("""() => { window.__listed = [];
        new MutationObserver(() => window.__listed.push(document.querySelectorAll('#conversations input[type=radio]').length))
            .observe(document.querySelector('#conversations'), {subtree: true, childList: true}); }""")
    ask(page, "Which river runs through Rome?")
    wait_answered(page)
    expect(radios).to_have_count(1)
    expect(chats).to_contain_text("Skerryvore keeper")
    assert max(page.evaluate("window.__listed"), default=1) == 1, page.evaluate("window.__listed")
    assert conversation_titled(ui, "Which river runs through Rome?") is not None  # saved, just not found
    shot(page, "16b-search-kept-through-an-answer")
    search.press("Control+a")
    search.press("Backspace")  # emptied: every chat, the new one first
    expect(chats).to_contain_text("Which river runs through Rome?")
    expect(chats).to_contain_text("Tide tables")


def test_regenerate_keeps_the_earlier_answer_beside_the_new_one(page, ui: RunningUI):
    ask(page, "Name the capital city of Norway.")
    wait_answered(page)
    page.locator("#regenerate").click()
    expect(last_reply(page)).to_contain_text("‹ 2/2 ›", timeout=LONG)
    wait_answered(page)
    last_reply(page).get_by_role("button", name="previous answer").click()
    expect(last_reply(page)).to_contain_text("‹ 1/2 ›")
    shot(page, "17-answer-versions")
    conv = conversation_titled(ui, "Name the capital city of Norway.")
    reply = ui.store.get(conv.id).messages[-1]
    assert reply.stats["version"] == 0 and len(reply.stats["versions"]) == 2
    last_reply(page).get_by_role("button", name="next answer").click()
    expect(last_reply(page)).to_contain_text("‹ 2/2 ›")


def test_an_edited_message_forks_the_chat_and_the_old_branch_stays_reachable(page, ui: RunningUI):
    ask(page, "Name the capital city of Portugal.")
    wait_answered(page)
    ask(page, "Name the capital city of Austria.")
    expect(page.locator("#chat .bot")).to_have_count(2)
    wait_answered(page)
    page.locator("#chat button[aria-label='Edit']").first.click()
    box = page.locator("#chat textarea.edit-textarea")
    box.fill("Name the capital city of Greece.")
    page.locator("#chat button[aria-label='Submit']").click()
    expect(page.locator("#chat .user")).to_have_count(1)
    expect(page.locator("#chat .user")).to_contain_text("Name the capital city of Greece.")
    wait_answered(page)
    first = page.locator("#chat .user").first
    expect(first).to_contain_text("‹ 2/2 ›")  # the old branch is kept: a version of this turn
    shot(page, "18-edited-in-place")
    conv = conversation_titled(ui, "Name the capital city of Greece.")  # the title followed the first message
    messages = ui.store.get(conv.id).messages
    assert [m.role for m in messages] == ["user", "assistant"] and "Greece" in messages[0].content
    first.get_by_role("button", name="previous branch").click()  # back to the first branch, its later turns with it
    expect(page.locator("#chat .user")).to_have_count(2)
    expect(first).to_contain_text("‹ 1/2 ›")
    expect(page.locator("#chat .user").last).to_contain_text("Name the capital city of Austria.")
    expect(page.locator("#conversations")).to_contain_text("Name the capital city of Portugal.")
    shot(page, "18b-first-branch")
    # Its edit box holds the message alone, not the notes the chat shows under it.
    page.locator("#chat button[aria-label='Edit']").first.click()
    expect(box).to_have_value("Name the capital city of Portugal.")
    page.locator("#chat button[aria-label='Cancel']").click()
    first.get_by_role("button", name="next branch").click()
    expect(page.locator("#chat .user")).to_have_count(1)
    expect(first).to_contain_text("Name the capital city of Greece.")
    expect(first).to_contain_text("‹ 2/2 ›")
    ask(page, "And of Turkey?")  # the chat goes on from the branch shown
    expect(page.locator("#chat .bot")).to_have_count(2)
    wait_answered(page)
    messages = ui.store.get(conv.id).messages
    assert [m.content for m in messages if m.role == "user"] == ["Name the capital city of Greece.", "And of Turkey?"]
    assert [m["content"] for m in messages[0].stats["branches"][0] if m["role"] == "user"] == [
        "Name the capital city of Portugal.", "Name the capital city of Austria."]


def test_the_edit_box_of_a_short_message_is_roomy_and_grows_with_its_text(page, ui: RunningUI):
    conv = ui.store.create("Short question")
    ui.store.append(conv, "user", "Why?")
    ui.store.append(conv, "assistant", "Because the tide was high.")
    page.reload()
    page.locator("#conversations").get_by_text("Short question").click()
    expect(last_reply(page)).to_contain_text("the tide")
    page.locator("#chat button[aria-label='Edit']").first.click()
    box = page.locator("#chat textarea.edit-textarea")
    expect(box).to_have_value("Why?")
    chat_width = page.locator("#chat .bubble-wrap").bounding_box()["width"]
    lines = box.evaluate("(box) => box.clientHeight / parseFloat(getComputedStyle(box).lineHeight)")
    assert box.bounding_box()["width"] >= 0.6 * chat_width and lines >= 3, (box.bounding_box(), chat_width, lines)
    shot(page, "18c-edit-box")
    box.fill("Why was the harbour closed on Tuesday morning, and who decided it?\nAnd when does it open again?\n"
             "Which ships had to wait outside?\nWere any of them carrying grain?")
    # Every line in view, none behind a scroll bar.
    page.wait_for_function("(box) => box.scrollHeight <= box.clientHeight + 1", arg=box.element_handle())
    shot(page, "18d-edit-box-grown")
    page.locator("#chat button[aria-label='Cancel']").click()
    expect(box).to_have_count(0)
    expect(page.locator("#chat .user")).to_contain_text("Why?")


def test_esc_stops_a_shortcut_starts_a_new_chat_and_the_theme_toggles(page, ui: RunningUI):
    set_max_tokens(page, 400)
    ask(page, "Count from 1 to 300, separated by commas, please.")
    expect(last_reply(page)).to_contain_text("generating", timeout=LONG)
    page.keyboard.press("Escape")
    expect(last_reply(page)).to_contain_text("stopped", timeout=LONG)
    page.keyboard.press("Control+Shift+O")
    expect(page.locator("#chat .bot")).to_have_count(0)
    body = page.locator("body")
    expect(body).not_to_have_class(re.compile(r"\bdark\b"))  # the OS (here: the browser) says light
    page.locator("#theme-toggle").click()
    expect(body).to_have_class(re.compile(r"\bdark\b"))
    open_window(page, ui)
    expect(body).to_have_class(re.compile(r"\bdark\b"))  # the pick is remembered
    shot(page, "19-dark")
    page.locator("#theme-toggle").click()
    expect(body).not_to_have_class(re.compile(r"\bdark\b"))


def test_a_file_dropped_on_the_chat_is_attached(page):
    page.evaluate("""() => {
        const files = new DataTransfer();
        files.items.add(new File(["The locker code is 2468."], "drop-note.txt", {type: "text/plain"}));
        document.querySelector("#chat").dispatchEvent(
            new DragEvent("drop", {dataTransfer: files, bubbles: true, cancelable: true}));
    }""")
    expect(page.locator("#attachments .lc-chip")).to_contain_text("drop-note.txt")
    expect(page.locator("#meter")).to_contain_text("they fit")
    shot(page, "20-dropped")


def test_the_settings_drawer_offers_every_sampling_setting_beside_the_chat(page, ui: RunningUI):
    page.set_viewport_size({"width": 1400, "height": 900})
    open_settings(page)
    names = ("temperature", "top-p", "max-tokens", "top-k", "min-p", "repeat-penalty", "seed", "presence-penalty",
             "frequency-penalty")
    for elem_id in names:
        expect(page.locator(f"#{elem_id}")).to_be_visible()
    expect(page.locator("#min-p input[type=range]")).to_have_attribute("max", "0.99")  # min_p must stay below 1
    expect(page.locator("#presence-penalty input[type=range]")).to_have_attribute("min", "-2")
    expect(page.locator("#context-note")).to_contain_text("4,096 tokens")
    # Beside the chat, not under it: the conversation and the message box stay in view.
    expect(page.locator("#temperature")).to_be_in_viewport()
    expect(page.locator("#chat")).to_be_in_viewport()
    expect(page.locator("#message textarea")).to_be_in_viewport()
    drawer = page.locator("#settings-panel").bounding_box()
    assert drawer["x"] >= page.locator("#message textarea").bounding_box()["x"] + 300  # at the chat's right
    expect(page.locator("#settings-panel")).to_be_in_viewport(ratio=1)  # slid in whole, nothing cut at the edge
    shot(page, "21-settings-1400")
    for elem_id, value in (("top-k", "1"), ("min-p", "0.1"), ("presence-penalty", "0.5"), ("frequency-penalty", "0.3")):
        number = page.locator(f"#{elem_id} input[type=number]")
        number.fill(value)
        number.press("Enter")
        expect(page.locator(f"#{elem_id} input[type=range]")).to_have_value(value)
    seed = page.locator("#seed input")
    seed.fill("7")
    seed.press("Tab")
    # What the chat does when it outgrows the context: rolling unless the chat says otherwise.
    overflow = page.locator("#context-overflow input")
    expect(overflow).to_have_value("Leave out the oldest turns")
    overflow.click()
    page.get_by_role("option", name="Refuse the message").click()
    expect(overflow).to_have_value("Refuse the message")
    shot(page, "21b-context-overflow")
    ask(page, "Name the capital city of Sweden.")
    wait_answered(page)
    settings = conversation_titled(ui, "Name the capital city of Sweden.").settings
    assert settings["top_k"] == 1 and settings["min_p"] == 0.1 and settings["seed"] == 7
    assert settings["presence_penalty"] == 0.5 and settings["frequency_penalty"] == 0.3
    assert settings["context_overflow"] == "refuse"
    page.locator("#new-chat").click()  # a new chat starts from the defaults again: a random seed among them
    expect(page.locator("#presence-penalty input[type=range]")).to_have_value("0")
    expect(seed).to_have_value("")
    expect(overflow).to_have_value("Leave out the oldest turns")
    ask(page, "Name the capital city of Denmark.")
    wait_answered(page)
    assert conversation_titled(ui, "Name the capital city of Denmark.").settings["seed"] is None
    page.set_viewport_size({"width": 420, "height": 800})
    open_window(page, ui)
    open_settings(page)
    expect(page.locator("#frequency-penalty")).to_be_visible()
    shot(page, "22-settings-420")
    page.locator("#settings-panel .toggle-button").click()  # closed again, the chat is as it was
    expect(page.locator("#settings-panel")).not_to_have_class(re.compile(r"\bopen\b"))
    expect(page.locator("#system textarea")).not_to_be_in_viewport()  # slid out
    expect(page.locator("#message textarea")).to_be_in_viewport()
    shot(page, "23-settings-closed-420")


def test_settings_saved_as_a_preset_start_new_chats_and_set_a_chat_when_picked(page, ui: RunningUI):
    from localchat.ui.chat.presets import Presets

    page.set_viewport_size({"width": 1400, "height": 900})
    open_settings(page)
    temperature = page.locator("#temperature input[type=number]")
    system = page.locator("#system textarea")
    try:
        system.fill("Answer in five words or fewer.")
        temperature.fill("0.3")
        temperature.press("Enter")
        page.locator("#preset-name textarea").fill("Terse")
        page.locator("#preset-default input").check()
        page.locator("#save-preset").click()
        expect(page.locator("#preset input")).to_have_value("Terse")
        saved = Presets().get("Terse")
        assert saved is not None and saved.system_prompt == "Answer in five words or fewer."
        assert saved.settings["temperature"] == 0.3 and saved.n_ctx == ui.runtime.engine.n_ctx
        shot(page, "24-preset-saved")
        # Away from the preset's values first, so the new chat's own can be told apart (and waited for).
        system.fill("")
        temperature.fill("0.9")
        temperature.press("Enter")
        expect(page.locator("#temperature input[type=range]")).to_have_value("0.9")
        page.locator("#new-chat").click()  # a new chat starts from the default preset
        expect(system).to_have_value("Answer in five words or fewer.")
        expect(page.locator("#temperature input[type=range]")).to_have_value("0.3")
        temperature.fill("1.2")
        temperature.press("Enter")
        expect(page.locator("#temperature input[type=range]")).to_have_value("1.2")
        ask(page, "Name the capital city of Finland.")
        wait_answered(page)
        page.locator("#preset input").click()
        page.get_by_role("option", name="Terse").click()  # picked: the chat's settings become the preset's
        expect(page.locator("#temperature input[type=range]")).to_have_value("0.3")
        wait_until(lambda: conversation_titled(ui, "Name the capital city of Finland.").settings["temperature"]
                   == 0.3, "the picked preset kept with the chat")
        page.locator("#delete-preset").click()
        expect(page.locator("#preset input")).to_have_value("")
        assert Presets().names() == [] and Presets().default() is None
        page.locator("#new-chat").click()  # no default preset: the server's defaults again
        expect(system).to_have_value("")
    finally:
        for name in Presets().names():  # never leave a default preset to the tests after this one
            Presets().delete(name)


def test_the_context_length_is_shown_and_a_new_one_reloads_the_model(page, ui: RunningUI):
    open_settings(page)
    box = page.locator("#n-ctx input")
    expect(box).to_have_value("4096")
    expect(page.locator("#context-note")).to_contain_text("trained for 8,192")
    engine = ui.runtime.engine
    try:
        check_context_reloads(page, ui, box, engine)
    finally:  # the other tests expect the module's server at 4,096 tokens
        ui.runtime.switch(ui.runtime.model, n_ctx=4096)


def check_context_reloads(page, ui: RunningUI, box, engine) -> None:
    box.fill("2048")
    page.locator("#reload-context").click()
    expect(page.locator("#context-note")).to_contain_text("Context: 2,048 tokens", timeout=LONG)
    expect(page.locator("#status")).to_contain_text("2,048 tokens")
    assert ui.runtime.engine is not engine and ui.runtime.engine.n_ctx == 2048
    shot(page, "24-context-2048")
    ask(page, "Name the capital city of Finland.")  # the reloaded model answers
    wait_answered(page)
    expect(last_reply(page)).to_contain_text("/ 2,048")
    expect(box).to_have_value("2048")  # the status of each answer leaves a length being typed alone
    box.fill("99999")  # over what the model was trained for: refused, nothing reloads
    page.locator("#reload-context").click()
    expect(page.locator(".toast-body").filter(has_text="out of range")).to_be_visible()
    expect(box).to_have_value("2048")
    box.fill("4096")  # as the other tests expect it
    page.locator("#reload-context").click()
    expect(page.locator("#context-note")).to_contain_text("Context: 4,096 tokens", timeout=LONG)
    assert ui.runtime.engine.n_ctx == 4096


def test_files_attached_with_the_button_are_chips_with_token_counts_that_can_be_removed(page, ui: RunningUI,
                                                                                          tmp_path: Path):
    notes, plan = tmp_path / "harbour-notes.txt", tmp_path / "tide-plan.md"
    notes.write_text(FILLER * 3 + "The harbour master is called Ines.\n")
    plan.write_text("# Tides\n\nHigh water at 06:10.\n")
    expect(page.locator("#composer #attach")).to_be_visible()  # in the input row, beside the message box
    attach_files(page, notes, plan)
    chips = page.locator("#attachments .lc-chip")
    expect(chips).to_have_count(2)
    from localchat.ingest import document_tokens, extract_isolated

    # The tokens of what the model reads: the document as the prompt holds it (its source markers
    # included), counted by the engine's tokenizer.
    core_counts = {path.name: document_tokens(extract_isolated(path), ui.runtime.engine.count_tokens)
                   for path in (notes, plan)}
    for name, n in core_counts.items():
        expect(chips.filter(has_text=name)).to_contain_text(f"{n:,} tokens")
    expect(page.locator("#meter")).to_contain_text(f"{sum(core_counts.values()):,} of 4,096 context tokens")
    shot(page, "25-chips")
    chips.filter(has_text="tide-plan.md").get_by_role("button", name="Remove tide-plan.md").click()
    expect(chips).to_have_count(1)
    expect(chips).to_contain_text("harbour-notes.txt")
    expect(page.locator("#meter")).to_contain_text(f"{core_counts['harbour-notes.txt']:,} of 4,096")
    shot(page, "26-chip-removed")
    ask(page, "What is the harbour master called?")
    expect(chips).to_have_count(0)  # sent with the message
    wait_answered(page)
    expect(page.locator("#chat .user").last).to_contain_text("Attached: harbour-notes.txt")
    conv = conversation_titled(ui, "What is the harbour master called?")
    assert [Path(p).name for p in ui.store.get(conv.id).messages[0].stats["documents"]] == ["harbour-notes.txt"]


def test_at_phone_width_the_sidebar_starts_closed_and_leaves_the_chat_visible(page, ui: RunningUI):
    page.set_viewport_size({"width": 1400, "height": 900})
    open_window(page, ui)
    chats = page.locator(".sidebar:not(.right)")  # the list's sidebar; the settings drawer is the right one
    expect(chats).to_have_class(re.compile(r"\bopen\b"))  # wide: the list beside the chat
    expect(page.locator("#new-chat")).to_be_in_viewport()
    expect(page.locator("#message textarea")).to_be_in_viewport()
    shot(page, "13-wide-1400")
    page.set_viewport_size({"width": 420, "height": 800})
    open_window(page, ui)
    expect(chats).not_to_have_class(re.compile(r"\bopen\b"))
    expect(page.locator("#new-chat")).not_to_be_in_viewport()  # slid out to the left, not over the chat
    expect(page.locator("#message textarea")).to_be_in_viewport()
    shot(page, "13-phone-width")


def overlap(a: dict, b: dict) -> bool:
    return (a["x"] < b["x"] + b["width"] and b["x"] < a["x"] + a["width"] and a["y"] < b["y"] + b["height"]
            and b["y"] < a["y"] + a["height"])


def wait_covered_by(page, box: dict, drawer: str) -> None:
    """Until a click at the middle of `box` reaches `drawer` (slid in over it), not something floating over it."""
    page.wait_for_function("([x, y, drawer]) => !!document.elementFromPoint(x, y)?.closest(drawer)",
                           arg=[box["x"] + box["width"] / 2, box["y"] + box["height"] / 2, drawer])


def test_at_390_by_844_the_message_box_the_chat_and_the_drawers_are_clear_of_each_other(page, ui: RunningUI):
    conv = ui.store.create("Harbour ships")
    for i in range(6):  # longer than the chat's height: the "↓" back to the latest message shows
        ui.store.append(conv, "user", f"Question {i}: tell me about the harbour and its ships.")
        ui.store.append(conv, "assistant", "The harbour holds many ships. " * 12)
    page.set_viewport_size({"width": 390, "height": 844})
    open_window(page, ui)
    chats, toggle = page.locator(".sidebar:not(.right)"), page.locator(".sidebar:not(.right) .toggle-button")
    expect(chats).not_to_have_class(re.compile(r"\bopen\b"))  # starts closed: it would cover the chat
    toggle.click()
    page.locator("#conversations").get_by_text("Harbour ships").click()
    expect(chats).not_to_have_class(re.compile(r"\bopen\b"))  # a chat picked, the sidebar gives the chat back
    expect(last_reply(page)).to_contain_text("many ships")
    box = page.locator("#message textarea")
    for part in ("#chat", "#message textarea", "#attach", "#send", "#stop"):
        expect(page.locator(part)).to_be_in_viewport(ratio=1)
    shown = box.bounding_box()
    for other in ("#chat", "#attach", "#send", "#stop", ".sidebar:not(.right) .toggle-button",
                  "#settings-panel .toggle-button"):
        assert not overlap(shown, page.locator(other).bounding_box()), other
    # The placeholder on one line, whole: nothing of it cut at the box's edge.
    assert page.evaluate("""(box) => { const style = getComputedStyle(box);
        const pen = document.createElement("canvas").getContext("2d");
        pen.font = `${style.fontWeight} ${style.fontSize} ${style.fontFamily}`;
        const room = box.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
        return pen.measureText(box.placeholder).width <= room && box.scrollHeight <= box.clientHeight; }""",
                         box.element_handle())
    # Scrolled up to the first message (again on each try: an update of the chat scrolls it back down).
    page.wait_for_function("""() => { const chat = document.querySelector("#chat .bubble-wrap");
        chat.scrollTop = 0;
        chat.dispatchEvent(new Event("scroll"));
        return !!document.querySelector("#chat .scroll-down-button-container button"); }""", polling=500)
    down = page.locator("#chat .scroll-down-button-container button")
    expect(down).to_be_visible()
    down_box = down.bounding_box()  # where it shows, whether or not the chat keeps it once a drawer covers it
    assert overlap(down_box, page.locator("#chat").bounding_box())  # inside the chat
    assert not overlap(down_box, shown)
    shot(page, "34-phone-390")
    toggle.click()  # the sidebar over the chat: the "↓" stays under it
    expect(chats).to_have_class(re.compile(r"\bopen\b"))
    expect(chats).to_be_in_viewport(ratio=1)
    wait_covered_by(page, down_box, ".sidebar:not(.right)")
    shot(page, "35-phone-390-sidebar")
    toggle.click()
    open_settings(page)
    expect(page.locator("#settings-panel")).to_be_in_viewport(ratio=1)  # slid in whole
    wait_covered_by(page, down_box, "#settings-panel")
    shot(page, "36-phone-390-settings")


def test_the_hardware_wizard_tunes_from_the_window_and_switches_to_the_kept_model(page, ui: RunningUI, tmp_path,
                                                                                   monkeypatch, model_path: Path):
    from localchat.paths import models_dir

    # A home of its own holding the catalog's SmolLM2 alone: the profile the wizard saves must not reach other
    # tests, and with downloads off the wizard measures every model file here (at most two).
    home = tmp_path / "home"
    (home / "cache" / "models").mkdir(parents=True)
    (home / "cache" / "models" / model_path.name).symlink_to(models_dir() / model_path.name)
    monkeypatch.setenv("LOCALCHAT_HOME", str(home))
    # The load check has tests of its own (test_tune.py); here other programs on a shared machine must not
    # stop the wizard the window runs.
    from localchat.ui.wizard import tuning

    plain = tuning.tune_command
    monkeypatch.setattr(tuning, "tune_command", lambda *a, **k: [*plain(*a, **k), "--allow-busy"])
    page.reload()
    wizard = page.get_by_text("Hardware wizard (not tuned yet)")  # closed, its title saying so
    expect(wizard).to_be_visible()
    wizard.click()
    note = page.locator("#tune-note")
    expect(note).to_contain_text("has not been tuned yet")
    # The Models panel, opened before the wizard runs, says the same; it must follow the wizard on its own.
    page.get_by_text("Models: catalog, downloads, import").click()
    tuned_row = page.locator("#catalog tr[data-choice='smollm2-135m:Q4_1']")
    expect(tuned_row).to_contain_text("not tuned")
    page.locator("#tune-button").scroll_into_view_if_needed()
    expect(page.locator("#tune-button")).to_be_in_viewport()  # the sidebar has slid in
    shot(page, "14-wizard-offered")
    expect(page.locator("#tune-download input")).not_to_be_checked()  # no gigabytes fetched unless asked
    page.locator("#tune-placements input").uncheck()  # test_tune measures placements; here the window's part
    # Cancelled once it is under way: nothing is kept, and the wizard can be run again.
    # Its progress shows above the chat, as wide as the chat: the steps, the one under way, its latest lines.
    progress, log = page.locator("#tune-progress .lc-tune-progress"), page.locator("#tune-progress .lc-tune-log pre")
    page.locator("#tune-button").click()
    expect(progress.locator(".lc-tune-now")).to_have_text(re.compile("Measure the candidates"), timeout=300_000)
    expect(progress.locator(".lc-tune-recent")).to_contain_text("measuring smollm2-135m")
    expect(progress.locator(".lc-tune-done")).to_have_text(["✓ Read this machine", "✓ Plan the candidates"])
    view, chat = progress.bounding_box(), page.locator("#chat").bounding_box()
    assert view["width"] >= 0.95 * chat["width"] and view["y"] + view["height"] <= chat["y"] + 1  # above it
    shot(page, "14b-wizard-progress")
    page.locator("#tune-cancel").click()
    expect(progress).to_have_attribute("data-state", "cancelled", timeout=60_000)
    expect(progress).to_contain_text("Cancelled: nothing was kept")
    expect(page.locator("#tune-cancel")).to_be_hidden(timeout=60_000)
    expect(note).to_contain_text("has not been tuned yet")
    page.locator("#tune-hide").click()  # the report of a run that ended goes at the user's word
    expect(progress).to_be_hidden()
    page.locator("#tune-button").click()
    expect(progress.locator(".lc-tune-now")).to_have_text(re.compile("Measure the candidates"), timeout=300_000)
    expect(note).to_contain_text("Tuned", timeout=900_000)
    expect(note).to_contain_text("smollm2-135m Q4_1")
    expect(progress).to_have_attribute("data-state", "kept")
    expect(progress.locator(".lc-tune-head")).to_contain_text("Kept smollm2-135m Q4_1")
    expect(progress.locator(".lc-tune-later, .lc-tune-now, .lc-tune-ended")).to_have_count(0)  # every step ended
    expect(log).to_contain_text("placement: not measured (asked not to)")
    shot(page, "14c-wizard-report")
    assert ui.runtime.model.startswith(str(home))  # now answering with the tuned file
    expect(page.locator("#status")).to_contain_text("SmolLM2")
    # No reload: the Models panel shows the speed the wizard measured, and "best here" where the planner,
    # corrected by that measurement, now puts it.
    from localchat.models.catalog import load_catalog
    from localchat.tune.profile import load_profile
    from localchat.ui.models.model_browser import best_plan, machine, wants_for
    from localchat.ui.models.models_html import rate

    profile = load_profile()
    expect(tuned_row).not_to_contain_text("not tuned", timeout=60_000)
    expect(tuned_row).to_contain_text(rate(profile.decode_tps))
    best = best_plan(machine(), load_catalog(), wants_for(profile))
    assert best is not None
    expect(page.locator("#catalog tr.lc-best")).to_have_count(1)
    expect(page.locator("#catalog tr.lc-best")).to_have_attribute("data-choice", f"{best.model}:{best.quant}")
    tuned_row.scroll_into_view_if_needed()
    shot(page, "15b-wizard-done-models-panel")
    shot(page, "15-wizard-done", full_page=True)
    ask(page, "Name the capital city of France.")
    expect(last_reply(page)).to_contain_text("Paris", timeout=LONG)
