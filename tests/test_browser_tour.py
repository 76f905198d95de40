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
import time
from pathlib import Path
from typing import Iterator

import httpx
import pytest

from browser_kit import ARTIFACTS, LONG, WIDE, ask, expect, last_reply, needs_chromium, open_window
from ui_server import RunningUI, start_ui

from localchat.ui.chat import render

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


def open_models(page) -> None:
    page.get_by_text("Models: catalog, downloads, import").click()
    expect(page.locator("#catalog")).to_contain_text("SmolLM2-135M-Instruct")


def choose_model(page, name: str) -> None:
    page.locator("#model input").click()
    page.get_by_role("option", name=name, exact=True).click()
    expect(page.locator("#status")).to_contain_text(re.compile(r"Model:\s*" + re.escape(name)), timeout=LONG)


def test_the_model_started_with_stays_listed_and_selectable_after_a_switch_and_the_loaded_one_is_marked(
        page, ui: RunningUI, start_file: Path, model_path: Path, browser):
    open_models(page)
    # Loaded from a folder no search looks in, the file is still among the files here, marked as the one loaded.
    expect(page.locator("#local-models tr").filter(has_text=start_file.name)).to_contain_text("loaded now")

    choose_model(page, model_path.name)  # the catalog's SmolLM2, found in the hub cache
    expect(page.locator("#catalog tr[data-choice='smollm2-135m:Q4_1']")).to_contain_text("loaded now")
    models = httpx.get(ui.url + "/v1/models", timeout=30).json()["data"]
    assert start_file.stem in [m["id"] for m in models], models

    # A page opened after the switch lists the first model too, and choosing it loads it again.
    later = new_page(browser, ui)
    try:
        choose_model(later, start_file.name)
        assert ui.runtime.engine.worker.model_path.name == start_file.name
        shot(later, "1-back-to-the-first-model")
    finally:
        later.context.close()


def open_settings(page) -> None:
    page.locator("#open-settings").click()
    expect(page.locator("#settings-panel")).to_have_class(re.compile(r"\bopen\b"))


def set_max_tokens(page, n: int) -> None:
    open_settings(page)
    number = page.locator("#max-tokens input[type=number]")
    number.fill(str(n))
    number.press("Enter")
    expect(page.locator("#max-tokens input[type=range]")).to_have_value(str(n))
    page.locator("#open-settings").click()


def open_chat(page, title: str) -> None:
    """Open a chat from the list (on a phone the sidebar is opened first: it starts closed)."""
    sidebar = page.locator(".sidebar").first
    if "open" not in (sidebar.get_attribute("class") or ""):
        sidebar.locator(".toggle-button").click()
        expect(sidebar).to_have_class(re.compile(r"\bopen\b"))
    page.locator("#conversations").get_by_text(title).click()
    expect(page.locator("#chat .user").first).to_be_visible()


def stored_chat(ui: RunningUI, title: str, question: str = "Which pier?", answer: str = "Pier 4.",
                stats: dict | None = None) -> str:
    conv = ui.store.create(title)
    ui.store.append(conv, "user", question)
    if answer:
        ui.store.append(conv, "assistant", answer, stats or {})
    return conv


def test_a_model_without_a_chat_template_is_called_a_base_model_in_the_window(page, ui: RunningUI, model_path: Path,
                                                                                tmp_path_factory):
    from test_base_model import without_template

    base = without_template(model_path, tmp_path_factory.mktemp("base") / "no-template.gguf")
    before = ui.runtime.model
    ui.runtime.switch(str(base))
    try:
        page.reload()
        open_window(page, ui)
        expect(page.locator("#status")).to_contain_text("a base model")
        ask(page, "Name the capital city of France.")
        expect(last_reply(page)).to_contain_text(re.compile("TTFT|cut at max tokens"), timeout=LONG)
        expect(last_reply(page)).not_to_contain_text("<|im_start|>")
        shot(page, "2-base-model")
    finally:
        ui.runtime.switch(before)


