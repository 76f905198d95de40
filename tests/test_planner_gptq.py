"""GPTQ checkpoints in the plan: priced like GGUF files, offered only on NVIDIA GPUs with the gptq extra."""

from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path

import pytest

from localchat import gptq
from localchat.models.catalog import load_catalog
from localchat.planning.fit import N_UBATCH
from localchat.planning.gptq_options import TORCH_GPTQ_EFFICIENCY
from localchat.planning.planner import Wants, plan
from test_planner import cpu_box, m2_max, nvidia_box

CATALOG = Path(__file__).resolve().parents[1] / "models.yaml"


@pytest.fixture(scope="module")
def catalog():
    return load_catalog(CATALOG)


def only(catalog, key: str, *quants: str):
    """The catalog with one model, and of its files only `quants`."""
    model = catalog[key]
    return {key: dataclasses.replace(model, files={q: model.files[q] for q in quants})}


def test_a_checkpoint_is_priced_by_the_same_memory_model_as_a_gguf_file(catalog):
    box = nvidia_box("RTX 4090", 24, 1008e9, 165)
    wants = Wants(n_ctx=8192, gptq_extra=True)
    checkpoint = plan(box, only(catalog, "qwen2.5-7b", "gptq-int4"), wants)
    gguf = plan(box, only(catalog, "qwen2.5-7b", "Q4_K_M"), wants)
    model = catalog["qwen2.5-7b"]
    assert checkpoint.format == "gptq" and gguf.format == "gguf"
    assert checkpoint.quant == "gptq-int4" and checkpoint.file == "Qwen2.5-7B-Instruct-GPTQ-Int4"
    assert checkpoint.layout == "gpu" and checkpoint.draft is None
    gpu = checkpoint.devices[0]
    # Weights from the checkpoint's size (torch keeps them all on the GPU, embeddings too); the KV cache
    # and the compute scratch as for the GGUF file at the same context.
    assert gpu.device == "cuda:0" and gpu.weights == model.files["gptq-int4"].size
    assert gpu.kv == gguf.devices[0].kv == model.kv_bytes(8192, "f16")
    assert gpu.compute == gguf.devices[0].compute == model.compute_bytes(N_UBATCH)
    assert gpu.total == gpu.weights + gpu.kv + gpu.compute <= gpu.budget
    # The same roofline, at the torch kernels' share of it: slower than llama.cpp on the same GPU.
    assert 0 < checkpoint.predicted_decode_tps < gguf.predicted_decode_tps
    assert any("torch worker" in r and "(assumed)" in r for r in checkpoint.reasons)


def test_a_measured_torch_efficiency_moves_the_prediction_and_speed_decides_at_equal_quality(catalog):
    box = nvidia_box("RTX 4090", 24, 1008e9, 165)
    files = only(catalog, "qwen2.5-7b", "Q8_0", "gptq-int8")  # the same quality score: speed decides
    assumed = plan(box, files, Wants(n_ctx=4096, gptq_extra=True))
    assert assumed.quant == "Q8_0" and assumed.alternatives[0].quant == "gptq-int8"
    fast = plan(box, files, Wants(n_ctx=4096, gptq_extra=True, efficiency={"torch_gptq": 4 * TORCH_GPTQ_EFFICIENCY}))
    assert fast.quant == "gptq-int8" and fast.format == "gptq"
    assert fast.predicted_decode_tps > assumed.alternatives[0].predicted_decode_tps
    assert any("measured by `localchat tune`" in r for r in fast.reasons)


def test_a_checkpoint_too_big_for_the_gpu_is_not_offered(catalog):
    small = nvidia_box("GTX 1650", 4, 128e9, 6)
    result = plan(small, only(catalog, "qwen2.5-7b", "Q4_K_M", "gptq-int4"), Wants(n_ctx=4096, gptq_extra=True))
    assert result.format == "gguf" and result.layout == "partial"
    assert "gptq-int4" not in [a.quant for a in result.alternatives]


@pytest.mark.parametrize("machine", ["cpu", "apple"])
def test_without_an_nvidia_gpu_gguf_runs_and_the_plan_says_why(catalog, machine: str):
    box = cpu_box(64) if machine == "cpu" else m2_max()
    result = plan(box, only(catalog, "qwen2.5-0.5b", "Q4_K_M", "gptq-int4"), Wants(gptq_extra=True))
    assert result.format == "gguf" and result.quant == "Q4_K_M"
    assert all(a.quant != "gptq-int4" for a in result.alternatives)
    why = next(r for r in result.reasons if r.startswith("GPTQ checkpoints"))
    assert "qwen2.5-0.5b:gptq-int4" in why and "without an NVIDIA GPU" in why and "GGUF" in why


def test_without_the_extra_checkpoints_are_listed_as_needing_it(catalog, monkeypatch: pytest.MonkeyPatch):
    box = nvidia_box("RTX 4090", 24, 1008e9, 165)
    files = only(catalog, "qwen2.5-0.5b", "Q4_K_M", "gptq-int4", "gptq-int8")
    # The way tests/test_gptq.py simulates a machine without torch: the import system cannot find it.
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    assert not gptq.extra_installed()
    result = plan(box, files, Wants())  # gptq_extra None: the planner looks
    assert result.format == "gguf" and all(not a.quant.startswith("gptq") for a in result.alternatives)
    why = next(r for r in result.reasons if r.startswith("GPTQ checkpoints"))
    assert gptq.NEEDS_EXTRA in why and gptq.INSTALL_HINT in why
    assert "qwen2.5-0.5b:gptq-int4, qwen2.5-0.5b:gptq-int8" in why
    monkeypatch.setattr(importlib.util, "find_spec", real)
    offered = plan(box, files, Wants())
    assert "gptq-int4" in [a.quant for a in offered.alternatives] + [offered.quant]
    assert not any(r.startswith("GPTQ checkpoints") for r in offered.reasons)


