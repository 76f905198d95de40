"""The planner on described machines: it fits, it grows with memory, drafts pay, PD split is sound."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from localchat.errors import ConfigError, ModelNotFoundError
from localchat.hardware import GPUInfo, HardwareInfo
from localchat.planning import plan_command, planner
from localchat.models.catalog import facts_from_gguf, load_catalog
from localchat.models.gguf_info import read_gguf
from localchat.planning.planner import Wants, plan, quality

GiB = 1 << 30
CATALOG = Path(__file__).resolve().parents[1] / "models.yaml"


@pytest.fixture(scope="module")
def catalog():
    return load_catalog(CATALOG)


def cpu_box(ram_gb: int, bandwidth: float = 38e9) -> HardwareInfo:
    return HardwareInfo(os="Linux", machine="x86_64", cpu_model="desktop", physical_cores=8, logical_cores=16,
                        cpu_max_mhz=4500, cpu_flags=["avx2", "fma"], ram_total=ram_gb * GiB,
                        ram_available=int(ram_gb * GiB * 0.75), ram_bandwidth=bandwidth)


def nvidia_box(name: str, vram_gb: int, bandwidth: float, tflops: float, n: int = 1, ram_gb: int = 32) -> HardwareInfo:
    box = cpu_box(ram_gb)
    box.gpus = [GPUInfo(index=i, name=name, memory_total=vram_gb * GiB, memory_free=int(vram_gb * GiB * 0.95),
                        spec_bandwidth=bandwidth, fp16_tflops=tflops, compute_capability="8.6") for i in range(n)]
    box.peer_access = [[0, 1]] if n > 1 else []
    return box


def m2_max() -> HardwareInfo:
    return HardwareInfo(os="Darwin", machine="arm64", cpu_model="Apple M2 Max", physical_cores=12, logical_cores=12,
                        cpu_flags=["neon", "dotprod"], ram_total=32 * GiB, ram_available=24 * GiB, unified_memory=True,
                        gpus=[GPUInfo(index=0, name="Apple M2 Max GPU", vendor="apple", memory_total=int(32 * GiB * 2 / 3),
                                      memory_free=int(32 * GiB * 2 / 3), spec_bandwidth=400e9, fp32_tflops=13.6,
                                      unified=True)])


MACHINES = {
    "cpu-8": cpu_box(8), "cpu-16": cpu_box(16), "cpu-64": cpu_box(64),
    "rtx3060": nvidia_box("RTX 3060", 12, 360e9, 51),
    "rtx4060-laptop": nvidia_box("RTX 4060 Laptop", 8, 256e9, 60, ram_gb=16),
    "rtx4090": nvidia_box("RTX 4090", 24, 1008e9, 165),
    "2x-rtx3090": nvidia_box("RTX 3090", 24, 936e9, 71, n=2, ram_gb=64),
    "m2-max": m2_max(),
    "h100": nvidia_box("H100", 80, 3350e9, 500, ram_gb=256),
}


def _round_trip(hw: HardwareInfo) -> HardwareInfo:
    """Plan from the JSON form, the way `localchat plan --hardware FILE` does."""
    return HardwareInfo.from_json(hw.to_json())


@pytest.mark.parametrize("name", MACHINES)
def test_every_plan_fits_each_device_with_margin(name: str, catalog):
    hw = _round_trip(MACHINES[name])
    result = plan(hw, catalog)
    free = {"cpu": hw.ram_available, **{f"cuda:{g.index}": g.memory_free for g in hw.gpus},
            **{f"metal:{g.index}": g.memory_free for g in hw.gpus}}
    for use in result.devices:
        assert use.total == use.weights + use.kv + use.compute + use.draft
        # Every device keeps at least llama.cpp's own fit margin free (1 GiB; planning/fit.py).
        assert use.total <= use.budget <= free[use.device] - (1 << 30), (name, use)
    on_devices = sum(u.weights for u in result.devices)
    assert on_devices >= result.size * 0.97  # every weight is somewhere
    assert result.n_ctx >= 4096 and result.reasons and len(result.alternatives) == 3
    assert result.predicted_decode_tps > 0 and result.predicted_prefill_tps > result.decode_tps_without_draft
    if not hw.gpus:
        assert result.layout == "cpu" and result.n_gpu_layers == 0


@pytest.mark.parametrize("chain", [("cpu-8", "cpu-16", "cpu-64"),
                                   ("rtx4060-laptop", "rtx3060", "rtx4090", "h100"),
                                   ("rtx4090", "2x-rtx3090")])
def test_more_memory_never_plans_a_worse_model(chain, catalog):
    plans = [plan(MACHINES[name], catalog) for name in chain]
    scores = [(p.quality, p.n_ctx) for p in plans]
    assert scores == sorted(scores), dict(zip(chain, scores))
    if MACHINES[chain[-1]].gpus:  # GPUs are not speed-bound the way one memory bus is: the model grows
        assert plans[-1].quality > plans[0].quality
    else:  # one memory bus: more RAM holds bigger models, but the speed target keeps the one that streams
        assert len({(p.model, p.quant) for p in plans}) == 1
        assert plans[-1].predicted_decode_tps == plans[0].predicted_decode_tps


def test_growing_only_memory_grows_the_model_or_its_context(catalog):
    small, big = nvidia_box("GPU", 12, 500e9, 80), nvidia_box("GPU", 48, 500e9, 80)
    a, b = plan(small, catalog), plan(big, catalog)
    assert (b.quality, b.n_ctx) > (a.quality, a.n_ctx)


@pytest.mark.parametrize("name", MACHINES)
def test_a_draft_only_where_it_pays(name: str, catalog):
    result = plan(MACHINES[name], catalog)
    if result.draft:
        assert result.predicted_decode_tps >= result.decode_tps_without_draft * 1.15
        assert catalog[result.draft].family == catalog[result.model].family
        assert any(u.draft > 0 for u in result.devices)
    else:
        assert result.predicted_decode_tps == result.decode_tps_without_draft
        assert all(u.draft == 0 for u in result.devices)


def test_no_draft_when_acceptance_is_poor(catalog):
    # Qwen3: a dense model with a draft (the H100 would pick gpt-oss-120b, which has none).
    hopeless = plan(MACHINES["h100"], catalog, Wants(family="qwen3", draft_acceptance=0.05))
    assert hopeless.draft is None and any("no draft" in r for r in hopeless.reasons)


def test_pd_split_needs_two_gpus_that_each_hold_model_and_kv(catalog):
    wants = Wants(concurrency=4, family="llama3")
    result = plan(MACHINES["2x-rtx3090"], catalog, wants)
    assert result.layout == "pd-split"
    model = catalog[result.model]
    gpus = [u for u in result.devices if u.device.startswith("cuda")]
    assert len(gpus) == 2
    for use in gpus:
        assert use.weights >= result.size - model.embedding_bytes(result.quant) * 1.01
        assert use.kv >= model.kv_bytes(result.n_ctx, result.type_k) and use.total <= use.budget
    for name in ("rtx4090", "h100", "m2-max", "cpu-64"):
        assert plan(MACHINES[name], catalog, wants).layout != "pd-split"
    # When the model needs both GPUs, there is nothing to split prefill from decode with.
    assert plan(MACHINES["2x-rtx3090"], catalog, Wants(concurrency=4)).layout != "pd-split"


def test_too_little_gpu_memory_means_partial_offload_or_cpu(catalog):
    tiny = nvidia_box("tiny", 2, 200e9, 20)
    result = plan(tiny, catalog, Wants(family="qwen2.5", min_decode_tps=1))
    assert result.layout in ("partial", "cpu", "gpu")
    gpu_use = [u for u in result.devices if u.device == "cuda:0"]
    if result.layout == "partial":
        assert 0 < result.n_gpu_layers < catalog[result.model].n_layer and gpu_use[0].total <= gpu_use[0].budget


def test_requested_context_and_family_are_honoured(catalog):
    result = plan(MACHINES["rtx4090"], catalog, Wants(n_ctx=32768, family="gemma3"))
    assert result.n_ctx == 32768 and catalog[result.model].family == "gemma3"
    with pytest.raises(ModelNotFoundError, match="cannot fit"):
        plan(cpu_box(2), catalog, Wants(family="qwen3", n_ctx=32768, min_decode_tps=0))


def test_quality_ladder_orders_quants_and_sizes(catalog):
    model = catalog["qwen3-8b"]
    ladder = [quality(model, q) for q in ("Q4_K_M", "Q5_K_M", "Q6_K", "Q8_0")]
    assert ladder == sorted(ladder)
    assert quality(catalog["qwen3-14b"], "Q4_K_M") > quality(model, "Q8_0")


def test_the_real_file_plans_with_exact_layer_bytes(model_path: Path):
    info = read_gguf(model_path)
    facts = facts_from_gguf(info, "smollm2-135m", model_path.stat().st_size, family="smollm2")
    layers = info.layer_bytes()
    assert facts.layer_bytes(info.quant) == max(layers)
    assert facts.n_layer * facts.layer_bytes(info.quant) + facts.embedding_bytes(info.quant) <= info.tensor_bytes * 1.2
    result = plan(cpu_box(8), {facts.key: facts})
    assert result.model == "smollm2-135m" and result.n_ctx <= info.context_length


def test_cli_plans_a_described_machine(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    machine = tmp_path / "m.json"
    machine.write_text(MACHINES["rtx3060"].to_json())
    assert plan_command.main(["--json", "--hardware", str(machine), "--catalog", str(CATALOG), "--context", "8192",
                              "--offline"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["n_ctx"] == 8192 and out["devices"] and out["alternatives"]
    assert plan_command.main(["--hardware", str(machine), "--catalog", str(CATALOG), "--model", "smollm2", "--offline"]) == 0
    assert "SmolLM2" in capsys.readouterr().out


@pytest.mark.parametrize("drop, named", [
    (("ram_available",), "ram_available"),
    (("ram_total", "ram_available"), "ram_total, ram_available"),
    (("gpus.0.spec_bandwidth",), "gpus[0].spec_bandwidth"),
    (("gpus.0.memory_free",), "gpus[0].memory_free"),
])
def test_a_described_machine_that_lacks_a_field_is_told_which(drop, named, tmp_path: Path):
    described = json.loads(MACHINES["rtx3060"].to_json())
    for key in drop:
        if key.startswith("gpus."):
            del described["gpus"][0][key.split(".")[2]]
        else:
            del described[key]
    machine = tmp_path / "m.json"
    machine.write_text(json.dumps(described))
    with pytest.raises(ConfigError) as caught:
        plan_command.main(["--hardware", str(machine), "--catalog", str(CATALOG), "--offline"])
    message = str(caught.value)
    assert message.startswith(f"{machine}: the hardware description lacks {named};")
    assert '"ram_available": ' in message and "localchat probe --json" in message  # an example and the way to get one
    example = json.loads(message.split("needs at least ")[1].split(" (bytes")[0])
    assert planner.plan(HardwareInfo.from_description(json.dumps(example)), load_catalog(CATALOG)).model  # it plans


def test_plan_help_documents_the_description_format(capsys: pytest.CaptureFixture[str]):
    with pytest.raises(SystemExit):
        plan_command.main(["--help"])
    shown = capsys.readouterr().out
    for field in ("ram_total", "ram_available", "physical_cores", "memory_total", "spec_bandwidth",
                  "ram_bandwidth", "localchat probe --json"):
        assert field in shown


def test_catalog_facts_are_consistent(catalog):
    for model in catalog.values():
        assert model.n_head % model.n_head_kv == 0 and model.n_layer > 0 and model.default_quant in model.files
        if model.draft:
            draft = catalog[model.draft]
            assert draft.family == model.family and abs(draft.n_vocab - model.n_vocab) <= 128
            assert draft.params_b < model.params_b
        sizes = {q: f.size for q, f in model.files.items()}
        for low, high in [("Q3_K_M", "Q4_K_M"), ("Q4_K_M", "Q5_K_M"), ("Q5_K_M", "Q6_K"), ("Q6_K", "Q8_0")]:
            if low in sizes and high in sizes:
                assert sizes[low] < sizes[high], (model.key, low, high)
        bits = sizes[model.default_quant] * 8 / (model.params_b * 1e9)
        assert 3.5 < bits < 9, (model.key, bits)  # the size agrees with the parameter count


def _smollm2_on(hw: HardwareInfo, catalog, fill: int, **wants) -> float:
    from localchat.tune.calibrate import predict

    layout = "cpu" if not hw.gpus else "gpu"
    return predict(hw, catalog, "smollm2-135m", "Q4_1", 8192, layout=layout, fill=fill, **wants).decode_tps


@pytest.mark.parametrize("name", ["cpu-16", "rtx4090"])
def test_decode_slows_as_the_context_fills(name: str, catalog):
    """Each token reads the KV cache and attends over it: more context, fewer tokens/s, on CPU and GPU."""
    hw = MACHINES[name]
    speeds = [_smollm2_on(hw, catalog, fill) for fill in (0, 512, 2048, 8192)]
    assert speeds == sorted(speeds, reverse=True) and len(set(speeds)) == 4
    model = catalog["smollm2-135m"]
    assert model.attention_flops(2048) == 4 * model.n_layer * model.n_head * model.head_dim * 2048
    assert model.kv_read_bytes(2048) == model.kv_bytes(2048)  # no sliding window: every cell is read


def test_cpu_attention_is_priced_as_compute_not_only_bytes(catalog):
    """On a CPU the per-cell attention work outweighs the cache's bytes: a faster bus barely narrows the gap
    between a short and a full context, while slower cores widen it. The 2-core reference machine measured
    Q4_1 decode falling ~1.9x from 128 to 2,048 cached tokens on one thread; the bytes-only model said ~1.2x."""
    def box(bandwidth: float = 25e9, mhz: float = 2600, cores: int = 2) -> HardwareInfo:
        hw = cpu_box(16, bandwidth)
        hw.physical_cores, hw.logical_cores, hw.cpu_max_mhz = cores, cores, mhz
        return hw

    def gap(hw: HardwareInfo) -> float:
        return _smollm2_on(hw, catalog, 128) / _smollm2_on(hw, catalog, 2048)

    assert 1.5 < gap(box()) < 2.5 and 1.5 < gap(box(cores=1)) < 2.5
    assert gap(box(bandwidth=4 * 25e9)) > gap(box()) * 0.9
    assert gap(box(mhz=1300)) > gap(box())


def test_gemma_sliding_window_layers_attend_over_their_window_only(catalog):
    gemma = catalog["gemma-3-4b"]
    assert gemma.sliding_window and gemma.attended_cells(32768) < gemma.n_layer * 32768 / 2
    assert gemma.attended_cells(256) == gemma.n_layer * 256  # within the window every layer sees all


def test_a_measured_acceptance_replaces_the_assumed_one(catalog):
    hw, family = MACHINES["h100"], "qwen3"  # a dense model with a draft
    assumed = plan(hw, catalog, Wants(family=family))
    assert assumed.draft and any("assumed" in r for r in assumed.reasons)
    measured_poor = plan(hw, catalog, Wants(family=family, measured_acceptance={assumed.model: 0.05}))
    assert measured_poor.draft is None and any("measured by `localchat tune`" in r for r in measured_poor.reasons)
    # Measured for another model: this one keeps the assumed figure.
    assert plan(hw, catalog, Wants(family=family, measured_acceptance={"qwen3-0.6b": 0.05})).draft == assumed.draft
    # The planner stays a pure function: same inputs, same plan.
    assert plan(hw, catalog, Wants(family=family, measured_acceptance={assumed.model: 0.05})) == measured_poor


def _imported(source: str, package: str) -> list[str]:
    """Every module a source file imports, at its top or inside functions, by absolute name."""
    import ast

    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[:len(package.split(".")) + 1 - node.level] if node.level else []
            if node.module:
                found.append(".".join(base + [node.module]))
            else:
                found += [".".join(base + [a.name]) for a in node.names]
    return found


def test_planning_imports_nothing_above_it():
    """planning/ may use models/, the runtimes (runtime/, gptq/), hardware/, errors and the bottom row's helpers
    (units, arguments), never the wizard, settings or applications (lazy imports inside functions included)."""
    import localchat.planning

    allowed = ("localchat.models", "localchat.runtime", "localchat.gptq", "localchat.hardware", "localchat.errors",
               "localchat.units", "localchat.arguments", "localchat.planning")
    assert _imported("from ..tune.profile import x\nfrom .. import config", "localchat.planning") == [
        "localchat.tune.profile", "localchat.config"]  # the check can fail
    for source in Path(localchat.planning.__file__).parent.glob("*.py"):
        ours = [m for m in _imported(source.read_text(encoding="utf-8"), "localchat.planning")
                if m.startswith("localchat")]
        assert all(m.startswith(allowed) for m in ours), (source.name, ours)


def test_a_model_that_always_thinks_is_planned_at_its_answer_speed(catalog):
    thinking, instruct = catalog["qwen3-4b-thinking-2507"], catalog["qwen3-4b-instruct-2507"]
    assert planner.answer_share(instruct) == 1.0
    assert planner.answer_share(thinking) == pytest.approx(300 / 1300)
    # The pair shares every fact but the thinking: on a CPU box that holds both, the one that answers at once
    # is preferred, and the thinking one's reasons say why its speed counts less.
    pair = {key: catalog[key] for key in ("qwen3-4b-thinking-2507", "qwen3-4b-instruct-2507")}
    chosen = plan(MACHINES["cpu-16"], pair)
    assert chosen.model == "qwen3-4b-instruct-2507"
    alone = plan(MACHINES["cpu-16"], {"qwen3-4b-thinking-2507": thinking})
    assert any("thinks ~1000 tokens first" in reason for reason in alone.reasons)
