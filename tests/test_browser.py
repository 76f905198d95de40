"""A real browser (Debian's chromium, driven by Playwright) against the running chat window."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterator

import pytest

from ui_server import RunningUI, start_ui

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"
BROWSER_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                "--disable-component-update", "--no-first-run"]
FILLER = ("The quarterly report covers deliveries, staffing and the state of the warehouse. "
          "Shipments arrived on schedule and the team handled the seasonal peak without overtime. ")

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium "
                                "(apt-get install -y chromium)")
sync_api = pytest.importorskip("playwright.sync_api", reason="needs the playwright Python package")


@pytest.fixture(scope="module")
def ui(model_path: Path, tmp_path_factory) -> Iterator[RunningUI]:
    yield from start_ui(model_path, tmp_path_factory.mktemp("browser") / "conversations.sqlite3")


@pytest.fixture()
def page(ui: RunningUI):
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=BROWSER_ARGS, headless=True)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.set_default_timeout(60_000)
        page.goto(ui.url + "/")
        page.locator("#message textarea").wait_for()
        yield page
        browser.close()


def last_reply(page):
    return page.locator("#chat .bot").last


def ask(page, question: str) -> None:
    page.locator("#message textarea").fill(question)
    page.locator("#send").click()


def test_chat_streams_an_answer_and_reads_an_attached_document(page, tmp_path: Path):
    ask(page, "Name the capital city of France.")
    sync_api.expect(last_reply(page)).to_contain_text("Paris")
    sync_api.expect(last_reply(page)).to_contain_text("tokens/s")  # the stats line comes at the end
    sync_api.expect(page.locator("#conversations")).to_contain_text("Name the capital city of France.")
    page.screenshot(path=str(ARTIFACTS / "browser-1-answer.png"))

    page.locator("#new-chat").click()
    sync_api.expect(page.locator("#chat .bot")).to_have_count(0)
    doc = tmp_path / "vault-notes.txt"
    doc.write_text(FILLER * 6 + "\n\nThe vault code is 7341.\n\n" + FILLER * 6)
    page.locator("#files input[type=file]").set_input_files(str(doc))
    sync_api.expect(page.locator("#meter")).to_contain_text("vault-notes.txt")
    sync_api.expect(page.locator("#meter")).to_contain_text("they fit")
    page.screenshot(path=str(ARTIFACTS / "browser-2-attached.png"))
    ask(page, "What is the vault code?")
    sync_api.expect(last_reply(page)).to_contain_text("7341")
    sync_api.expect(last_reply(page)).to_contain_text(re.compile(r"Included:.*vault-notes\.txt whole"))
    sync_api.expect(last_reply(page)).to_contain_text("tokens/s")
    sync_api.expect(page.locator("#chat .user").last).to_contain_text("Attached: vault-notes.txt")
    page.screenshot(path=str(ARTIFACTS / "browser-3-document-answer.png"), full_page=True)


def test_html_in_a_reply_is_shown_as_text_and_never_runs(page, ui: RunningUI):
    conv = ui.store.create("Markup check")
    ui.store.append(conv, "user", "Show me some HTML.")
    ui.store.append(conv, "assistant", 'Here: <script>window.__pwned = 1</script> '
                    '<img src="x" onerror="window.__pwned = 2"> <b>bold?</b>')
    page.reload()
    page.get_by_text("Markup check").click()
    reply = last_reply(page)
    sync_api.expect(reply).to_contain_text('<img src="x" onerror="window.__pwned = 2">')
    sync_api.expect(reply).to_contain_text("<script>window.__pwned = 1</script>")
    assert reply.locator("img, script, b").count() == 0
    page.wait_for_timeout(500)  # an onerror handler would have fired by now
    assert page.evaluate("window.__pwned") is None
    page.screenshot(path=str(ARTIFACTS / "browser-4-inert-html.png"))


def test_the_hardware_wizard_tunes_from_the_window_and_switches_to_the_kept_model(page, ui: RunningUI, tmp_path,
                                                                                   monkeypatch):
    from localchat.paths import models_dir

    # A home of its own (the model files shared): the profile the wizard saves must not reach other tests.
    home = tmp_path / "home"
    (home / "cache").mkdir(parents=True)
    (home / "cache" / "models").symlink_to(models_dir(), target_is_directory=True)
    monkeypatch.setenv("LOCALCHAT_HOME", str(home))
    page.reload()
    note = page.locator("#tune-note")
    sync_api.expect(note).to_contain_text("has not been tuned yet")  # open on a machine without a profile
    page.wait_for_timeout(500)  # the sidebar slides in after a reload
    page.screenshot(path=str(ARTIFACTS / "browser-5-wizard-offered.png"))
    page.locator("#tune-download input").uncheck()
    page.locator("#tune-button").click()
    sync_api.expect(page.locator("#tune-log textarea")).to_have_value(re.compile("measuring smollm2-135m"),
                                                                      timeout=120_000)
    sync_api.expect(note).to_contain_text("Tuned", timeout=300_000)
    sync_api.expect(note).to_contain_text("smollm2-135m Q4_1")
    log = page.locator("#tune-log textarea").input_value()
    assert "placement:" in log and "kept smollm2-135m Q4_1" in log
    assert ui.runtime.model.startswith(str(home))  # now answering with the tuned file
    sync_api.expect(page.locator("#status")).to_contain_text("SmolLM2")
    page.screenshot(path=str(ARTIFACTS / "browser-6-wizard-done.png"), full_page=True)
    ask(page, "Name the capital city of France.")
    sync_api.expect(last_reply(page)).to_contain_text("Paris")
