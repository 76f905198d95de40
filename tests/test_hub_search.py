"""The hub search beyond the catalog against the local fake hub (the real huggingface_hub client): repos by
downloads with their quant files and sizes, the planner's verdict from each repo's header read by byte
ranges, one line for an unreachable hub, hostile repo ids and file names refused, a found file downloaded."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

import pytest
from hub_server import FakeHub, serve_to_hub_client

from localchat.hardware import HardwareInfo
from localchat.models.catalog import load_catalog
from localchat.models.hub_search import MAX_FILES, plain_gguf_name, plain_repo_id, quant_of, search_gguf
from localchat.ui.components.hub_search_panel import hub_table
from localchat.ui.models.hub_results import hub_rows
from localchat.ui.models.model_browser import Downloads

REPO, FILE = "someone/SmolLM2-135M-Instruct-GGUF", "SmolLM2-135M-Instruct.Q4_1.gguf"
HUGE = "SmolLM2-135M-Instruct.F16.gguf"  # listed at 900 GB: it cannot fit anywhere
OTHER = "another/SmolLM2-135M-GGUF"
LAPTOP = HardwareInfo(os="Linux", machine="x86_64", cpu_model="test CPU", physical_cores=4, logical_cores=8,
                      cpu_max_mhz=3000, cpu_flags=["avx2", "fma"], ram_total=16 * 2**30, ram_available=12 * 2**30,
                      ram_bandwidth=40e9)


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, model_path: Path):
    fake = FakeHub()
    weights = model_path.read_bytes()
    fake.add(REPO, FILE, weights)
    fake.add(REPO, HUGE, weights[:4096])
    fake.listed_sizes[(REPO, HUGE)] = 900 * 10**9
    fake.add(REPO, "README.md", b"# a model card\n")  # not a GGUF: not listed
    fake.add(REPO, "SmolLM2-Q8_0-00001-of-00002.gguf", b"GGUF")  # a shard: not a model on its own
    fake.add(OTHER, "smollm2.Q4_1.gguf", weights)
    fake.add("unrelated/Llama-GGUF", "llama.Q4_0.gguf", b"GGUF")  # does not match the search
    fake.downloads_of.update({REPO: 5000, OTHER: 10})
    yield from serve_to_hub_client(fake, tmp_path, monkeypatch)


def test_a_search_lists_the_most_downloaded_repos_with_their_quant_files_sizes_and_verdicts(hub: FakeHub,
                                                                                            model_path: Path):
    started = time.monotonic()
    found = search_gguf("smollm2 135m")
    assert not found.message, found.message
    assert [r.repo for r in found.repos] == [REPO, OTHER]  # the most downloaded first
    first = found.repos[0]
    assert [(f.filename, f.quant, f.size) for f in first.files] == [
        (FILE, "Q4_1", model_path.stat().st_size), (HUGE, "F16", 900 * 10**9)]  # smallest first, shards left out
    rows = hub_rows(found, LAPTOP, load_catalog())
    by_file = {(r.repo, r.filename): r for r in rows}
    small, huge = by_file[(REPO, FILE)], by_file[(REPO, HUGE)]
    assert small.size == "98 MB" and small.verdict.short.startswith("fits: cpu"), small.verdict
    assert small.verdict.decode_tps and small.verdict.decode_tps > 0
    assert huge.size == "900.0 GB" and huge.verdict.short == "does not fit", huge.verdict
    table = hub_table(found, rows)
    assert f"data-choice='{REPO}/{FILE}'" in table and "fits: cpu" in table and "does not fit" in table
    # One header a repo, by byte ranges: far less than the file was fetched.
    ranged = [s for s in hub.downloads() if s.headers.get("range")]
    assert ranged and all(s.path.startswith("/cdn/") for s in ranged)
    print(f"search and verdicts took {time.monotonic() - started:.2f} s")


def test_a_hub_that_ignores_byte_ranges_still_gives_the_verdict(hub: FakeHub):
    hub.ignore_range = True  # the whole file comes each time: the reader keeps only what it asked for
    found = search_gguf("smollm2 135m instruct")
    rows = hub_rows(found, LAPTOP, load_catalog())
    assert rows[0].verdict.short.startswith("fits: cpu"), rows[0].verdict


def test_an_unreachable_hub_is_one_line_that_says_so(hub: FakeHub):
    hub.down = True
    found = search_gguf("smollm2")
    assert not found.repos
    assert "Cannot reach the model hub at " + hub.url in found.message and "\n" not in found.message, found.message
    assert "id='hub-message'" in hub_table(found, [])


def test_nothing_found_and_an_empty_query_say_so(hub: FakeHub):
    assert "Type a model name" in search_gguf("   ").message and not hub.requests
    assert "No GGUF models" in search_gguf("no-such-model-anywhere").message


def test_hostile_repo_ids_and_file_names_are_refused_before_they_are_used(hub: FakeHub, model_path: Path):
    hub.add("smollm2/../../escaped", "x.Q4_0.gguf", b"GGUF")  # a repo id that is a path
    hub.add("smollm2--x/y", "x.Q4_0.gguf", b"GGUF")  # '--' is the hub cache's folder separator
    for name in ("../../escaped.Q4_0.gguf", "a\\..\\b.Q4_0.gguf", "<img src=x onerror=alert(1)>.gguf",
                 ".hidden/x.Q4_0.gguf"):
        hub.add(REPO, name, b"GGUF")
    found = search_gguf("smollm2")
    assert found.refused_repos == 2
    assert all("escaped" not in r.repo and "--" not in r.repo for r in found.repos)
    first = next(r for r in found.repos if r.repo == REPO)
    assert first.refused == 4 and all(plain_gguf_name(f.filename) for f in first.files)
    assert not any("escaped" in s.path or "smollm2--x" in s.path for s in hub.requests)  # never asked for
    table = hub_table(found, hub_rows(found, LAPTOP, load_catalog()))
    assert "<img" not in table and "onerror" not in table


def test_the_name_checks_and_the_quant_read_from_a_name():
    assert plain_repo_id("bartowski/Qwen2.5-7B-Instruct-GGUF")
    for bad in ("../x", "a/b/c", "a/..", "a--b/c", "a/b\n", "/a", "a/", "a b/c", 3):
        assert not plain_repo_id(bad), bad
    assert plain_gguf_name("Q4_K_M/model-Q4_K_M.gguf") and not plain_gguf_name("model.bin")
    assert quant_of("Qwen2.5-7B-Instruct-Q4_K_M.gguf") == "Q4_K_M"
    assert quant_of("model.q8_0.gguf") == "Q8_0" and quant_of("model.gguf") == "F16"
    assert MAX_FILES >= 20


def test_a_found_file_downloads_through_the_catalogs_path_and_is_checked(hub: FakeHub, model_path: Path):
    found = search_gguf("smollm2 135m instruct")
    file = found.repos[0].files[0]
    downloads = Downloads()
    job = downloads.start(file.choice, file.model_file())
    deadline = time.monotonic() + 120
    while job.running:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert job.state == "done", job.error
    assert hashlib.sha256(job.path.read_bytes()).hexdigest() == hashlib.sha256(model_path.read_bytes()).hexdigest()
