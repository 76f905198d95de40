"""One message of a chat, in a real browser (Debian's chromium through Playwright): the ‹ › of an answer's versions
and of a turn's branches (one control), a message deleted (asked first, stored, exported as it is now), and a chat
whose earlier turn pinned a document after the context shrank under it.

The tour's server (test_browser_tour.py: SmolLM2 on the real runtime) and its helpers; every wait is on what the page
shows or on what the store holds.
"""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path

from browser_kit import LONG, ask, expect, last_reply, needs_chromium, open_window
from test_browser import FILLER, attach_files
from test_browser_tour import (PHONE, open_chat, page, phone, rgb, set_max_tokens, shot,  # noqa: F401
                               start_file, stored_chat, ui)
from ui_server import RunningUI

from localchat.ui.chat import transfer

pytestmark = needs_chromium

DESKTOP = {"width": 1400, "height": 900}  # the screenshots' desktop


def wait_for(check, what: str, timeout_s: float = LONG / 1000):
    """Poll the store for what the page cannot show (every version kept, a flag stored)."""
    deadline = time.monotonic() + timeout_s
    while not (found := check()):
        assert time.monotonic() < deadline, f"waited {timeout_s:.0f} s for {what}"
        time.sleep(0.2)
    return found


def chat_titled(ui: RunningUI, title: str):
    return next(c for c in ui.store.list() if c.title == title)


def versions_and_branches(ui: RunningUI, title: str) -> str:
    """A stored chat whose question was edited once (2 branches, the first shown) and whose answer was
    regenerated once (2 versions, the second shown)."""
    conv = ui.store.create(title)
    other = [{"role": "user", "content": "Which quay?", "stats": {}},
             {"role": "assistant", "content": "Quay 2.", "stats": {}}]
    ui.store.append(conv, "user", "Which pier?", {"branches": [None, other], "branch": 0})
    ui.store.append(conv, "assistant", "Pier 5.", {"versions": [{"content": "Pier 4.", "stats": {}},
                                                                {"content": "Pier 5.", "stats": {}}], "version": 1})
    return conv


def test_ten_quick_regenerates_each_keep_a_version_and_the_arrows_step_through_them_by_keyboard(page, ui):
    page.set_viewport_size(DESKTOP)
    question = "Name the capital city of Chile."
    ask(page, question)
    expect(last_reply(page)).to_contain_text("TTFT", timeout=LONG)
    for _ in range(10):  # as fast as the button takes clicks: none is dropped
        page.locator("#regenerate").click()
    conv = chat_titled(ui, question)

    def all_kept():
        reply = ui.store.get(conv.id).messages[-1]
        return reply.role == "assistant" and len(reply.stats.get("versions", [])) == 11

    wait_for(all_kept, "eleven versions of the answer")
    reply = last_reply(page)
    expect(reply).to_contain_text("‹ 11/11 ›", timeout=LONG)
    previous, following = (reply.get_by_role("button", name="previous answer"),
                           reply.get_by_role("button", name="next answer"))
    expect(following).to_be_disabled()  # the last version: nowhere further
    expect(previous).to_be_enabled()
    previous.focus()
    page.keyboard.press("Enter")
    expect(reply).to_contain_text("‹ 10/11 ›")
    expect(previous).to_be_focused()  # drawn anew, the arrow keeps the keyboard's focus
    page.keyboard.press("Enter")
    expect(reply).to_contain_text("‹ 9/11 ›")
    assert ui.store.get(conv.id).messages[-1].stats["version"] == 8
    shot(page, "11-ten-versions")