def test_an_answer_goes_on_through_a_reload_and_the_reloaded_page_follows_it_to_its_end(page, ui: RunningUI):
    set_max_tokens(page, 400)
    question = "Count from 1 to 300, separated by commas."
    ask(page, question)
    expect(last_reply(page)).to_contain_text("generating", timeout=LONG)
    page.reload()
    open_window(page, ui)
    # The same chat, its answer still being written, and then ended with its numbers.
    expect(page.locator("#chat .user").first).to_contain_text(question)
    expect(last_reply(page)).to_contain_text("generating", timeout=LONG)
    expect(last_reply(page)).to_contain_text("TTFT", timeout=LONG)
    conv = next(c for c in ui.store.list() if c.title == question)
    reply = ui.store.get(conv.id).messages[-1]
    assert reply.role == "assistant" and reply.stats["finish_reason"] in ("stop", "length"), reply.stats
    assert reply.stats["completion_tokens"] > 40
    shot(page, "3-answer-after-reload")


def test_a_chat_left_without_its_answer_by_a_stop_of_the_server_says_so_and_regenerate_answers_it(page, ui):
    stored_chat(ui, "Left unanswered", "Name the capital city of France.", answer="")
    page.reload()
    open_window(page, ui)
    open_chat(page, "Left unanswered")
    expect(last_reply(page)).to_contain_text("interrupted")
    page.locator("#regenerate").click()
    expect(last_reply(page)).to_contain_text("TTFT", timeout=LONG)
    expect(last_reply(page)).not_to_contain_text("interrupted")


def test_on_a_phone_the_chats_trash_icon_asks_beside_itself_and_delete_looks_destructive(phone, ui: RunningUI):
    conv = stored_chat(ui, "Trash on a phone")
    phone.reload()
    open_window(phone, ui)
    open_chat(phone, "Trash on a phone")
    # Picking the chat closed the sidebar, which covered it.
    expect(phone.locator(".sidebar").first).not_to_have_class(re.compile(r"\bopen\b"))
    trash = phone.locator("#chat button[aria-label='Clear']")
    trash.click()
    confirm = phone.locator("#delete-confirm")
    expect(confirm).to_be_visible()
    box, icon = confirm.bounding_box(), trash.bounding_box()
    assert 0 <= box["x"] and box["x"] + box["width"] <= PHONE["width"], box
    assert 0 <= box["y"] and box["y"] + box["height"] <= PHONE["height"], box
    assert abs(box["y"] - (icon["y"] + icon["height"])) < 80, (box, icon)  # beside the icon that asked
    red, green, _ = rgb(phone.locator("#delete-yes").evaluate("b => getComputedStyle(b).backgroundColor"))
    assert red > 150 and green < 80, (red, green)
    shot(phone, "4-phone-delete-asks")
    phone.locator("#delete-yes").click()
    expect(confirm).to_be_hidden()
    assert ui.store.get(conv) is None


def test_on_a_desktop_the_sidebars_delete_asks_beside_itself(page, ui: RunningUI):
    stored_chat(ui, "Delete beside")
    page.reload()
    open_window(page, ui)
    open_chat(page, "Delete beside")
    page.locator("#delete").click()
    confirm = page.locator("#delete-confirm")
    expect(confirm).to_be_visible()
    box, asked = confirm.bounding_box(), page.locator("#delete").bounding_box()
    assert abs(box["y"] - (asked["y"] + asked["height"])) < 80 and abs(box["x"] - asked["x"]) < 400, (box, asked)
    shot(page, "4b-desktop-delete-asks")
    page.locator("#delete-cancel").click()
    expect(confirm).to_be_hidden()


