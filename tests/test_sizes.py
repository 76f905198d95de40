"""Catalog file sizes refreshed from the hub (the real huggingface_hub client against the local fake hub)."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import pytest

from hub_server import FakeHub
from localchat.hardware import HardwareInfo
from localchat.planning import plan_command, planner
from localchat.models.catalog import load_catalog
from localchat.planning.planner import plan
from localchat.models.sizes import CACHE_FILE, apply_to_entries, refresh_sizes

REPO, MISSING = "org/Tiny-GGUF", "org/Gone-GGUF"
CATALOG = """
models:
  tiny:
    name: Tiny
    family: tiny
    license: apache-2.0
    default_quant: Q4_K_M
    architecture: {arch: llama, n_layer: 24, n_head: 14, n_head_kv: 2, head_dim: 64, n_embd: 896,
                   n_vocab: 151936, n_ctx_train: 32768, params_b: 0.49}
    files:
      Q4_K_M:
        file: tiny-Q4_K_M.gguf
        size: 398000000
        sha256: abababababababababababababababababababababababababababababababab
        sources: [{hub: {repo: org/Tiny-GGUF, file: tiny-Q4_K_M.gguf, verified: true}}]
      Q8_0:
        file: tiny-Q8_0.gguf
        size: 531000000
        sources: [{hub: {repo: org/Tiny-GGUF, file: tiny-Q8_0.gguf, verified: false}}]
  gone:
    name: Gone
    family: tiny
    license: apache-2.0
    default_quant: Q4_K_M
    architecture: {arch: llama, n_layer: 24, n_head_kv: 2, params_b: 0.3}
    files:
      Q4_K_M:
        file: gone-Q4_K_M.gguf
        size: 250000000
        sources: [{hub: {repo: org/Gone-GGUF, file: gone-Q4_K_M.gguf, verified: false}}]
"""
LISTED = 545_678_901  # what the hub says tiny-Q8_0.gguf really is


@pytest.fixture
def catalog(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LOCALCHAT_HOME", str(tmp_path / "home"))
    for key in ("HF_HUB_OFFLINE", "HF_TOKEN"):
        monkeypatch.delenv(key, raising=False)
    path = tmp_path / "models.yaml"
    path.write_text(CATALOG)
    return path


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch):
    fake = FakeHub()
    fake.add(REPO, "tiny-Q4_K_M.gguf", b"GGUF")
    fake.add(REPO, "tiny-Q8_0.gguf", b"GGUF")
    fake.listed_sizes[(REPO, "tiny-Q8_0.gguf")] = LISTED
    fake.listed_sizes[(REPO, "tiny-Q4_K_M.gguf")] = 999_000_000  # verified in the catalog: not taken
    with fake:
        monkeypatch.setenv("HF_ENDPOINT", fake.url)
        yield fake


def _listings(hub: FakeHub) -> int:
    return sum(1 for seen in hub.requests if seen.path.startswith("/api/models/"))


def test_hub_sizes_replace_the_catalogs_and_are_kept_for_a_day(catalog: Path, hub: FakeHub):
    facts = load_catalog(catalog)
    refreshed = refresh_sizes(facts)
    assert refreshed.facts["tiny"].files["Q8_0"].size == LISTED
    assert refreshed.facts["tiny"].files["Q4_K_M"].size == 398_000_000  # a verified size stays
    assert facts["tiny"].files["Q8_0"].size == 531_000_000  # the caller's facts are not changed
    assert refreshed.changed == {("tiny", "Q8_0"): (531_000_000, LISTED)}
    assert any("1 differ from the catalog" in r for r in refreshed.reasons)
    assert any(MISSING in w for w in refreshed.warnings)  # a repo the hub does not know: said, not raised
    assert refreshed.facts["gone"].files["Q4_K_M"].size == 250_000_000

    # The planner sees the hub's size: the file it names and the memory it plans for.
    box = HardwareInfo(os="Linux", machine="x86_64", physical_cores=8, logical_cores=8, cpu_flags=["avx2", "fma"],
                       ram_total=16 << 30, ram_available=12 << 30, ram_bandwidth=40e9)
    result = plan(box, refreshed.facts, planner.Wants(family="tiny"))
    assert (result.model, result.quant, result.size) == ("tiny", "Q8_0", LISTED)
    assert sum(use.weights for use in result.devices) == LISTED
    entries = load_catalog(catalog)
    apply_to_entries(entries, refreshed)
    assert entries["tiny"].files["Q8_0"].size == LISTED

    # Answers (refusals too) are kept for a day: the next plan asks nothing.
    asked = _listings(hub)
    assert asked == 2
    again = refresh_sizes(load_catalog(catalog))
    assert _listings(hub) == asked and again.facts["tiny"].files["Q8_0"].size == LISTED
    cached = json.loads((Path(hub_home()) / CACHE_FILE).read_text())
    assert any(REPO in key for key in cached)
    refresh_sizes(load_catalog(catalog), max_age=0)
    assert _listings(hub) == 2 * asked


def hub_home() -> Path:
    from localchat.paths import cache_dir

    return cache_dir()


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_offline_keeps_the_catalog_sizes_and_says_so(catalog: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{_closed_port()}")
    started = time.perf_counter()
    refreshed = refresh_sizes(load_catalog(catalog))
    assert time.perf_counter() - started < 5
    assert refreshed.facts["tiny"].files["Q8_0"].size == 531_000_000 and not refreshed.changed
    assert len(refreshed.warnings) == 1 and "did not answer" in refreshed.warnings[0]
    assert "catalog's sizes" in refreshed.warnings[0] and not refreshed.reasons
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert "HF_HUB_OFFLINE is set" in refresh_sizes(load_catalog(catalog)).warnings[0]
    monkeypatch.delenv("HF_HUB_OFFLINE")
    assert "not to use the network" in refresh_sizes(load_catalog(catalog), network=False).warnings[0]


def test_an_old_answer_beats_the_catalog_when_the_hub_is_gone(catalog: Path, hub: FakeHub):
    refresh_sizes(load_catalog(catalog))
    hub.down = True
    stale = refresh_sizes(load_catalog(catalog), max_age=0, timeout=1)
    assert stale.facts["tiny"].files["Q8_0"].size == LISTED
    assert any("older answers" in r for r in stale.reasons) and "did not answer" in stale.warnings[-1]


def test_localchat_plan_refreshes_sizes_unless_offline(catalog: Path, hub: FakeHub, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]):
    machine = tmp_path / "m.json"
    machine.write_text(HardwareInfo(os="Linux", machine="x86_64", physical_cores=8, logical_cores=8,
                                    cpu_flags=["avx2", "fma"], ram_total=16 << 30, ram_available=12 << 30,
                                    ram_bandwidth=40e9).to_json())
    args = ["--json", "--hardware", str(machine), "--catalog", str(catalog), "--model", "tiny"]
    assert plan_command.main([*args, "--offline"]) == 0
    offline = json.loads(capsys.readouterr().out)
    assert offline["size"] == 531_000_000 and any("not refreshed" in w for w in offline["warnings"])
    assert _listings(hub) == 0
    assert plan_command.main(args) == 0
    online = json.loads(capsys.readouterr().out)
    assert online["size"] == LISTED and any("file sizes" in r for r in online["reasons"])