def test_versions_and_branches_share_one_control_disabled_at_the_ends(page, phone, ui: RunningUI):
    page.set_viewport_size(DESKTOP)
    versions_and_branches(ui, "Arrows alike")
    for shown in (page, phone):
        shown.reload()
        open_window(shown, ui)
        open_chat(shown, "Arrows alike")
    turn, reply = page.locator("#chat .user").first, last_reply(page)
    expect(turn).to_contain_text("‹ 1/2 ›")
    expect(reply).to_contain_text("‹ 2/2 ›")
    expect(turn.get_by_role("button", name="previous branch")).to_be_disabled()
    expect(turn.get_by_role("button", name="next branch")).to_be_enabled()
    expect(reply.get_by_role("button", name="previous answer")).to_be_enabled()
    expect(reply.get_by_role("button", name="next answer")).to_be_disabled()
    expect(page.locator("#chat a[href^='#lc-branch-']")).to_have_count(0)  # no link look left

    def look(button) -> dict:
        return button.evaluate("(b) => { const s = getComputedStyle(b), r = b.getBoundingClientRect();"
                               " return {font: s.fontSize, weight: s.fontWeight, border: s.borderRadius,"
                               " width: Math.round(r.width), height: Math.round(r.height)}; }")

    assert look(turn.get_by_role("button", name="next branch")) == look(
        reply.get_by_role("button", name="previous answer"))
    shot(page, "12-arrows")
    expect(phone.locator("#chat .user").first).to_contain_text("‹ 1/2 ›")
    arrow = phone.locator("#chat .bot").last.get_by_role("button", name="previous answer").bounding_box()
    assert arrow["width"] >= 24 and arrow["height"] >= 24, arrow  # a finger's target
    shot(phone, "12b-arrows-phone")
    # Keyboard: the enabled arrow takes the focus, Enter switches the branch.
    page.locator("#chat .user").first.get_by_role("button", name="next branch").focus()
    page.keyboard.press("Enter")
    expect(page.locator("#chat .user").first).to_contain_text("Which quay?")
    expect(page.locator("#chat .user").first).to_contain_text("‹ 2/2 ›")


def test_an_earlier_answers_versions_switch_and_the_chat_after_each_goes_with_it(page, ui: RunningUI):
    page.set_viewport_size(DESKTOP)
    conv = versions_and_branches(ui, "Earlier versions")
    ui.store.append(conv, "user", "Which crane?", {})
    ui.store.append(conv, "assistant", "Crane 3.", {})
    page.reload()
    open_window(page, ui)
    open_chat(page, "Earlier versions")
    first = page.locator("#chat .bot").first
    expect(first).to_contain_text("‹ 2/2 ›")
    first.get_by_role("button", name="previous answer").click()  # an earlier answer's arrow is live
    expect(page.locator("#chat .bot")).to_have_count(1)  # the chat goes on from the version shown: nothing yet
    expect(first).to_contain_text("Pier 4.")
    expect(first).to_contain_text("‹ 1/2 ›")
    shot(page, "12c-earlier-version")
    first.get_by_role("button", name="next answer").click()
    expect(page.locator("#chat .user").last).to_contain_text("Which crane?")  # what followed it came back
    expect(page.locator("#chat .bot")).to_have_count(2)
    expect(first).to_contain_text("Pier 5.")
    assert [m.content for m in ui.store.get(conv).messages] == ["Which pier?", "Pier 5.", "Which crane?", "Crane 3."]


