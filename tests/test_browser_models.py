"""The window's Models panel in a real browser (Debian's chromium, driven by Playwright): the catalog with the
planner's verdicts and the wizard's measured speed, the files found on this machine, a download from a local
hub that pauses, resumes and cancels, the import of a GGUF from the file picker, and a switch to a new file.

One window and one browser for the module, in a home of its own: its own models folder (the real SmolLM2
file linked in), hub cache, LM Studio folder and Ollama store. Every wait is on what the page shows.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Iterator

import pytest

from hub_server import FakeHub
from browser_kit import ARTIFACTS, LONG, WIDE, expect, needs_chromium, open_window
from ui_server import RunningUI, start_ui

HUB_RATE = 12 * 2**20  # bytes/s the local hub sends: a 98 MB file takes seconds, so a pause lands mid-file
SEEDED_REPO, SEEDED_FILE = "other-tool/Seeded-GGUF", "seeded.Q8_0.gguf"  # in the hub cache before the window opens

pytestmark = needs_chromium


def hub_only_files(count: int) -> list[tuple[str, str, object]]:
    """Catalog files served by the hub alone, without a pinned sha256 (the hub's LFS sha256 is checked)."""
    from localchat.models.catalog import load_catalog

    found = []
    for key, model in load_catalog().items():
        for quant, model_file in model.files.items():
            if (model_file.format == "gguf" and model_file.repo and not model_file.sha256 and not model_file.verified
                    and not any("wheel" in source for source in model_file.sources)):
                found.append((key, quant, model_file))
    assert len(found) >= count, "the catalog needs hub-only GGUF files for this test"
    return found[:count]


@pytest.fixture(scope="module")
def place(model_path: Path, tmp_path_factory) -> Iterator[dict]:
    """A home of its own with a model in each place the window looks, and a local hub serving catalog files."""
    from localchat.models.derive import random_weights_like

    root = tmp_path_factory.mktemp("models-window")
    models = root / "home" / "cache" / "models"
    models.mkdir(parents=True)
    (models / model_path.name).symlink_to(model_path)
    tiny = random_weights_like(model_path, root / "tiny.gguf")
    lmstudio = root / "user" / ".lmstudio" / "models" / "publisher" / "Tiny-GGUF" / "tiny-lmstudio.Q8_0.gguf"
    lmstudio.parent.mkdir(parents=True)
    shutil.copyfile(tiny, lmstudio)
    ollama = root / "ollama"
    digest = "sha256-" + "ab" * 32
    (ollama / "blobs").mkdir(parents=True)
    shutil.copyfile(tiny, ollama / "blobs" / digest)
    manifest = ollama / "manifests" / "registry.ollama.ai" / "library" / "tinyllm" / "latest"
    manifest.parent.mkdir(parents=True)
    manifest.write_text(json.dumps({"layers": [{"mediaType": "application/vnd.ollama.image.model",
                                                "digest": digest.replace("-", ":")}]}))
    hub = FakeHub()
    hub.add(SEEDED_REPO, SEEDED_FILE, tiny.read_bytes())
    served = hub_only_files(2)
    weights = model_path.read_bytes()
    hub.add(served[0][2].repo, served[0][2].repo_file, weights)  # real weights: the window loads it
    hub.add(served[1][2].repo, served[1][2].repo_file, weights[::-1])  # other bytes: a blob of its own
    env = {"LOCALCHAT_HOME": root / "home", "HOME": root / "user", "OLLAMA_MODELS": ollama,
           "HF_HOME": root / "hf", "HF_HUB_CACHE": root / "hf" / "hub", "HF_HUB_DISABLE_TELEMETRY": "1",
           "HF_HUB_DISABLE_PROGRESS_BARS": "1", "HF_HUB_DISABLE_XET": "1"}
    with pytest.MonkeyPatch.context() as patch, hub:
        for key, value in env.items():
            patch.setenv(key, str(value))
        for key in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE", "HUGGINGFACE_HUB_CACHE"):
            patch.delenv(key, raising=False)
        patch.setenv("HF_ENDPOINT", hub.url)
        from localchat.models.hub import download_hub_file

        seeded = download_hub_file(SEEDED_REPO, SEEDED_FILE)  # another hub tool's download, as it were
        hub.bytes_per_s = HUB_RATE
        yield {"root": root, "models": models, "hub": hub, "served": served, "seeded": seeded, "tiny": tiny}


@pytest.fixture(scope="module")
def ui(place: dict, model_path: Path) -> Iterator[RunningUI]:
    yield from start_ui(model_path, place["root"] / "conversations.sqlite3")


@pytest.fixture()
def page(ui: RunningUI, browser):
    context = browser.new_context(viewport=WIDE)
    page = context.new_page()
    page.set_default_timeout(60_000)
    open_models(page, ui)
    yield page
    context.close()


def open_models(page, ui: RunningUI) -> None:
    open_window(page, ui)
    page.get_by_text("Models: catalog, downloads, import").click()
    expect(page.locator("#catalog")).to_contain_text("SmolLM2-135M-Instruct")  # the panel's load has run


def shot(page, name: str, window: bool = False) -> None:
    """The Models panel (or the window's view, sidebar included) as the user sees it now."""
    path = str(ARTIFACTS / f"models-{name}.png")
    if window:
        page.screenshot(path=path)
    else:
        page.locator("#models").screenshot(path=path)


def catalog_row(page, key: str, quant: str):
    return page.locator(f"#catalog tr[data-choice='{key}:{quant}']")


def choose_download(page, key: str, quant: str) -> None:
    from localchat.models.catalog import load_catalog

    model = load_catalog()[key]
    box = page.locator("#download-choice input")
    if not box.input_value():  # nothing chosen yet: nothing to download, and the button says so
        expect(page.locator("#download")).to_be_disabled()
    box.click()
    page.get_by_role("option", name=re.compile(re.escape(f"{model.name} {quant} "))).click()
    expect(box).to_have_value(re.compile(re.escape(f"{model.name} {quant}")))
    expect(page.locator("#download")).to_be_enabled()


def download_of(page, key: str, quant: str):
    return page.locator(f"#downloads .lc-download[data-choice='{key}:{quant}']")


def wait_for_bytes(page, key: str, quant: str) -> int:
    """Until the download's bar shows some bytes fetched; returns how many."""
    bar = f"#downloads .lc-download[data-choice='{key}:{quant}'] progress"
    page.wait_for_function("s => +(document.querySelector(s)?.getAttribute('value')) > 0", arg=bar)
    return int(page.locator(bar).get_attribute("value"))


def test_the_catalog_shows_each_quant_with_its_size_the_planners_verdict_and_the_measured_speed(page, ui, model_path):
    from localchat.hardware.probe import probe
    from localchat.models.catalog import load_catalog
    from localchat.tune.profile import Profile, fingerprint, save_profile

    row = catalog_row(page, "smollm2-135m", "Q4_1")
    expect(row).to_contain_text("98 MB")
    expect(row).to_contain_text(re.compile(r"fits: cpu, \dk context"))
    expect(row).to_contain_text(re.compile(r"\d+ tok/s"))
    expect(row).to_contain_text("not tuned")
    expect(row).to_contain_text("loaded now")  # our models folder holds it, and the window answers with it
    expect(page.locator("#catalog")).to_contain_text("best here")
    big = catalog_row(page, "qwen2.5-32b", "Q8_0")
    expect(big).to_contain_text("does not fit")  # 35 GB of weights on this machine
    shot(page, "1-catalog")
    split = catalog_row(page, "gpt-oss-120b", "MXFP4")  # a model in three files: one row, their total size
    split.scroll_into_view_if_needed()
    expect(split).to_contain_text("63.4 GB")
    expect(split).to_contain_text("does not fit")
    shot(page, "1b-catalog-split-model")
    for key, model in load_catalog().items():  # the GPTQ entries, where the catalog has them, as it gives them
        for quant, model_file in model.files.items():
            if model_file.format != "gguf":
                gptq = catalog_row(page, key, quant)
                expect(gptq).to_contain_text(model_file.format)
                expect(gptq).to_contain_text(re.compile("not offered without an NVIDIA GPU|needs the gptq extra"))

    # Tuned: the wizard's measured speed shows beside the prediction (its profile, written as it writes it).
    hardware = probe(measure=False)
    save_profile(Profile(fingerprint(hardware), hardware.cpu_model, "smollm2-135m", "Q4_1", str(model_path),
                         "single", 4096, 2, decode_tps=123.4, prefill_tps=456.0, created="2026-12-01T10:00:00"))
    open_models(page, ui)
    expect(row).to_contain_text("123 tok/s")
    shot(page, "2-catalog-tuned")


def test_the_model_files_found_here_are_listed_with_where_they_were_found(page, place):
    local = page.locator("#local-models")
    for name, where in (("SmolLM2-135M-Instruct.Q4_1.gguf", "localchat's models folder"),
                        (SEEDED_FILE, "hub cache"), ("tiny-lmstudio.Q8_0.gguf", "LM Studio"),
                        ("tinyllm:latest", "Ollama")):
        expect(local.locator("tr").filter(has_text=name).first).to_contain_text(where)
    page.locator("#model input").click()  # each one is in the model picker too
    for name in (SEEDED_FILE, "tiny-lmstudio.Q8_0.gguf"):
        expect(page.get_by_role("option", name=name)).to_be_visible()
    page.keyboard.press("Escape")
    shot(page, "3-local-files")
    page.locator("#theme-toggle").click()  # the tables take the theme's colours: readable in dark mode too
    expect(page.locator("body")).to_have_class(re.compile(r"\bdark\b"))
    shot(page, "3b-local-files-dark")


def test_a_download_shows_progress_pauses_resumes_and_then_answers_when_switched_to(page, ui, place, model_path):
    hub: FakeHub = place["hub"]
    key, quant, model_file = place["served"][0]
    choose_download(page, key, quant)
    page.locator("#download").click()
    progress = download_of(page, key, quant)
    expect(progress).to_contain_text("downloading")
    wait_for_bytes(page, key, quant)
    shot(page, "4-downloading")
    page.locator("#pause-download").click()
    expect(progress).to_contain_text("paused at", timeout=LONG)
    kept = int(progress.locator("progress").get_attribute("value"))
    partial = list(Path(place["root"], "hf", "hub").rglob("*.incomplete"))
    assert len(partial) == 1 and partial[0].stat().st_size == kept > 0
    assert kept < model_path.stat().st_size
    expect(catalog_row(page, key, quant)).to_contain_text("paused")
    shot(page, "5-paused")

    page.locator("#resume-download").click()
    expect(progress).to_contain_text("downloaded to", timeout=LONG)
    resumed = hub.downloads()[-1].headers.get("range")
    assert resumed == f"bytes={kept}-", resumed  # the resume fetched only the rest
    assert not list(Path(place["root"], "hf", "hub").rglob("*.incomplete"))
    shot(page, "6-downloaded")

    # The new file is in the model picker; switching shows the load and the new model answers.
    page.evaluate("""() => { window.__seen = [];
        new MutationObserver(() => window.__seen.push(document.querySelector('#status').innerText))
            .observe(document.querySelector('#status'), {subtree: true, childList: true, characterData: true}); }""")
    page.locator("#model input").click()
    page.get_by_role("option", name=model_file.file).click()
    expect(page.locator("#status")).to_contain_text(re.compile(r"Model:\s*" + re.escape(model_file.file)),
                                                    timeout=LONG)
    assert any(text.startswith("Loading") and "the current model answers meanwhile" in text
               for text in page.evaluate("window.__seen")), page.evaluate("window.__seen")
    assert ui.runtime.model.endswith(model_file.file)
    shot(page, "7-switched", window=True)
    page.locator("#message textarea").fill("Which city is the capital of France?")
    page.locator("#send").click()
    reply = page.locator("#chat .bot").last
    expect(reply).to_contain_text("TTFT", timeout=LONG)  # answered to the end, by the new file's engine
    assert ui.runtime.engine.worker.model_path.name == model_file.file and len(reply.inner_text()) > 40
    ui.runtime.switch(str(model_path))  # the next tests expect the module's model


def test_cancel_stops_a_download_and_deletes_what_it_fetched(page, place):
    key, quant, _ = place["served"][1]
    choose_download(page, key, quant)
    page.locator("#download").click()
    expect(download_of(page, key, quant)).to_contain_text("downloading")
    wait_for_bytes(page, key, quant)
    page.locator("#cancel-download").click()
    expect(download_of(page, key, quant)).to_contain_text("cancelled; the partial file was deleted", timeout=LONG)
    assert not list(Path(place["root"], "hf", "hub").rglob("*.incomplete"))
    shot(page, "8-cancelled")


def test_a_gguf_from_the_file_picker_is_checked_imported_and_listed(page, place, tmp_path):
    not_a_model = tmp_path / "notes.gguf"
    not_a_model.write_text("these are notes, not a model\n" * 100)
    page.locator("#import-gguf input[type=file]").set_input_files(str(not_a_model))
    expect(page.locator(".toast-body").filter(has_text="does not start like a GGUF")).to_be_visible()
    assert not (place["models"] / "imported").exists() or not list((place["models"] / "imported").iterdir())

    mine = tmp_path / "my-tiny-model.gguf"
    shutil.copyfile(place["tiny"], mine)
    page.locator("#import-gguf input[type=file]").set_input_files(str(mine))
    expect(page.locator("#models-note")).to_contain_text("Imported my-tiny-model.gguf")
    # The upload is the one copy the browser's bytes make: it is moved into place, none left where it arrived.
    expect(page.locator("#models-note")).to_contain_text("moved my-tiny-model.gguf into the models folder")
    from localchat.ui.documents.uploads import received_dir

    assert not [p for p in received_dir().rglob("*") if p.is_file() and p.name.endswith(".gguf")]
    expect(page.locator("#local-models tr").filter(has_text="my-tiny-model.gguf")).to_contain_text(
        "localchat's models folder")
    assert (place["models"] / "imported" / "my-tiny-model.gguf").read_bytes() == mine.read_bytes()
    page.locator("#model input").click()
    expect(page.get_by_role("option", name="my-tiny-model.gguf")).to_be_visible()
    page.keyboard.press("Escape")
    shot(page, "9-imported")


def test_a_failed_download_says_why_without_a_bar_and_resume_visibly_starts_it_again(page, place, model_path):
    hub: FakeHub = place["hub"]
    key, quant, model_file = hub_only_files(3)[2]
    hub.add(model_file.repo, model_file.repo_file, model_path.read_bytes()[::3])  # bytes of its own
    hub.down = True  # the hub cannot be reached: the download fails before a byte comes
    try:
        choose_download(page, key, quant)
        page.locator("#download").click()
        progress = download_of(page, key, quant)
        expect(progress).to_have_attribute("data-state", "failed", timeout=LONG)
        expect(progress).to_contain_text("cannot reach the model hub")
        expect(progress.locator("progress")).to_have_count(0)  # nothing fetched: no bar, least of all a full one
        shot(page, "10-failed")
        page.locator("#resume-download").click()  # still unreachable: the row says it tried again
        expect(progress).to_contain_text("try 2", timeout=LONG)
        expect(progress).to_have_attribute("data-state", "failed", timeout=LONG)
    finally:
        hub.down = False
    page.locator("#resume-download").click()  # reachable again: the bar comes back and fills
    expect(progress).to_contain_text("try 3")
    wait_for_bytes(page, key, quant)
    shot(page, "11-resumed-after-failure")
    expect(progress).to_contain_text("downloaded to", timeout=LONG)
    expect(progress.locator("progress")).to_have_attribute("value", str(len(model_path.read_bytes()[::3])))