def test_max_tokens_follows_a_short_context_and_a_refusal_stays_beside_the_message_box(page, ui: RunningUI):
    before = ui.runtime.engine.n_ctx
    ui.runtime.switch(ui.runtime.model, n_ctx=512)
    try:
        page.reload()
        open_window(page, ui)
        open_settings(page)
        slider = page.locator("#max-tokens input[type=range]")
        expect(slider).to_have_attribute("max", "384")
        page.locator("#open-settings").click()
        replies = page.locator("#chat .bot").count()  # the reopened chat's, from earlier tests
        ask(page, "Name the capital city of France.")  # a chat kept from the 4,096 context sends, and is answered
        expect(page.locator("#chat .bot")).to_have_count(replies + 1)
        expect(last_reply(page)).to_contain_text(re.compile("TTFT|cut at max tokens"), timeout=LONG)
        ask(page, "Please read this. " * 200)  # ~800 tokens: more than the whole context
        refusal = page.locator("#refusal")
        expect(refusal).to_contain_text("Not sent")
        expect(refusal).to_contain_text("Max tokens")
        expect(page.locator(".toast-body")).to_have_count(0, timeout=LONG)  # the toast fades; the refusal stays
        expect(refusal).to_be_visible()
        shot(page, "5-refusal-stays")
    finally:
        ui.runtime.switch(ui.runtime.model, n_ctx=before)


def drag_file(page, selector: str, name: str, text: str) -> None:
    """Drag a file over `selector` and drop it there, as the system's file manager does."""
    data = page.evaluate_handle("([name, text]) => { const dt = new DataTransfer();"
                                " dt.items.add(new File([text], name, {type: 'text/plain'})); return dt; }",
                                [name, text])
    target = page.locator(selector)
    target.dispatch_event("dragenter", {"dataTransfer": data})
    target.dispatch_event("dragover", {"dataTransfer": data})
    expect(page.locator("#lc-drop-zone")).to_be_visible()
    shot(page, "6-drop-zone")
    target.dispatch_event("drop", {"dataTransfer": data})
    expect(page.locator("#lc-drop-zone")).to_be_hidden()


def test_a_file_dropped_anywhere_in_the_window_is_attached_and_an_unsupported_one_says_so_briefly(page):
    drag_file(page, "#conversations", "dropped-notes.txt", "The vault code is 7341.")
    expect(page.locator("#attachments .lc-chip")).to_contain_text("dropped-notes.txt")
    drag_file(page, "#status", "picture.xyz", "not a document")
    note = page.locator("#lc-file-note")
    expect(note).to_contain_text("Not attached: picture.xyz")
    said = note.inner_text()
    assert len(said) < 200, said
    expect(page.get_by_text(re.compile("Invalid file type"))).to_have_count(0)
    shot(page, "6b-unsupported-file")


def test_a_rejected_model_import_names_the_file_not_a_server_path(page, tmp_path: Path):
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF" + (7).to_bytes(4, "little") + bytes(64))  # a version no reader knows
    open_models(page)
    page.locator("#import-gguf input[type=file]").set_input_files(str(broken))
    toast = page.locator(".toast-body").filter(has_text="broken.gguf")
    expect(toast).to_be_visible()
    said = toast.inner_text()
    assert not re.search(r"[0-9a-f]{32}", said) and "/" not in said, said


def test_a_value_typed_out_of_range_is_brought_into_it_in_the_windows_words(page):
    open_settings(page)
    number = page.locator("#temperature input[type=number]")
    number.fill("5")
    number.press("Enter")
    expect(page.locator("#temperature input[type=range]")).to_have_value("2")
    expect(page.locator("#temperature .lc-clamped")).to_contain_text("Temperature goes from 0 to 2, so 5 was set to 2")
    expect(page.get_by_text(re.compile("greater than maximum"))).to_have_count(0)
    shot(page, "7-clamped")


def test_the_chat_list_is_one_tab_stop_with_arrow_keys_and_the_message_box_has_the_keys_on_load(page, ui):
    for n in range(4):
        stored_chat(ui, f"Keyboard chat {n}", f"Question number {n}?")
    page.reload()
    open_window(page, ui)
    expect(page.locator("#message textarea")).to_be_focused()
    page.locator("#search input, #search textarea").first.focus()
    page.keyboard.press("Tab")
    first = page.evaluate("document.activeElement.closest('#conversations') !== null")
    assert first, "Tab from the search goes into the chat list"
    page.keyboard.press("ArrowDown")
    expect(page.locator("#chat .user").first).to_be_visible()
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.closest('#conversations') === null"), "one Tab leaves the list"