def test_a_message_is_deleted_after_asking_beside_it_and_stays_deleted_in_a_reload_and_the_export(page, phone, ui):
    page.set_viewport_size(DESKTOP)
    conv = ui.store.create("Two questions")
    for role, text, stats in (("user", "First question?", {}), ("assistant", "First answer.", {}),
                              ("user", "Second question?", {}),
                              ("assistant", "Unwanted answer.", {"versions": [{"content": "Kept answer.", "stats": {}},
                                                                          {"content": "Unwanted answer.", "stats": {}}],
                                                             "version": 1})):
        ui.store.append(conv, role, text, stats)
    page.reload()
    open_window(page, ui)
    open_chat(page, "Two questions")
    expect(last_reply(page)).to_contain_text("Unwanted answer.")
    first_turn = page.locator("#chat .user").first
    asker = first_turn.get_by_role("button", name="delete this message and its answer")
    asker.click()
    ask_box = page.locator("#lc-ask-message")
    expect(ask_box).to_be_visible()
    expect(ask_box).to_contain_text("Delete this message and its answer for good?")
    box, button = ask_box.bounding_box(), asker.bounding_box()
    assert abs(box["y"] - (button["y"] + button["height"])) < 80, (box, button)  # beside what asked
    red, green, _ = rgb(ask_box.get_by_role("button", name="Delete").evaluate(
        "b => getComputedStyle(b).backgroundColor"))
    assert red > 150 and green < 80, (red, green)
    shot(page, "13-message-delete-asks")
    ask_box.get_by_role("button", name="Keep it").click()
    expect(ask_box).to_be_hidden()
    assert len(ui.store.get(conv).messages) == 4  # kept: nothing was asked of the server

    asker.click()
    ask_box.get_by_role("button", name="Delete").click()
    expect(page.locator("#chat .user")).to_have_count(1)
    expect(page.locator("#chat .user").first).to_contain_text("Second question?")
    assert [m.content for m in ui.store.get(conv).messages] == ["Second question?", "Unwanted answer."]

    # One version of an answer: the one shown goes, the other is shown in its place.
    last_reply(page).get_by_role("button", name="delete this answer version").click()
    expect(ask_box).to_contain_text("Delete this version of the answer for good?")
    ask_box.get_by_role("button", name="Delete").click()
    expect(last_reply(page)).to_contain_text("Kept answer.")
    expect(last_reply(page)).not_to_contain_text("1/1")
    page.reload()
    open_window(page, ui)
    open_chat(page, "Second question?")  # the first question named the chat; now the second does
    expect(page.locator("#chat .user")).to_have_count(1)
    expect(last_reply(page)).to_contain_text("Kept answer.")
    stored = ui.store.get(conv)
    exported = transfer.to_markdown(stored) + transfer.to_json([stored])
    assert "First question?" not in exported and "Unwanted answer." not in exported, exported
    assert json.loads(transfer.to_json([stored]))["chats"][0]["messages"][1]["content"] == "Kept answer."

    phone.reload()
    open_window(phone, ui)
    open_chat(phone, "Second question?")
    phone.locator("#chat .user").first.get_by_role("button", name="delete this message and its answer").click()
    on_phone = phone.locator("#lc-ask-message")
    expect(on_phone).to_be_visible()
    shown = on_phone.bounding_box()
    assert 0 <= shown["x"] and shown["x"] + shown["width"] <= PHONE["width"], shown
    shot(phone, "13b-message-delete-asks-phone")
    phone.keyboard.press("Escape")  # Esc keeps it
    expect(on_phone).to_be_hidden()
    assert len(ui.store.get(conv).messages) == 2


def test_a_message_deleted_while_its_chat_answers_is_refused_with_a_line_and_the_answer_goes_on(page, ui):
    page.set_viewport_size(DESKTOP)
    set_max_tokens(page, 400)
    question = "Count from 1 to 300, separated by commas."
    ask(page, question)
    expect(last_reply(page)).to_contain_text("generating", timeout=LONG)
    page.locator("#chat .user").first.get_by_role("button", name="delete this message and its answer").click()
    page.locator("#lc-ask-message").get_by_role("button", name="Delete").click()
    expect(page.locator(".toast-body").filter(has_text="an answer is being written")).to_be_visible()
    conv = chat_titled(ui, question)
    assert ui.store.get(conv.id).messages[0].content == question
    page.locator("#stop").click()
    expect(last_reply(page)).to_contain_text("stopped", timeout=LONG)
    # Once the answer has ended, the same Delete does it.
    page.locator("#chat .user").first.get_by_role("button", name="delete this message and its answer").click()
    page.locator("#lc-ask-message").get_by_role("button", name="Delete").click()
    expect(page.locator("#chat .user")).to_have_count(0)
    wait_for(lambda: ui.store.get(conv.id).messages == [], "the turn deleted")