def test_a_checkpoints_size_is_refreshed_from_its_repo_listing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The catalog's GPTQ size is computed, not listed: the hub's listing of the repo's checkpoint files
    (config, safetensors, tokenizer; not the README or pickled weights) replaces it, as for GGUF files."""
    from hub_server import FakeHub
    from localchat.models.sizes import refresh_sizes

    monkeypatch.setenv("LOCALCHAT_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    catalog = only(load_catalog(CATALOG), "qwen2.5-0.5b", "Q4_K_M", "gptq-int4")
    repo = catalog["qwen2.5-0.5b"].files["gptq-int4"].repo
    listed = {"config.json": 1_400, "tokenizer.json": 7_031_645, "tokenizer_config.json": 7_305,
              "model.safetensors": 458_725_120, "README.md": 4_000, "pytorch_model.bin": 900_000_000}
    with FakeHub() as hub:
        for name, size in listed.items():
            hub.add(repo, name, b"x")
            hub.listed_sizes[(repo, name)] = size
        hub.add("bartowski/Qwen2.5-0.5B-Instruct-GGUF", "Qwen2.5-0.5B-Instruct-Q4_K_M.gguf", b"x")
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        refreshed = refresh_sizes(catalog)
    whole = 1_400 + 7_031_645 + 7_305 + 458_725_120
    assert refreshed.changed[("qwen2.5-0.5b", "gptq-int4")] == (468_000_000, whole)
    assert refreshed.facts["qwen2.5-0.5b"].files["gptq-int4"].size == whole
    box = nvidia_box("RTX 4090", 24, 1008e9, 165)
    result = plan(box, only(refreshed.facts, "qwen2.5-0.5b", "gptq-int4"), Wants(n_ctx=4096, gptq_extra=True))
    assert result.size == whole and result.devices[0].weights == whole


def test_localchat_plan_says_why_gptq_is_not_offered(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    from localchat.planning import plan_command

    machine = tmp_path / "box.json"
    machine.write_text(cpu_box(16).to_json())
    assert plan_command.main(["--hardware", str(machine), "--catalog", str(CATALOG), "--model", "qwen2.5", "--offline"]) == 0
    text = capsys.readouterr().out
    assert "GPTQ checkpoints (qwen2.5-0.5b:gptq-int4" in text and "not offered without an NVIDIA GPU" in text


def test_on_an_nvidia_machine_every_gptq_checkpoint_is_priced_and_the_plan_says_why_not(catalog):
    """The 4090 desktop plans the whole catalog: each Qwen2.5 model's GPTQ checkpoints are priced (speed, score,
    the prior behind the speed) and each says why it was not chosen; the readable plan and the JSON show them."""
    import json

    from described_machines import rtx4090_desktop
    from localchat.planning.plan_command import format_plan

    result = plan(rtx4090_desktop(), catalog, Wants(gptq_extra=True))
    listed = {(m.key, q) for m in catalog.values() for q in m.formats("gptq")}
    assert {(g.model, g.quant) for g in result.gptq} == listed and len(listed) == 12
    priced = [g for g in result.gptq if g.predicted_decode_tps]
    assert {g.model for g in priced} == {m for m, _ in listed}  # every model has one that fits the 24 GB card
    for entry in priced:
        assert "0.5 of llama.cpp's roofline" in entry.speed_prior and "assumed" in entry.speed_prior
        assert entry.verdict == "chosen" or entry.verdict.startswith("not chosen: ")
    assert result.format == "gguf" and all(g.verdict != "chosen" for g in result.gptq)
    big = next(g for g in result.gptq if (g.model, g.quant) == ("qwen2.5-32b", "gptq-int4"))
    assert big.predicted_decode_tps < result.predicted_decode_tps and "quality" in big.verdict
    text = format_plan(result)
    assert "gptq       priced on the torch worker: torch at 0.5" in text
    assert "  - qwen2.5-32b gptq-int4: " in text and "not chosen" in text
    assert len(json.loads(json.dumps(result.to_dict()))["gptq"]) == 12
    # A measured share replaces the prior, and says so.
    tuned = plan(rtx4090_desktop(), catalog, Wants(gptq_extra=True, efficiency={"torch_gptq": 0.8}))
    assert all("measured by `localchat tune`" in g.speed_prior for g in tuned.gptq)
    assert next(g for g in tuned.gptq if g.quant == big.quant and g.model == big.model).predicted_decode_tps > \
        big.predicted_decode_tps


def test_without_the_extra_each_checkpoint_is_priced_and_needs_the_extra(catalog):
    from described_machines import rtx4090_desktop

    result = plan(rtx4090_desktop(), only(catalog, "qwen2.5-7b", "Q4_K_M", "gptq-int4"), Wants(gptq_extra=False))
    assert result.quant == "Q4_K_M"
    (entry,) = result.gptq
    assert entry.predicted_decode_tps > 0 and entry.verdict == f"not chosen: {gptq.NEEDS_EXTRA}"
    assert any(gptq.INSTALL_HINT in r for r in result.reasons)


def test_a_checkpoint_no_gpu_holds_is_listed_as_not_fitting(catalog):
    small = nvidia_box("GTX 1650", 4, 128e9, 6)
    result = plan(small, only(catalog, "qwen2.5-7b", "Q4_K_M", "gptq-int4"), Wants(n_ctx=4096, gptq_extra=True))
    (entry,) = result.gptq
    assert entry.predicted_decode_tps == 0 and "fits no NVIDIA GPU here" in entry.verdict
