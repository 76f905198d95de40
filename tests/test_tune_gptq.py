"""The wizard races the kept model's GPTQ checkpoint against its GGUF file on this (CPU) machine: both real
files of SmolLM2-135M, both measured through the same engine; the faster is kept, and the profile says why."""

from __future__ import annotations

import importlib.util
import io
from pathlib import Path

import pytest

from gptq_checkpoint import FOLDER, REPO, checkpoint, hub, smollm2_gptq4  # noqa: F401  (fixtures)
from localchat import gptq
from localchat.config import load_settings
from localchat.models.catalog import load_catalog
from localchat.tune.profile import load_profile
from localchat.tune.wizard import run_wizard
from test_tune import cpu_only, home_with, own_profile_home  # noqa: F401  (fixtures)

CATALOG = """
models:
  smollm2-135m:
    name: SmolLM2-135M-Instruct
    family: smollm2
    license: apache-2.0
    default_quant: Q4_1
    architecture: {{arch: llama, n_layer: 30, n_head: 9, n_head_kv: 3, head_dim: 64, n_embd: 576,
                    n_vocab: 49152, n_ctx_train: 8192, params_b: 0.135, tied_embeddings: true}}
    files:
      Q4_1: {{file: {q4}, size: {q4_size}, sources: [{{wheel: {{package: none, version: "0", member: x, verified: true}}}}]}}
      gptq-int4:
        {{format: gptq, bits: 4, file: {folder}, size: {folder_size}, sources: [{{hub: {{repo: org/none, verified: false}}}}]}}
"""


def catalog_file(tmp_path: Path, model_path: Path, folder: Path | None, name: str = FOLDER,
                 repo: str = "org/none") -> Path:
    """SmolLM2 with its Q4_1 file and a GPTQ checkpoint `name` (the made one: a folder of the models dir)."""
    size = sum(p.stat().st_size for p in folder.iterdir()) if folder else 120_000_000
    path = tmp_path / "models.yaml"
    path.write_text(CATALOG.format(q4=model_path.name, q4_size=model_path.stat().st_size, folder=name,
                                   folder_size=size).replace("org/none", repo))
    return path


def test_the_wizard_measures_gptq_beside_gguf_and_keeps_the_faster(model_path, tmp_path, home_with) -> None:
    pytest.importorskip("torch", reason="the gptq extra is not installed")
    folder = smollm2_gptq4(model_path)
    home_with(model_path, folder)  # no other model file here: with downloads off the wizard measures every one
    out = io.StringIO()
    profile = run_wizard(lambda: cpu_only(), catalog=catalog_file(tmp_path, model_path, folder), download=False,
                         out=out, fill=256, max_measured=1, placement_doc_tokens=0, race_tokens=(16, 4),
                         allow_busy=True)  # the load check is test_tune's; a shared machine must not stop this
    gguf, gptq_run = profile.formats
    assert (gguf["format"], gguf["quant"]) == ("gguf", "Q4_1")
    assert (gptq_run["format"], gptq_run["quant"]) == ("gptq", "gptq-int4")
    assert Path(gptq_run["path"]).resolve() == folder.resolve()
    # Both really ran, the same prompt through the same engine, side by side.
    for run in (gguf, gptq_run):
        assert run["decode_tps"] > 0 and run["prefill_tps"] > 0 and run["weights"] > 50e6, run
    assert gptq_run["quality"] >= gguf["quality"] - 0.05  # equal quality: speed decides
    assert gptq_run["predicted_decode_tps"] == 0 < gguf["predicted_decode_tps"]  # not offered on a CPU
    # The faster is kept. On this shared 2-core machine it went either way: llama.cpp decoded faster on one
    # thread, but its two threads wait on each other while other programs hold the cores; the rule holds.
    gguf_wins = gguf["decode_tps"] >= gptq_run["decode_tps"]
    assert (gguf["status"], gptq_run["status"]) == (("kept", "measured") if gguf_wins else ("measured", "kept"))
    why = profile.format_reason
    assert f"format: {why}" in out.getvalue()
    assert f"{gptq_run['decode_tps']:g} vs {gguf['decode_tps']:g} tok/s decode" in why
    if gguf_wins:
        assert why.startswith("GGUF Q4_1 on llama.cpp kept: GPTQ gptq-int4 on torch runs at")
        assert "the planner does not offer GPTQ here: not offered without an NVIDIA GPU" in why
        assert (profile.quant, Path(profile.path).resolve()) == ("Q4_1", model_path.resolve())
    else:
        assert why.startswith("GPTQ gptq-int4 on torch kept: faster") and "without an NVIDIA GPU" in why
        assert (profile.quant, Path(profile.path).resolve()) == ("gptq-int4", folder.resolve())
        assert profile.decode_tps == gptq_run["decode_tps"] and profile.draft == ""
    assert "torch_gptq" not in profile.efficiency  # nothing measured that the planner offers here
    assert load_profile() == profile
    # A launch on this machine loads what was kept: the GGUF file, or the checkpoint folder.
    settings = load_settings(environ={}, hardware=cpu_only)
    assert settings.model == profile.path and settings.placement == "single"


def test_without_the_extra_nothing_is_raced_and_the_profile_says_what_it_needs(model_path, tmp_path,
                                                                                monkeypatch: pytest.MonkeyPatch):
    from localchat.planning.planner import Wants
    from localchat.tune.formats import race

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    facts = load_catalog(catalog_file(tmp_path, model_path, None))
    runs, why, correction = race(cpu_only(), facts, facts, "smollm2-135m", "Q4_1", model_path, 2048, 2, 0, Wants(),
                                 io.StringIO())
    assert runs == [] and correction == {}
    assert gptq.NEEDS_EXTRA in why and gptq.INSTALL_HINT in why


def test_where_the_planner_offers_gptq_the_wizard_fetches_a_checkpoint_to_race_it(
        model_path, tmp_path, hub, checkpoint, own_profile_home) -> None:  # noqa: F811  (fixtures)
    """On an NVIDIA machine (described; the runs themselves happen on this CPU) no checkpoint is here: the
    one the planner fits is fetched from the (fake) hub, measured beside the GGUF file, and the torch
    kernels' measured share goes to the planner."""
    from localchat.planning.planner import Wants
    from localchat.tune.formats import race
    from test_planner import nvidia_box

    facts = load_catalog(catalog_file(tmp_path, model_path, None, "SmolLM2-GPTQ-from-the-hub", REPO))
    out = io.StringIO()
    runs, why, correction = race(nvidia_box("RTX 4090", 24, 1008e9, 165), facts, facts, "smollm2-135m", "Q4_1",
                                 model_path, 2048, 2, 0, Wants(), out, (16, 4), download=True)
    assert "fetching smollm2-135m:gptq-int4" in out.getvalue()
    gguf, fetched = runs
    assert {p.name for p in Path(fetched.path).iterdir()} == set(checkpoint)  # from the hub cache
    assert fetched.decode_tps > 0 and gguf.decode_tps > 0 and fetched.predicted_decode_tps > 0
    assert "kept" in (gguf.status, fetched.status) and "the planner does not offer" not in why
    assert 0.01 <= correction["torch_gptq"] <= 4.0