def test_a_chat_whose_earlier_turn_pinned_a_document_is_not_stuck_after_the_context_shrinks(page, phone, ui,
                                                                                             tmp_path: Path):
    page.set_viewport_size(DESKTOP)
    doc = tmp_path / "harbour-log.txt"
    doc.write_text(FILLER * 9 + "\n\nThe harbour master is Ines Varga.\n\n" + FILLER * 9)  # ~650 tokens
    attach_files(page, doc)
    expect(page.locator("#meter")).to_contain_text("they fit")
    question = "Who is the harbour master?"
    ask(page, question)
    expect(last_reply(page)).to_contain_text("TTFT", timeout=LONG)
    conv = chat_titled(ui, question)
    assert ui.store.get(conv.id).messages[0].stats["mode"] == "whole"
    before = ui.runtime.engine.n_ctx
    ui.runtime.switch(ui.runtime.model, n_ctx=512)  # the model reloaded with a context the document outgrows
    try:
        for shown in (page, phone):
            shown.reload()
            open_window(shown, ui)
            open_chat(shown, question)
            ask(shown, "Thank you. What day is it?")
            refusal = shown.locator("#refusal")
            expect(refusal).to_contain_text("Not sent")
            expect(refusal).to_contain_text("harbour-log.txt")  # the document in the way, by name
            expect(refusal.locator("#leave-out")).to_be_visible()
        expect(phone.locator(".toast-body")).to_have_count(0, timeout=LONG)  # the toast fades; the refusal stays
        expect(phone.locator("#refusal")).to_be_visible()
        shot(phone, "14b-pinned-refusal-phone")
        expect(page.locator(".toast-body")).to_have_count(0, timeout=LONG)
        shot(page, "14-pinned-refusal")
        page.locator("#leave-out").click()  # the way out, from the window: the message is sent again
        expect(page.locator("#refusal")).to_have_count(0)
        expect(page.locator("#chat .user").last).to_contain_text("What day is it?", timeout=LONG)
        expect(last_reply(page)).to_contain_text(re.compile("TTFT|cut at max tokens"), timeout=LONG)
        expect(last_reply(page)).to_contain_text("left out to fit the context")
        messages = ui.store.get(conv.id).messages
        assert messages[0].stats.get("unpinned") is True
        assert messages[-2].content == "Thank you. What day is it?" and messages[-2].stats["left_out"] == [0]
        ask(page, "And what day is tomorrow?")  # the chat goes on, the document left out
        expect(page.locator("#chat .user").last).to_contain_text("And what day is tomorrow?")
        wait_for(lambda: len(ui.store.get(conv.id).messages) == 6, "the third answer kept")
        expect(page.locator("#chat .bot")).to_have_count(3)
        expect(last_reply(page)).to_contain_text(re.compile("TTFT|cut at max tokens"), timeout=LONG)
        expect(last_reply(page)).not_to_contain_text("Reading the prompt")
        shot(page, "14c-pinned-left-out")
    finally:
        ui.runtime.switch(ui.runtime.model, n_ctx=before)


def reading_ahead() -> bool:
    """Whether a thread of this process (the test server's) is in the attached documents' read-ahead."""
    def frames(frame):
        while frame is not None:
            yield frame
            frame = frame.f_back
    return any(f.f_code.co_filename.endswith("pre_read.py")
               for top in sys._current_frames().values() for f in frames(top))


def timers_shown(page) -> list[str]:
    """Gradio's progress timers ("0.4s", "processing | 0.1/11.9s") drawn in the composer's lines above the message
    box (the attached files and the reading line), as they read on screen."""
    return page.evaluate("""() => [...document.querySelectorAll('#attachments *, #reading *')]
        .filter((e) => !e.children.length && /\\d\\.\\ds|processing/.test(e.textContent) && e.checkVisibility({
            opacityProperty: true, visibilityProperty: true}))
        .map((e) => e.textContent.trim())""")


def test_attaching_a_long_document_while_an_answer_streams_shows_no_gradio_timer_in_the_reading_line(page, phone, ui,
                                                                                                     tmp_path: Path):
    page.set_viewport_size(DESKTOP)
    long_doc = tmp_path / "long-report.txt"
    long_doc.write_text(FILLER * 400)  # ~11,000 tokens: seconds to read (a short one showed no timer)
    question = "Count from 1 to 250, separated by commas."
    set_max_tokens(page, 400)
    ask(page, question)
    expect(last_reply(page)).to_contain_text("generating", timeout=LONG)
    phone.reload()
    open_window(phone, ui)
    open_chat(phone, question)  # the chat's settings: long answers
    for shown in (page, phone):
        if shown is phone:
            ask(phone, "And from 300 down to 1?")
            expect(last_reply(phone)).to_contain_text("generating", timeout=LONG)
        attach_files(shown, long_doc)
        seen: list[str] = []
        while not shown.locator("#attachments .lc-chip").count():  # until the file is read and its chip shows
            seen += timers_shown(shown)
        seen += timers_shown(shown)
        assert not seen, seen
        # Too long to read whole, it is searched per question: its read-ahead only chunks it, on the server's
        # thread, which must have ended before the server stops (a tokenizer on a closed model crashes).
        wait_for(lambda: not reading_ahead(), "the read-ahead to end")
        shown.locator("#stop").click()
