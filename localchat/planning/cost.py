"""The planner's cost model: device budgets, and roofline speed and memory of each placement's layouts
(a layout: where one model's layers go, "cpu", "gpu", "partial"...; its placement: how the workers run it)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..hardware import HardwareInfo
from ..models.catalog import ModelFacts
from ..runtime.speculation.acceptance import expected_tokens
from ..units import rate_text
from .fit import N_UBATCH, budget, fits, gpu_budget, usage
from .placements import Parts, layout_named, layouts, takes_draft
from .site import Device, Site

DECODE_FILL = 2048             # context tokens already present when decode speed is quoted
MIN_DRAFT_SPEEDUP = 1.15       # below this a draft costs memory for noise-level gain
# Fractions of the roofline llama.cpp reaches; the tune wizard measures and overrides them.
# CPU decode compute is low because quantized kernels spend most cycles dequantizing. CPU decode
# attention is lower still: ggml's per-row flash-attention kernel pays a dot product, an exp and a
# scaled add per cached cell and head (on the 2-core reference machine Q4_1 decode on one thread
# fell from ~50 to ~26 tok/s between 128 and 2,048 cached tokens: ~0.11 of the FMA peak).
DEFAULT_EFFICIENCY = {"bandwidth": 0.8, "cpu_decode_compute": 0.25, "cpu_prefill_compute": 0.6,
                      "cpu_attention": 0.11, "gpu_compute": 0.5}
LAYER_OVERHEAD = {"gpu": 40e-6, "cpu": 5e-6}   # kernel launches and syncs per layer and step
# Bytes/s (counted like the probe's copy: read + write) one core streams on its own. A core that is
# dequantizing is not issuing loads, so on few cores load time and math time add up; many cores
# together hit the memory bus first. ~13 GB/s per thread measured on the 2-core reference machine;
# current x86 and ARM cores stream 10-20 GB/s each.
CORE_BANDWIDTH = 12e9
# Per decode step, the Python engine's own work (sampling, detokenizing, streaming) beside
# llama_decode: ~1-2 ms measured against llama-bench on the 2-core reference machine.
ENGINE_STEP_OVERHEAD = 1e-3


@dataclass(slots=True)
class Option:
    """One feasible way to run one model+quant, with its predicted memory and speed."""

    model: str
    quant: str
    n_ctx: int
    type_kv: str
    layout: str                    # the planner's layout (placements.py): where the layers go
    n_gpu_layers: int
    main_gpu: int
    tensor_split: list[float]
    usage: list[dict]
    decode_tps: float
    prefill_tps: float
    plain_decode_tps: float
    draft: str | None = None
    draft_quant: str | None = None
    draft_device: str | None = None
    n_draft: int = 0
    draft_speedup: float = 0.0     # the best a draft would give here, paying or not (0: no draft to place)
    quality: float = 0.0
    reasons: list[str] = field(default_factory=list)


def devices_of(hw: HardwareInfo, eff: dict[str, float]) -> tuple[list[Device], list[str]]:
    """The CPU (first) and usable GPUs, with budgets after margins and reserves."""
    warnings = list(hw.warnings)
    ghz = (hw.cpu_max_mhz or 3000) / 1000
    # FMA FP32 lanes x 2 per cycle per core; many AVX-512 parts run one 512-bit unit, so no more than AVX2.
    per_cycle = 32 if {"avx2", "fma"} <= set(hw.cpu_flags) or "avx512f" in hw.cpu_flags else 16 if "neon" in hw.cpu_flags else 8
    bandwidth = hw.ram_bandwidth
    if not bandwidth:
        apple = [g.bandwidth for g in hw.gpus if g.unified and g.bandwidth]
        bandwidth = apple[0] if apple else 20e9
        warnings.append(f"host bandwidth not measured; assuming {rate_text(bandwidth)}.")
    cpu = Device("cpu", "cpu", -1, hw.ram_available, budget(hw.ram_available, "cpu"),
                 bandwidth * eff["bandwidth"], hw.physical_cores * ghz * 1e9 * per_cycle, hw.unified_memory,
                 stream=hw.physical_cores * CORE_BANDWIDTH * eff["bandwidth"])
    devices = [cpu]
    for gpu in hw.gpus:
        if gpu.memory_total <= 0 or not gpu.bandwidth:
            warnings.append(f"{gpu.name}: memory or bandwidth unknown; not used.")
            continue
        free = min(gpu.memory_free, hw.ram_available) if gpu.unified else gpu.memory_free
        flops = (gpu.fp16_tflops or (gpu.fp32_tflops or 0) * 2 or gpu.bandwidth / 1e12 * 50) * 1e12
        devices.append(Device(f"metal:{gpu.index}" if gpu.unified else f"cuda:{gpu.index}", "gpu", gpu.index, free,
                              gpu_budget(gpu, hw.ram_available), gpu.bandwidth * eff["bandwidth"],
                              flops, gpu.unified))
    return devices, warnings


def gpu_indices(names: list[str]) -> str:
    """The GPU indices among device names ("cuda:0", "metal:0", "cpu"), as the `devices` setting writes them."""
    return ",".join(n.split(":", 1)[1] for n in names if n.startswith(("cuda:", "metal:")))


def step_time(model: ModelFacts, quant: str, parts: list[tuple[Device, int, bool]], n_tokens: int,
              type_kv: str, eff: dict[str, float], fill: int = DECODE_FILL) -> float:
    """Seconds for one llama_decode of n_tokens, `fill` tokens already cached, over a pipeline of
    (device, layers, holds the head)."""
    def rate(key: str) -> float:
        return eff.get(key, DEFAULT_EFFICIENCY[key])

    total = 0.0
    for device, n_layers, head in parts:
        # What the step reads, not what the device holds: a mixture of experts reads its tokens' experts only.
        weights = n_layers * model.read_layer_bytes(quant, n_tokens) + (model.output_bytes(quant) if head else 0)
        kv = model.kv_read_bytes(fill, type_kv, n_layers)
        share = (n_layers + (1 if head else 0)) / (model.n_layer + 1)
        flops = n_tokens * model.flops_per_token() * share
        attention = n_tokens * model.attention_flops(fill, n_layers)
        if device.kind == "gpu":
            compute = device.flops * rate("gpu_compute")
            # A GPU overlaps loads with math: weights and attention each run at their slower roofline.
            total += (max(weights / device.bandwidth, flops / compute)
                      + max(kv / device.bandwidth, attention / compute))
        else:
            decode = n_tokens <= 16
            matmul = device.flops * rate("cpu_decode_compute" if decode else "cpu_prefill_compute")
            attend = device.flops * rate("cpu_attention" if decode else "cpu_prefill_compute")
            # Each core alternates between streaming and computing; the bus bounds all cores together.
            cores = (weights + kv) / (device.stream or device.bandwidth) + flops / matmul + attention / attend
            total += max((weights + kv) / device.bandwidth, cores)
        total += n_layers * LAYER_OVERHEAD[device.kind]
    return total


def _layouts(model: ModelFacts, quant: str, n_ctx: int, type_kv: str, devices: list[Device],
             wants) -> list[tuple[str, Parts, list[dict]]]:
    """(layout, parts, usage) for every planner layout of the vocabulary that fits."""
    site = Site(model, quant, n_ctx, type_kv, devices[0], devices[1:], wants)
    site.fitting = [g for g in site.gpus if fits([site.use(g, model.n_layer, True)])]
    found = []
    for _, layout in layouts():
        placed = layout.place(site) if layout.place else None
        if placed:
            found.append((layout.name, *placed))
    return found


def _draft(model: ModelFacts, quant: str, parts: list, use: list[dict], layout: str, n_ctx: int,
           type_kv: str, devices: list[Device], catalog: dict[str, ModelFacts], wants, eff: dict) -> dict | None:
    """The best draft setup for a layout (pays or not), or None when no draft can be placed."""
    draft = catalog.get(model.draft or "")
    if draft is None or draft.key == model.key or not takes_draft(layout):
        return None
    d_quant = "Q8_0" if "Q8_0" in draft.files else draft.default_quant
    main = parts[-1][0]
    # The target's own device first, then each draft site of the vocabulary beside this layout.
    sites = [(main, layout)] + [(d, site.name) for _, site in layouts() if site.draft_on
                                for d in site.draft_on(layout, devices, use)]
    # A measured acceptance (the tune wizard's, for this target and its pairing) beats the assumed one.
    measured = wants.measured_acceptance.get(model.key)
    alpha = min(max(wants.draft_acceptance if measured is None else measured, 0.0), 0.95)
    fill = min(wants.decode_fill, n_ctx)
    t_plain = step_time(model, quant, parts, 1, type_kv, eff, fill) + ENGINE_STEP_OVERHEAD
    for where, label in sites:
        used = next((u["total"] for u in use if u["device"] == where.name), 0)
        # On a GPU the draft's token embedding stays in RAM, as the target's does (the launch counts alike).
        need = usage(draft, d_quant, n_ctx, type_kv, draft.n_layer, True, whole_file=where.kind == "cpu")["total"]
        if used + need > where.budget:
            continue
        t_draft = step_time(draft, d_quant, [(where, draft.n_layer, True)], 1, type_kv, eff, fill)
        # Speculation: k cheap draft steps, one target pass over k+1 tokens, E accepted tokens.
        speedups = [(expected_tokens(alpha, k) * t_plain
                     / (step_time(model, quant, parts, k + 1, type_kv, eff, fill) + ENGINE_STEP_OVERHEAD
                        + k * t_draft), k) for k in range(1, 9)]
        speedup, k = max(speedups)
        return {"pays": speedup >= MIN_DRAFT_SPEEDUP, "speedup": speedup, "draft": draft.key, "quant": d_quant,
                "device": where.name, "layout": label, "k": k, "need": need, "acceptance": alpha,
                "measured": measured is not None}
    return None


def _how(spec: dict) -> str:
    return "measured by `localchat tune`" if spec["measured"] else "assumed"


def options_for(model: ModelFacts, quant: str, n_ctx: int, type_kv: str, devices: list[Device],
                catalog: dict[str, ModelFacts], wants) -> list[Option]:
    """Every feasible layout of one model+quant at one context and KV type, with speeds and reasons."""
    eff = {**DEFAULT_EFFICIENCY, **wants.efficiency}
    # Decode is quoted with `fill` tokens cached; prefill over a prompt of that length, whose
    # tokens attend over fill/2 cached tokens on average.
    fill = min(wants.decode_fill, n_ctx)
    found = []
    for layout, parts, shared in _layouts(model, quant, n_ctx, type_kv, devices, wants):
        usage = [dict(u) for u in shared]
        t1 = step_time(model, quant, parts, 1, type_kv, eff, fill) + ENGINE_STEP_OVERHEAD
        prefill = N_UBATCH / step_time(model, quant, parts, N_UBATCH, type_kv, eff, fill // 2)
        gpu_layers = sum(n for d, n, _ in parts if d.kind == "gpu")
        split = [n / model.n_layer for d, n, _ in parts if d.kind == "gpu"] if layout == "layer-split" else []
        why = "" if len(devices) > 1 else " (no usable GPU)"
        text = layout_named(layout).why.format(
            why=why, L=model.n_layer, dev=parts[0][0].name, k=parts[0][1],
            split=":".join(str(n) for _, n, _ in parts))
        option = Option(model.key, quant, n_ctx, type_kv, layout, gpu_layers + (1 if gpu_layers == model.n_layer else 0),
                        max(parts[0][0].index, 0), split, usage, 1 / t1, prefill, 1 / t1,
                        reasons=[f"layout {layout}: {text}"])
        if type_kv != "f16":
            option.reasons.append(f"KV cache {type_kv}: an f16 cache of {n_ctx} tokens would not fit.")
        spec = _draft(model, quant, parts, usage, layout, n_ctx, type_kv, devices, catalog, wants, eff)
        option.draft_speedup = spec["speedup"] if spec else 0.0
        if spec and spec["pays"]:
            option.draft, option.draft_quant, option.draft_device = spec["draft"], spec["quant"], spec["device"]
            option.n_draft, option.layout = spec["k"], spec["layout"]
            option.decode_tps = option.plain_decode_tps * spec["speedup"]
            target = next((u for u in usage if u["device"] == spec["device"]), None)
            if target is None:
                target = {"device": spec["device"], "weights": 0, "kv": 0, "compute": 0, "draft": 0, "total": 0,
                          "budget": next(d.budget for d in devices if d.name == spec["device"]),
                          "free": next(d.free for d in devices if d.name == spec["device"])}
                option.usage = [*usage, target]
            target["draft"] += spec["need"]
            target["total"] += spec["need"]
            option.reasons.append(f"draft {spec['draft']} {spec['quant']} on {spec['device']}: same tokenizer, "
                                  f"predicted {spec['speedup']:.2f}x decode with {spec['k']} drafted tokens at "
                                  f"{spec['acceptance']:.0%} acceptance ({_how(spec)}).")
        elif spec:
            option.reasons.append(f"no draft: {spec['draft']} would give {spec['speedup']:.2f}x at "
                                  f"{spec['acceptance']:.0%} acceptance ({_how(spec)}), under the "
                                  f"{MIN_DRAFT_SPEEDUP}x that pays for its memory.")
        found.append(option)
    return found
