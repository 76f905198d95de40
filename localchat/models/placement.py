"""The planner's cost model: device budgets, where layers go, and roofline speed per placement."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..hardware import HardwareInfo
from .catalog_facts import ModelFacts

MARGIN = 0.08                  # of each device's free memory, kept free: estimates are estimates
GPU_RESERVE = 400 << 20        # CUDA context, cuBLAS workspace, driver allocations per GPU
HOST_RESERVE = 1 << 30         # the app, the UI and the OS's breathing room
N_UBATCH = 512
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
class Device:
    """A place for layers: its budget in bytes, bandwidth in bytes/s and matmul FLOP/s."""

    name: str
    kind: str                  # cpu | gpu
    index: int
    free: int
    budget: int
    bandwidth: float
    flops: float
    unified: bool = False
    stream: float = 0.0        # CPU: what its cores stream while they also compute (see CORE_BANDWIDTH)


@dataclass(slots=True)
class Option:
    """One feasible way to run one model+quant, with its predicted memory and speed."""

    model: str
    quant: str
    n_ctx: int
    type_kv: str
    placement: str
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
        warnings.append(f"host bandwidth not measured; assuming {bandwidth / 1e9:.0f} GB/s.")
    cpu = Device("cpu", "cpu", -1, hw.ram_available, max(0, int(hw.ram_available * (1 - MARGIN)) - HOST_RESERVE),
                 bandwidth * eff["bandwidth"], hw.physical_cores * ghz * 1e9 * per_cycle, hw.unified_memory,
                 stream=hw.physical_cores * CORE_BANDWIDTH * eff["bandwidth"])
    devices = [cpu]
    for gpu in hw.gpus:
        if gpu.memory_total <= 0 or not gpu.bandwidth:
            warnings.append(f"{gpu.name}: memory or bandwidth unknown; not used.")
            continue
        free = min(gpu.memory_free, hw.ram_available) if gpu.unified else gpu.memory_free
        reserve = 0 if gpu.unified else GPU_RESERVE
        flops = (gpu.fp16_tflops or (gpu.fp32_tflops or 0) * 2 or gpu.bandwidth / 1e12 * 50) * 1e12
        devices.append(Device(f"metal:{gpu.index}" if gpu.unified else f"cuda:{gpu.index}", "gpu", gpu.index, free,
                              max(0, int(free * (1 - MARGIN)) - reserve), gpu.bandwidth * eff["bandwidth"],
                              flops, gpu.unified))
    return devices, warnings


def _step_time(model: ModelFacts, quant: str, parts: list[tuple[Device, int, bool]], n_tokens: int,
               type_kv: str, eff: dict[str, float], fill: int = DECODE_FILL) -> float:
    """Seconds for one llama_decode of n_tokens, `fill` tokens already cached, over a pipeline of
    (device, layers, holds the head)."""
    def rate(key: str) -> float:
        return eff.get(key, DEFAULT_EFFICIENCY[key])

    total = 0.0
    for device, n_layers, head in parts:
        weights = n_layers * model.layer_bytes(quant) + (model.output_bytes(quant) if head else 0)
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


def _usage(model: ModelFacts, quant: str, n_ctx: int, type_kv: str, device: Device, n_layers: int,
           head: bool, whole_file: bool = False) -> dict:
    weights = model.files[quant].size if whole_file else \
        n_layers * model.layer_bytes(quant) + (model.output_bytes(quant) if head else 0)
    kv = model.kv_bytes(n_ctx, type_kv, n_layers)
    compute = model.compute_bytes(N_UBATCH) if n_layers or whole_file else 0
    return {"device": device.name, "weights": weights, "kv": kv, "compute": compute, "draft": 0,
            "total": weights + kv + compute, "budget": device.budget, "free": device.free}


def _fits(usages: list[dict]) -> bool:
    return all(u["total"] <= u["budget"] for u in usages)


def _layouts(model: ModelFacts, quant: str, n_ctx: int, type_kv: str, devices: list[Device], wants) -> list[tuple]:
    """(placement, parts, usage) for every layout that fits; parts list (device, layers, head)."""
    cpu, gpus, L = devices[0], devices[1:], model.n_layer
    found = []
    host = _usage(model, quant, n_ctx, type_kv, cpu, L, True, whole_file=True)
    if _fits([host]) and (not cpu.unified or not gpus):  # with unified memory, Metal always wins
        found.append(("cpu", [(cpu, L, True)], [host]))
    embd_on_host = {**_usage(model, quant, n_ctx, type_kv, cpu, 0, False), "weights": model.embedding_bytes(quant)}
    embd_on_host["total"] = embd_on_host["weights"]
    fitting = [g for g in gpus if _fits([_usage(model, quant, n_ctx, type_kv, g, L, True)])]
    for gpu in sorted(fitting, key=lambda g: -g.bandwidth)[:1]:
        found.append(("gpu", [(gpu, L, True)], [_usage(model, quant, n_ctx, type_kv, gpu, L, True), embd_on_host]))
    if len(fitting) >= 2 and (wants.concurrency > 1 or wants.long_prompts):
        pair = sorted(fitting, key=lambda g: -g.bandwidth)[:2]
        found.append(("pd-split", [(pair[1], L, True)],
                      [_usage(model, quant, n_ctx, type_kv, g, L, True) for g in pair] + [embd_on_host]))
    per_layer = model.layer_bytes(quant) + model.kv_bytes(n_ctx, type_kv, 1)
    if not fitting and len(gpus) >= 2:
        counts, left = [], L
        for gpu in gpus:  # fill GPUs in order; the last one also holds the output head
            room = gpu.budget - model.compute_bytes(N_UBATCH) - (model.output_bytes(quant) if gpu is gpus[-1] else 0)
            counts.append(min(left, max(0, room // per_layer)))
            left -= counts[-1]
        if left == 0 and sum(1 for c in counts if c) >= 2:
            parts = [(g, c, g is gpus[-1]) for g, c in zip(gpus, counts) if c]
            found.append(("layer-split", parts, [_usage(model, quant, n_ctx, type_kv, g, c, h) for g, c, h in parts]
                          + [embd_on_host]))
    if not fitting and gpus and not cpu.unified:
        gpu = max(gpus, key=lambda g: g.budget)
        k = min(L - 1, max(0, (gpu.budget - model.compute_bytes(N_UBATCH)) // per_layer))
        on_host = {**_usage(model, quant, n_ctx, type_kv, cpu, L - k, True)}
        on_host["weights"] += model.embedding_bytes(quant)
        on_host["total"] += model.embedding_bytes(quant)
        if k > 0 and _fits([on_host]):
            found.append(("partial", [(gpu, k, False), (cpu, L - k, True)],
                          [_usage(model, quant, n_ctx, type_kv, gpu, k, False), on_host]))
    return found


def _draft(model: ModelFacts, quant: str, parts: list, usage: list[dict], placement: str, n_ctx: int,
           type_kv: str, devices: list[Device], catalog: dict[str, ModelFacts], wants, eff: dict) -> dict | None:
    """The best draft setup for a layout (pays or not), or None when no draft can be placed."""
    draft = catalog.get(model.draft or "")
    if draft is None or draft.key == model.key or placement == "pd-split":
        return None
    d_quant = "Q8_0" if "Q8_0" in draft.files else draft.default_quant
    need = draft.files[d_quant].size + draft.kv_bytes(n_ctx, type_kv) + draft.compute_bytes(N_UBATCH)
    main = parts[-1][0]
    used_names = {u["device"] for u in usage}
    spare = [d for d in devices[1:] if d.name not in used_names] if placement == "gpu" else []
    # A measured acceptance (the tune wizard's, for this target and its pairing) beats the assumed one.
    measured = wants.measured_acceptance.get(model.key)
    alpha = min(max(wants.draft_acceptance if measured is None else measured, 0.0), 0.95)
    fill = min(wants.decode_fill, n_ctx)
    t_plain = _step_time(model, quant, parts, 1, type_kv, eff, fill) + ENGINE_STEP_OVERHEAD
    for where, label in [(main, placement), *[(d, "draft-on-second-gpu") for d in spare]]:
        used = next((u["total"] for u in usage if u["device"] == where.name), 0)
        if used + need > where.budget:
            continue
        t_draft = _step_time(draft, d_quant, [(where, draft.n_layer, True)], 1, type_kv, eff, fill)
        # Speculation: k cheap draft steps, one target pass over k+1 tokens, E accepted tokens.
        speedups = [((1 - alpha ** (k + 1)) / (1 - alpha) * t_plain
                     / (_step_time(model, quant, parts, k + 1, type_kv, eff, fill) + ENGINE_STEP_OVERHEAD
                        + k * t_draft), k) for k in range(1, 9)]
        speedup, k = max(speedups)
        return {"pays": speedup >= MIN_DRAFT_SPEEDUP, "speedup": speedup, "draft": draft.key, "quant": d_quant,
                "device": where.name, "placement": label, "k": k, "need": need, "acceptance": alpha,
                "measured": measured is not None}
    return None


def _how(spec: dict) -> str:
    return "measured by `localchat tune`" if spec["measured"] else "assumed"


_PLACEMENT_WHY = {
    "cpu": "runs on the CPU from RAM{why}.",
    "gpu": "all {L} layers and the KV cache fit on {dev}.",
    "pd-split": "each GPU holds the whole model and its KV cache: prompts prefill on one, tokens decode on the "
                "other, so long prompts do not stall streaming chats.",
    "layer-split": "too big for one GPU: layers split {split} over the GPUs.",
    "partial": "{dev} holds {k} of {L} layers; the rest run on the CPU from RAM.",
}


def options_for(model: ModelFacts, quant: str, n_ctx: int, type_kv: str, devices: list[Device],
                catalog: dict[str, ModelFacts], wants) -> list[Option]:
    """Every feasible placement of one model+quant at one context and KV type, with speeds and reasons."""
    eff = {**DEFAULT_EFFICIENCY, **wants.efficiency}
    # Decode is quoted with `fill` tokens cached; prefill over a prompt of that length, whose
    # tokens attend over fill/2 cached tokens on average.
    fill = min(wants.decode_fill, n_ctx)
    found = []
    for placement, parts, shared in _layouts(model, quant, n_ctx, type_kv, devices, wants):
        usage = [dict(u) for u in shared]
        t1 = _step_time(model, quant, parts, 1, type_kv, eff, fill) + ENGINE_STEP_OVERHEAD
        prefill = N_UBATCH / _step_time(model, quant, parts, N_UBATCH, type_kv, eff, fill // 2)
        gpu_layers = sum(n for d, n, _ in parts if d.kind == "gpu")
        split = [n / model.n_layer for d, n, _ in parts if d.kind == "gpu"] if placement == "layer-split" else []
        why = "" if len(devices) > 1 else " (no usable GPU)"
        text = _PLACEMENT_WHY[placement].format(
            why=why, L=model.n_layer, dev=parts[0][0].name, k=parts[0][1],
            split=":".join(str(n) for _, n, _ in parts))
        option = Option(model.key, quant, n_ctx, type_kv, placement, gpu_layers + (1 if gpu_layers == model.n_layer else 0),
                        max(parts[0][0].index, 0), split, usage, 1 / t1, prefill, 1 / t1,
                        reasons=[f"placement {placement}: {text}"])
        if type_kv != "f16":
            option.reasons.append(f"KV cache {type_kv}: an f16 cache of {n_ctx} tokens would not fit.")
        spec = _draft(model, quant, parts, usage, placement, n_ctx, type_kv, devices, catalog, wants, eff)
        option.draft_speedup = spec["speedup"] if spec else 0.0
        if spec and spec["pays"]:
            option.draft, option.draft_quant, option.draft_device = spec["draft"], spec["quant"], spec["device"]
            option.n_draft, option.placement = spec["k"], spec["placement"]
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
