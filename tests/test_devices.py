"""Placements mapped onto described hardware: which workers run where, and what is refused."""

from __future__ import annotations

import dataclasses

import pytest

from localchat.cli import main
from localchat.errors import PlacementError
from localchat.hardware import GPUInfo, HardwareInfo
from localchat.planning.fit import ModelSize
from localchat.planning.placements import arrange
from localchat.runtime.workers.worker import WorkerConfig

GiB = 1 << 30
BASE = WorkerConfig(n_ctx=8192, n_threads=8)
EIGHT_B_Q4 = ModelSize(weights=int(4.6 * GiB), kv_per_token=128 * 1024)  # Llama-3.1-8B Q4_K_M, f16 cache


def box(*vram_gb: float) -> HardwareInfo:
    gpus = [GPUInfo(index=i, name=f"GPU{i}", memory_total=int(v * GiB), memory_free=int(v * GiB * 0.95))
            for i, v in enumerate(vram_gb)]
    return HardwareInfo(physical_cores=8, logical_cores=16, ram_total=64 * GiB, gpus=gpus)


def test_pd_split_without_gpus_runs_two_cpu_workers_with_half_the_cores_each():
    layout = arrange("pd-split", box(), BASE, EIGHT_B_Q4)
    assert layout.prefill is not None and layout.worker.n_threads == layout.prefill.n_threads == 4
    assert layout.worker.n_gpu_layers == 0 and "CPU" in layout.description


def test_pd_split_puts_prefill_and_decode_on_their_own_gpus():
    layout = arrange("pd-split", box(24, 24), BASE, EIGHT_B_Q4)
    assert (layout.prefill.main_gpu, layout.worker.main_gpu) == (0, 1)
    assert layout.worker.split_mode == layout.prefill.split_mode == "none"
    assert layout.worker.n_gpu_layers == layout.prefill.n_gpu_layers == -1
    named = arrange("pd-split", box(24, 24, 24), BASE, EIGHT_B_Q4, devices="2,0")
    assert (named.prefill.main_gpu, named.worker.main_gpu) == (2, 0)


@pytest.mark.parametrize("placement", ["pd-split", "layer-split", "draft-gpu"])
def test_one_gpu_asked_to_split_is_refused(placement):
    with pytest.raises(PlacementError, match="needs two GPUs.*one GPU"):
        arrange(placement, box(24), BASE, EIGHT_B_Q4, draft_size=EIGHT_B_Q4)


def test_pd_split_is_refused_when_a_gpu_cannot_hold_model_and_kv():
    with pytest.raises(PlacementError, match="decode copy .*needs 6.0 GB on GPU 1"):
        arrange("pd-split", box(24, 6), BASE, EIGHT_B_Q4)


def test_layer_split_shares_layers_by_free_memory_and_refuses_what_does_not_fit():
    layout = arrange("layer-split", box(24, 12), BASE, EIGHT_B_Q4)
    assert layout.worker.split_mode == "layer" and layout.worker.n_gpu_layers == -1
    assert layout.worker.tensor_split == pytest.approx((2 / 3, 1 / 3))
    with pytest.raises(PlacementError, match="to spare together"):
        arrange("layer-split", box(3, 3), BASE, EIGHT_B_Q4)


def test_draft_gpu_needs_a_draft_and_puts_it_on_the_second_gpu():
    with pytest.raises(PlacementError, match="needs a draft model"):
        arrange("draft-gpu", box(24, 8), BASE, EIGHT_B_Q4)
    layout = arrange("draft-gpu", box(24, 8), BASE, EIGHT_B_Q4, draft_size=ModelSize(GiB, 16 * 1024))
    assert (layout.worker.main_gpu, layout.draft.main_gpu) == (0, 1)


def test_unknown_devices_are_named_in_the_refusal():
    with pytest.raises(PlacementError, match="GPU 3, but the GPUs this install can use are: GPU 0, GPU 1"):
        arrange("pd-split", box(24, 24), BASE, EIGHT_B_Q4, devices="0,3")


def test_model_size_comes_from_the_gguf_header(model_path):
    size = ModelSize.of(model_path)
    # SmolLM2-135M: 30 layers, 3 KV heads of 64: 23,040 bytes of f16 cache per token (llama.cpp's number)
    assert size.kv_per_token == 2 * 2 * 30 * 3 * 64
    assert 0.9 * model_path.stat().st_size < size.weights <= model_path.stat().st_size


