"""The Models panel's hub search in a real browser (Debian's chromium, driven by Playwright) against the local
fake hub: a query shows a repo outside the catalog with its quant files, sizes and the planner's verdicts;
Download fetches the chosen file through the panel's progress until it is in the model picker.

A home of its own: its own models folder (the real SmolLM2 file linked in) and hub cache.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterator

import pytest

from browser_kit import ARTIFACTS, LONG, WIDE, expect, needs_chromium, open_window
from hub_server import FakeHub
from ui_server import RunningUI, start_ui

REPO, FILE = "someone/SmolLM2-135M-Instruct-GGUF", "smollm2-135m-instruct-q4_1.gguf"  # named apart from the local copy
HUGE = "smollm2-135m-instruct-f16.gguf"  # listed at 900 GB: it fits nowhere

pytestmark = needs_chromium


@pytest.fixture(scope="module")
def place(model_path: Path, tmp_path_factory) -> Iterator[dict]:
    root = tmp_path_factory.mktemp("hub-search-window")
    models = root / "home" / "cache" / "models"
    models.mkdir(parents=True)
    (models / model_path.name).symlink_to(model_path)
    hub = FakeHub(bytes_per_s=24 * 2**20)  # a few seconds for the file: the progress bar shows it moving
    weights = model_path.read_bytes()
    hub.add(REPO, FILE, weights)
    hub.add(REPO, HUGE, weights[:4096])
    hub.listed_sizes[(REPO, HUGE)] = 900 * 10**9
    hub.downloads_of[REPO] = 1234
    env = {"LOCALCHAT_HOME": root / "home", "HOME": root / "user", "HF_HOME": root / "hf",
           "HF_HUB_CACHE": root / "hf" / "hub", "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1",
           "HF_HUB_DISABLE_XET": "1", "OLLAMA_MODELS": root / "ollama"}
    with pytest.MonkeyPatch.context() as patch, hub:
        for key, value in env.items():
            patch.setenv(key, str(value))
        for key in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE", "HUGGINGFACE_HUB_CACHE"):
            patch.delenv(key, raising=False)
        patch.setenv("HF_ENDPOINT", hub.url)
        yield {"root": root, "hub": hub}


@pytest.fixture(scope="module")
def ui(place: dict, model_path: Path) -> Iterator[RunningUI]:
    yield from start_ui(model_path, place["root"] / "conversations.sqlite3")


def test_a_hub_search_shows_quant_files_with_sizes_and_verdicts_and_downloads_one(ui, browser, place):
    context = browser.new_context(viewport=WIDE)
    page = context.new_page()
    page.set_default_timeout(60_000)
    open_window(page, ui)
    page.get_by_text("Models: catalog, downloads, import").click()
    expect(page.locator("#catalog")).to_contain_text("SmolLM2-135M-Instruct")

    page.locator("#hub-query textarea, #hub-query input").first.fill("smollm2 instruct")
    page.locator("#hub-search").click()
    results = page.locator("#hub-results")
    small = results.locator(f"tr[data-choice='{REPO}/{FILE}']")
    expect(small).to_contain_text("98 MB")
    expect(small).to_contain_text(re.compile(r"fits: cpu, \dk context"))
    expect(small).to_contain_text(re.compile(r"\d+ tok/s"))
    huge = results.locator(f"tr[data-choice='{REPO}/{HUGE}']")
    expect(huge).to_contain_text("900.0 GB")
    expect(huge).to_contain_text("does not fit")
    results.scroll_into_view_if_needed()
    page.locator("#models").screenshot(path=str(ARTIFACTS / "models-hub-1-search.png"))

    box = page.locator("#download-choice input")
    box.click()
    page.get_by_role("option", name=f"{REPO} {FILE}").click()  # a substring (a regex with a slash trips the selector)
    page.locator("#download").click()
    progress = page.locator(f"#downloads .lc-download[data-choice='{REPO}/{FILE}']")
    expect(progress).to_contain_text("downloading")
    expect(progress).to_contain_text("downloaded to", timeout=LONG)
    expect(page.locator("#local-models tr").filter(has_text=FILE).filter(has_text="hub cache")).to_be_visible()
    progress.scroll_into_view_if_needed()
    page.locator("#models").screenshot(path=str(ARTIFACTS / "models-hub-2-downloaded.png"))
    assert list(Path(place["root"], "hf", "hub").rglob(FILE))

    # An unreachable hub: one line, under the search box.
    place["hub"].down = True
    page.locator("#hub-search").click()
    expect(page.locator("#hub-message")).to_contain_text("Cannot reach the model hub")
    place["hub"].down = False
    page.locator("#hub-results").screenshot(path=str(ARTIFACTS / "models-hub-3-unreachable.png"))
    context.close()