def contrast_of(locator) -> float:
    """The WCAG contrast ratio of an element's text against the background it is drawn on."""
    return locator.evaluate("""(el) => {
        const parse = (c) => (c.match(/[\\d.]+/g) || []).map(Number);
        const lum = ([r, g, b]) => [r, g, b].map((v) => { v /= 255;
            return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; })
            .reduce((s, v, i) => s + v * [0.2126, 0.7152, 0.0722][i], 0);
        let bg = null;
        for (let node = el; node && !bg; node = node.parentElement) {
            const c = parse(getComputedStyle(node).backgroundColor);
            if (c.length === 3 || (c.length === 4 && c[3] > 0.5)) bg = c;
        }
        const [a, b] = [lum(parse(getComputedStyle(el).color)), lum(bg || [255, 255, 255])];
        return (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05); }""")


def rgb(css: str) -> list[float]:
    return [float(x) for x in re.findall(r"[\d.]+", css)[:3]]


def test_chips_the_meter_and_passage_titles_read_at_aa_contrast(page, ui: RunningUI, tmp_path: Path):
    passage = {"document": "notes.txt", "label": "section 2", "text": "The vault code is 7341."}
    stored_chat(ui, "Passage contrast", "What is the code?", "7341.", {"passages": [passage]})
    page.reload()
    open_window(page, ui)
    open_chat(page, "Passage contrast")
    doc = tmp_path / "contrast-notes.txt"
    doc.write_text("The vault code is 7341.\n" * 20)
    page.locator("#attach").locator("xpath=..").locator("input[type=file]").set_input_files(str(doc))
    expect(page.locator("#attachments .lc-chip")).to_contain_text("contrast-notes.txt")
    for locator in (page.locator(".lc-chip-tokens").first, page.locator("#meter"),
                    page.locator("#chat details.passage summary").first):
        assert contrast_of(locator) >= 4.5, (locator, contrast_of(locator))
    shot(page, "8-contrast")


def test_a_first_screen_offers_only_what_can_be_done_and_each_reply_names_its_model(page, ui: RunningUI):
    for button in ("#regenerate", "#edit", "#delete"):
        expect(page.locator(button)).to_be_disabled()
    expect(page.locator("#rename textarea")).to_be_disabled()
    expect(page.locator("#tune-note")).to_be_hidden()  # the wizard waits closed, its title saying if tuned
    expect(page.get_by_text(re.compile(r"^Hardware wizard"))).to_be_visible()
    shot(page, "9-first-screen")
    ask(page, "Name the capital city of France.")
    expect(last_reply(page)).to_contain_text("TTFT", timeout=LONG)
    expect(last_reply(page)).to_contain_text(ui.runtime.engine.worker.model_path.name)
    for button in ("#regenerate", "#edit", "#delete"):
        expect(page.locator(button)).to_be_enabled()


def test_an_answer_cut_at_max_tokens_continues_from_where_it_stopped(page, ui: RunningUI):
    question = "Count from 1 to 100, separated by commas."
    ask(page, question)  # the test server's limit is 48 tokens
    expect(last_reply(page)).to_contain_text("cut at max tokens", timeout=LONG)
    conv = next(c for c in ui.store.list() if c.title == question)
    cut = ui.store.get(conv.id).messages[-1].content
    page.locator("#continue").click()

    def continued():
        last = ui.store.get(conv.id).messages[-1]
        return last if last.role == "assistant" and last.content != cut else None

    deadline = time.monotonic() + LONG / 1000
    while continued() is None:  # the continuation is kept when it ends
        assert time.monotonic() < deadline, "the answer was not continued"
        time.sleep(0.2)
    longer = continued()
    assert longer.content.startswith(cut) and len(longer.content) > len(cut), (cut, longer.content)
    # The continuation's own numbers, shown: its whole line, as the window writes a reply's numbers. Its token
    # count alone is no sign (it writes up to Max tokens more: as many as the cut answer, whose line says so
    # already); the context it used, its prompt holding the cut answer, is.
    expect(last_reply(page)).to_contain_text(render.stats_line(longer.stats))
    expect(page.locator("#chat .bot")).to_have_count(1)  # in its place, not a reply of its own
    shot(page, "10-continued")