def test_cli_refuses_an_impossible_placement_in_one_line(capsys):
    from localchat.hardware.probe import probe

    if len(probe(measure=False).gpus) >= 2:
        pytest.skip("this machine has two GPUs: layer-split is possible here")
    assert main(["chat", "--placement", "layer-split", "hi"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("localchat: --placement layer-split needs two GPUs") and "\n" not in err


def test_cli_answers_with_pd_split_on_cpu_workers(capsys):
    code = main(["chat", "--placement", "pd-split", "--temperature", "0", "--max-tokens", "12", "--json",
                 "--n-ctx", "2048", "--file", __file__, "What does this file test?"])
    assert code == 0
    import json

    answer = json.loads(capsys.readouterr().out)
    assert answer["kv_transfer"]["bytes"] > 0 and answer["completion_tokens"] > 0


def mixed(placement: str, idle_ms: float, busy_p99_ms: float) -> "MixedResult":
    from localchat.tune.placements import MixedResult

    return MixedResult(placement, idle_gaps_ms=[idle_ms] * 10, busy_gaps_ms=[busy_p99_ms * 0.8] * 50 + [busy_p99_ms])


def test_a_split_is_kept_only_when_it_measurably_wins():
    from localchat.tune.placements import keep_placement

    single = mixed("single", 10, 60)
    kept, why = keep_placement([single, mixed("pd-split", 10.5, 30)])
    assert kept.placement == "pd-split" and "50% smoother" in why
    kept, why = keep_placement([single, mixed("pd-split", 18, 20)])  # smoother, but a chat alone is much slower
    assert kept is single and "pd-split" in why and "56%" in why
    kept, _ = keep_placement([single, mixed("pd-split", 10, 55)])  # 8% smoother: noise-level
    assert kept is single


def test_the_mixed_workload_runs_on_both_cpu_layouts(model_path):
    from localchat.tune.placements import measure_placement

    base = WorkerConfig(n_ctx=2048, n_threads=2)
    for placement in ("single", "pd-split"):
        result = measure_placement(model_path, arrange(placement, HardwareInfo(), base), doc_tokens=300)
        assert result.busy_gaps_ms and result.idle_gaps_ms and result.doc_tokens > 250
        assert (result.transfer_bytes > 0) == (placement == "pd-split")


def test_the_planner_and_the_launch_agree_on_what_fits():
    """Same model, same GPUs: the plan offers a PD split exactly where the launch does not refuse one."""
    from localchat.models.catalog import load_catalog
    from localchat.planning.cost import DEFAULT_EFFICIENCY, devices_of, options_for
    from localchat.planning.planner import Wants

    catalog = load_catalog()
    model, quant, n_ctx = catalog["qwen3-8b"], "Q4_K_M", 8192
    size = ModelSize.of_facts(model, quant)
    verdicts = set()
    for tenths in range(40, 90):  # 4.0 .. 8.9 GiB per GPU, across the boundary
        hw = box(tenths / 10, tenths / 10)
        hw.ram_available = 32 * GiB
        for gpu in hw.gpus:
            gpu.spec_bandwidth = 500e9  # the planner uses only GPUs whose bandwidth it knows
        devices, _ = devices_of(hw, DEFAULT_EFFICIENCY)
        planned = any(o.layout == "pd-split" for o in options_for(
            model, quant, n_ctx, "f16", devices, catalog, Wants(n_ctx=n_ctx, concurrency=2)))
        try:
            arrange("pd-split", hw, WorkerConfig(n_ctx=n_ctx), size)
            launched = True
        except PlacementError:
            launched = False
        assert planned == launched, tenths
        verdicts.add(planned)
    assert verdicts == {True, False}


def test_auto_is_the_planners_pick_for_this_model_on_this_machine(model_path):
    from localchat.planning.choose import choose_arrangement

    def described(vram_gb: float) -> HardwareInfo:
        hw = box(vram_gb)
        hw.ram_available, hw.gpus[0].spec_bandwidth = 32 * GiB, 500e9
        return hw

    base = WorkerConfig(n_ctx=2048, n_threads=2)
    one_gpu = described(24)
    layout = choose_arrangement("auto", base, model_path, hardware=lambda: one_gpu)
    assert layout.placement == "single" and layout.worker.n_gpu_layers == 31  # all 30 layers and the head
    from localchat.planning.fit import RESERVE

    tiny = described((RESERVE["gpu"] / GiB + 0.15) / 0.95)  # after the CUDA reserve, room for some of the layers only
    partial = choose_arrangement("auto", base, model_path, hardware=lambda: tiny)
    assert partial.placement == "single" and 0 < partial.worker.n_gpu_layers < 30
    cpu = choose_arrangement("auto", base, model_path, hardware=lambda: HardwareInfo(physical_cores=2, ram_total=8 * GiB,
                                                                                 ram_available=6 * GiB))
    assert cpu.placement == "single" and cpu.worker.n_gpu_layers == 0 and "CPU" in cpu.description
    # A layer count the settings give wins over the planner's.
    assert choose_arrangement("auto", dataclasses.replace(base, n_gpu_layers=4), model_path,
                         hardware=lambda: one_gpu).worker.n_gpu_layers == 4


def test_auto_is_the_tuned_placement_when_the_profile_holds(model_path, tmp_path, monkeypatch):
    from localchat.assemble import arrange_workers
    from localchat.config import Settings
    from localchat.tune.profile import Profile, fingerprint, quick_hardware, save_profile, tuned_for

    machine = quick_hardware()
    if machine is None or machine.gpus:
        pytest.skip("needs a machine whose GPU-less pd-split runs on two CPU workers")
    monkeypatch.setenv("LOCALCHAT_HOME", str(tmp_path))
    base = WorkerConfig(n_ctx=2048, n_threads=2)
    tuned = Profile(fingerprint=fingerprint(machine), hardware="this machine", model="smollm2-135m", quant="Q4_1",
                    path=str(model_path), layout="pd-split", n_ctx=2048, n_threads=2,
                    step_ms={"1": 6.5, "2": 9.0})
    save_profile(tuned)
    settings = Settings(model=str(model_path), placement="auto")
    layout = arrange_workers(settings, base, model_path, None)
    assert layout.placement == "pd-split" and layout.prefill is not None
    assert layout.step_costs is None  # measured on one worker: they do not hold for two
    tuned.layout = "cpu"  # the planner's layout name for one worker on the CPU
    save_profile(tuned)
    layout = arrange_workers(settings, base, model_path, None)
    assert layout.placement == "single" and layout.step_costs == {1: 6.5, 2: 9.0}
    # The launch seeds the speculator with them instead of timing steps again.
    from localchat.assemble import open_engine

    with open_engine(Settings(model=str(model_path), placement="auto", n_ctx=2048, n_threads=2)) as engine:
        assert engine.speculator is not None and engine.speculator.costs.table() == {1: 0.0065, 2: 0.009}
    # Another model file: the profile does not hold for it (then the planner picks).
    assert tuned_for(tuned, tmp_path / "other.gguf") is None and tuned_for(tuned, model_path) is tuned