def test_a_button_clicked_again_as_soon_as_its_answer_shows_is_heard_every_time(page):
    # Gradio dropped a click made while the same button's event was still ending (its toast already showing):
    # on a busy machine that gap grows, and the click was lost without the server hearing of it.
    open_settings(page)
    box = page.locator("#n-ctx input")
    for n in range(99_741, 99_941):  # 200 clicks, each refusal naming its own number
        box.fill(str(n))
        page.locator("#reload-context").click()
        expect(page.locator(".toast-body").filter(has_text=f"{n:,} tokens is out of range")).to_be_visible()


def local_row(page, name: str):
    return page.locator("#local-models tr").filter(has_text=name)


def listed_ids(ui: RunningUI) -> list[str]:
    return [m["id"] for m in httpx.get(ui.url + "/v1/models", timeout=30).json()["data"]]


DESKTOP = {"width": 1400, "height": 900}


def test_the_models_panel_loads_a_file_and_deletes_only_what_localchat_holds_asking_beside_the_button(
        browser, ui: RunningUI, start_file: Path, model_path: Path, tmp_path: Path):
    from localchat.models.own_files import link_in

    # The user's own file, brought in as `localchat import PATH` does: linked, so deleting it later must leave
    # the user's file alone.
    original = tmp_path / "tour-mine.gguf"
    os.link(model_path, original)
    placed = link_in(original)
    assert placed.how == "linked" and placed.path.stat().st_ino == original.stat().st_ino  # no bytes copied
    page = new_page(browser, ui, DESKTOP)
    try:
        load_and_delete(page, ui, placed.path, original, start_file)
    finally:
        page.context.close()


def load_and_delete(page, ui: RunningUI, placed: Path, original: Path, start_file: Path) -> None:
    open_models(page)
    mine, started = local_row(page, placed.name), local_row(page, start_file.name)
    expect(started).to_contain_text("loaded now")
    expect(started.locator(".lc-file-load")).to_be_disabled()  # the one answering now
    page.locator("#local-models").scroll_into_view_if_needed()
    shot(page, "11-models-load-delete")

    # Load: the same switch as the picker's; the row is marked and its Load goes off.
    mine.locator(".lc-file-load").click()
    expect(mine).to_contain_text("loaded now", timeout=LONG)
    expect(mine.locator(".lc-file-load")).to_be_disabled()
    expect(started.locator(".lc-file-load")).to_be_enabled()
    assert ui.runtime.engine.worker.model_path == placed
    # The loaded model is not deleted: the line says why and what to do.
    mine.locator(".lc-file-delete").click()
    expect(page.locator("#models-note")).to_contain_text("is the model answering now, so it cannot be deleted")
    expect(page.locator("#model-delete-confirm")).to_be_hidden()

    # The file the window was started with (--model PATH) loads again from its row.
    started.locator(".lc-file-load").click()
    expect(started).to_contain_text("loaded now", timeout=LONG)
    assert ui.runtime.engine.worker.model_path == start_file

    # Delete asks beside the button that asked, in red; "Keep it" keeps the file.
    delete = mine.locator(".lc-file-delete")
    delete.click()
    confirm = page.locator("#model-delete-confirm")
    expect(confirm).to_be_visible()
    expect(confirm).to_contain_text(f"Delete {placed.name} from localchat's models folder for good?")
    asked, box = delete.bounding_box(), confirm.bounding_box()
    assert abs(box["y"] - (asked["y"] + asked["height"])) < 200, (asked, box)  # beside it, not across the page
    colour = page.locator("#model-delete-yes").evaluate("b => getComputedStyle(b).backgroundColor")
    assert colour == "rgb(185, 28, 28)", colour
    shot(page, "12-model-delete-asks")
    page.locator("#model-delete-cancel").click()
    expect(confirm).to_be_hidden()
    assert placed.exists()

    deadline = time.monotonic() + 60  # the API's index looks at the disk every few seconds
    while placed.stem not in listed_ids(ui):
        assert time.monotonic() < deadline, "the imported file never reached /v1/models"
        time.sleep(0.5)
    delete.click()
    page.locator("#model-delete-yes").click()
    expect(page.locator("#models-note")).to_contain_text(f"Removed {placed.name} from localchat's models folder; "
                                                         "it was a hard link")
    expect(mine).to_have_count(0)
    assert not placed.exists() and original.read_bytes()[:4] == b"GGUF"  # the user's file stays
    page.locator("#model input").click()
    expect(page.get_by_role("option", name=start_file.name, exact=True)).to_be_visible()
    expect(page.get_by_role("option", name=placed.name, exact=True)).to_have_count(0)
    page.keyboard.press("Escape")
    assert placed.stem not in listed_ids(ui)  # the API's list follows at once
    # A path no row lists, sent as a row's Delete would send it, is refused and touches nothing.
    unlisted = original.parent / "not-listed.gguf"
    os.link(original, unlisted)
    page.evaluate("(path) => { window.localchatModelAction = `delete:${path}`; "
                  "document.querySelector('#model-action-go').click(); }", str(unlisted))
    expect(page.locator("#models-note")).to_contain_text("that file is not in the list of model files")
    expect(page.locator("#model-delete-confirm")).to_be_hidden()
    assert unlisted.exists()


def test_on_a_phone_the_models_panel_offers_load_and_delete_within_the_screen(phone, ui: RunningUI):
    open_models(phone)
    row = phone.locator("#local-models tbody tr").nth(1)  # the first is the loaded one: its Delete refuses
    row.locator(".lc-file-delete").scroll_into_view_if_needed()
    expect(row.locator(".lc-file-delete")).to_be_in_viewport(ratio=1)
    row.locator(".lc-file-delete").click()
    confirm = phone.locator("#model-delete-confirm")
    expect(confirm).to_be_in_viewport(ratio=1)
    shot(phone, "13-phone-model-delete-asks")
    phone.locator("#model-delete-cancel").click()
    expect(confirm).to_be_hidden()


def test_the_wizard_with_downloads_off_measures_the_models_already_here_in_the_windows_words(
        browser, ui: RunningUI, start_file: Path, q8_model_path: Path, tmp_path: Path, monkeypatch):
    # A home whose models folder holds one file and no catalog file: with the window's own model (a file of the
    # user's, outside every folder searched) two models are here, and nothing may be downloaded.
    home = tmp_path / "home"
    (home / "cache" / "models").mkdir(parents=True)
    (home / "cache" / "models" / q8_model_path.name).symlink_to(q8_model_path)
    monkeypatch.setenv("LOCALCHAT_HOME", str(home))
    from localchat.ui.wizard import tuning

    plain = tuning.tune_command  # other programs on a shared machine must not stop it (test_tune.py tests that)
    monkeypatch.setattr(tuning, "tune_command", lambda *a, **k: [*plain(*a, **k), "--allow-busy"])
    ui.runtime.switch(str(start_file))
    page = new_page(browser, ui, DESKTOP)
    try:
        page.get_by_text("Hardware wizard (not tuned yet)").click()
        expect(page.locator("#tune-download input")).not_to_be_checked()  # downloads off
        page.locator("#tune-placements input").uncheck()
        page.locator("#tune-button").click()
        progress = page.locator("#tune-progress .lc-tune-progress")
        log = page.locator("#tune-progress .lc-tune-log pre")
        expect(log).to_contain_text("Downloads off: measuring the 2 models already on this machine (my-own-model "
                                    f"Q4_1, {q8_model_path.stem} Q8_0).", timeout=LONG)
        expect(progress.locator(".lc-tune-now")).to_have_text(re.compile("Measure the candidates"), timeout=LONG)
        expect(progress.locator(".lc-tune-recent")).to_contain_text("Downloads off: measuring the 2 models")
        shot(page, "14-wizard-downloads-off")
        said = log.text_content()
        assert " --" not in said and "`localchat" not in said, said  # the window's words, not the command's
        # The run to its end is test_browser.py's wizard test (downloads off too) and test_tune.py's, in these
        # words: here the window's part, then Cancel.
        page.locator("#tune-cancel").click()
        expect(progress).to_have_attribute("data-state", "cancelled", timeout=60_000)
    finally:
        page.context.close()
        ui.runtime.switch(str(start_file))
