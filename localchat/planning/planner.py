"""`plan(hardware, catalog, wants) -> Plan`: the best model, quant, context and placement, with reasons."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from ..errors import ModelNotFoundError
from ..gptq import NEEDS_EXTRA
from ..hardware import HardwareInfo
from ..models.catalog import ModelFacts
from .cost import DECODE_FILL, DEFAULT_EFFICIENCY, Option, devices_of, gpu_indices, options_for
from .gptq_options import (GptqEntry, gptq_entries, gptq_options, not_offered, nvidia_gpus,
                           unavailable)
from .policy import SPEED_FLOOR, SPEED_TARGET, Speeds, Standing, Verdict, choose, trade, why_not
from .site import Device

# Quality is a model's log2 size in billions, plus a family bonus (newer training, same size),
# minus the quant's loss; one unit ~ doubling the parameters. A mixture of experts counts all its
# parameters (gpt-oss-20b scores between Qwen3-14B and -32B on the reasoning benchmarks of its model card
# and of independent indexes, gpt-oss-120b above every dense model here); Gemma 3n's per-layer embedding
# tables are lookups and do not count (Google calls E4B a 4B model). Penalties follow llama.cpp's
# published perplexity ladder: Q8_0 is near-lossless, Q4_K_M mild, Q3 noticeable, Q2 heavy.
QUANT_PENALTY = {"F32": 0.0, "F16": 0.0, "BF16": 0.0, "Q8_0": -0.02, "Q6_K": -0.05, "Q5_K_M": -0.1,
                 "Q5_K_S": -0.12, "Q5_1": -0.12, "Q5_0": -0.15, "Q4_K_M": -0.25, "Q4_K_S": -0.3,
                 "IQ4_XS": -0.3, "Q4_1": -0.3, "Q4_0": -0.4, "IQ4_NL": -0.35, "Q3_K_L": -0.55,
                 "Q3_K_M": -0.7, "IQ3_M": -0.75, "Q3_K_S": -0.9, "Q2_K": -1.5,
                 # GPTQ with group-128 scales: 4-bit loses about what Q4_1 does, 8-bit about what Q8_0 does.
                 "GPTQ-INT4": -0.3, "GPTQ-INT8": -0.02,
                 # gpt-oss was post-trained with its experts in MXFP4: the published file is the model as released.
                 "MXFP4": 0.0, "MXFP4_MOE": 0.0}
FAMILY_BONUS = {"qwen3": 0.3, "gemma3": 0.2, "gemma3n": 0.2, "qwen2.5": 0.1, "llama3": 0.0, "smollm2": -0.5}
KV_PENALTY = {"f16": 0.0, "q8_0": -0.02}
SHORT_CONTEXT_PENALTY = 0.1   # planning 4k instead of 8k tokens costs about a Q5->Q4 step
DEFAULT_CONTEXTS = (8192, 4096)
GROW_CONTEXTS = (32768, 16384)


@dataclass(slots=True)
class Wants:
    """What the user asked for; everything optional."""

    n_ctx: int | None = None
    family: str | None = None
    min_decode_tps: float = SPEED_FLOOR     # the floor (policy.py): under it only when nothing reaches it
    speed_target: float = SPEED_TARGET      # above it speed no longer counts (policy.py; the speed_target setting)
    concurrency: int = 1
    long_prompts: bool = False
    draft_acceptance: float = 0.7  # assumed per-token acceptance of a same-tokenizer draft
    efficiency: dict[str, float] = field(default_factory=dict)  # measured corrections (tune wizard)
    # Measured per-token draft acceptance by target catalog key (tune wizard); beats draft_acceptance.
    measured_acceptance: dict[str, float] = field(default_factory=dict)
    decode_fill: int = DECODE_FILL  # cached tokens at which decode speed is predicted
    gptq_extra: bool | None = None  # whether the gptq extra (torch) is installed; None: look when planning


@dataclass(slots=True)
class DeviceUse:
    """Predicted memory on one device, bytes."""

    device: str
    weights: int
    kv: int
    compute: int
    draft: int
    total: int
    budget: int
    free: int


@dataclass(slots=True)
class Alternative:
    """A runner-up and why it lost."""

    model: str
    quant: str
    layout: str
    n_ctx: int
    predicted_decode_tps: float
    quality: float
    why_not: str


@dataclass(slots=True)
class Plan:
    """The decision: what to load, where, and what to expect from it."""

    model: str
    name: str
    quant: str
    file: str
    size: int
    layout: str                   # the planner's layout (placements.py): where the layers go
    n_ctx: int
    type_k: str
    type_v: str
    n_gpu_layers: int
    main_gpu: int
    tensor_split: list[float]
    draft: str | None
    draft_quant: str | None
    draft_device: str | None
    n_draft: int
    devices: list[DeviceUse]
    predicted_decode_tps: float
    predicted_prefill_tps: float
    decode_tps_without_draft: float
    quality: float
    reasons: list[str]
    alternatives: list[Alternative]
    warnings: list[str]
    format: str = "gguf"          # the weights' format: gguf (llama.cpp) or gptq (a checkpoint on torch)
    speed_target: float = SPEED_TARGET
    faster: Alternative | None = None     # the best runner-up that decodes faster, and what it trades
    gptq: list[GptqEntry] = field(default_factory=list)  # each GPTQ checkpoint priced here, and why (not) chosen

    def to_dict(self) -> dict:
        """Plain data for JSON."""
        return dataclasses.asdict(self)

    def gpu_indices(self) -> str:
        """The GPUs the plan uses, as the `devices` setting writes them ("0,1")."""
        return gpu_indices([u.device for u in self.devices])


def quality(model: ModelFacts, quant: str) -> float:
    """Quality score of a model at a quant (see QUANT_PENALTY)."""
    return (math.log2(max(model.params_b - model.table_params_b(), 0.01)) + 10 + FAMILY_BONUS.get(model.family, 0.0)
            + QUANT_PENALTY.get(quant.upper(), -0.5))


def _wanted(catalog: dict[str, ModelFacts], wants: Wants) -> list[ModelFacts]:
    return [m for m in catalog.values()
            if not wants.family or wants.family.lower() in (m.family.lower(), m.key.lower())]


def options_at(model: ModelFacts, quant: str, n_ctx: int, type_kv: str, devices: list[Device],
                catalog: dict[str, ModelFacts], wants: Wants) -> list[Option]:
    """The options of one model+quant: llama.cpp's layouts for a GGUF file, the torch worker's for a checkpoint."""
    if model.files[quant].is_checkpoint:
        if type_kv != "f16":  # the torch worker keeps its own cache: no llama.cpp KV types to choose
            return []
        eff = {**DEFAULT_EFFICIENCY, **wants.efficiency}
        return gptq_options(model, quant, n_ctx, devices, eff, min(wants.decode_fill, n_ctx))
    return options_for(model, quant, n_ctx, type_kv, devices, catalog, wants)


def _candidates(catalog: dict[str, ModelFacts], devices: list[Device], wants: Wants) -> list[Option]:
    """Every model+quant's options at the longest default context that fits (GPTQ checkpoints only on an
    NVIDIA GPU, where gptq_options places them)."""
    found = []
    for model in _wanted(catalog, wants):
        contexts = (wants.n_ctx,) if wants.n_ctx else DEFAULT_CONTEXTS
        for quant in model.files:
            for n_ctx in contexts:
                if n_ctx > model.n_ctx_train:
                    continue
                options = options_at(model, quant, n_ctx, "f16", devices, catalog, wants)
                # A q8_0 cache only where it buys a placement the f16 cache cannot have.
                options += [o for o in options_at(model, quant, n_ctx, "q8_0", devices, catalog, wants)
                            if o.layout not in {f.layout for f in options}]
                for option in options:
                    option.quality = (quality(model, quant) + KV_PENALTY[option.type_kv]
                                      - (SHORT_CONTEXT_PENALTY if n_ctx < DEFAULT_CONTEXTS[0] and not wants.n_ctx else 0))
                found += options
                if options:
                    break  # the longest default context that fits is the one to plan
    return found


def _speeds(wants: Wants) -> Speeds:
    return Speeds(target=wants.speed_target, floor=wants.min_decode_tps)


ANSWER_TOKENS = 300  # an everyday answer's length, beside which a thinking model's thinking is counted


def answer_share(model: ModelFacts) -> float:
    """The part of the tokens a model writes that is its answer: a model that always thinks first writes
    its thinking too, so its answer comes that much slower than its decode speed."""
    return ANSWER_TOKENS / (ANSWER_TOKENS + model.thinking_tokens)


def _standing(option: Option, catalog: dict[str, ModelFacts]) -> Standing:
    model = catalog[option.model]
    share = answer_share(model)
    thinks = f" (answer speed: it thinks ~{model.thinking_tokens} tokens first)" if model.thinking_tokens else ""
    return Standing(f"{model.name} {option.quant}{thinks}", option.quality, option.plain_decode_tps * share,
                    option.decode_tps * share, option.layout)


def _choose(options: list[Option], catalog: dict[str, ModelFacts], wants: Wants) -> Verdict:
    # Serving several chats (or long prompts), a PD split beats a draft: decode never waits on a prefill.
    split_first = wants.concurrency > 1 or wants.long_prompts
    return choose([_standing(o, catalog) for o in options], _speeds(wants), split_first)


def _grow_context(chosen: Option, catalog: dict[str, ModelFacts], devices: list[Device], wants: Wants) -> Option:
    model = catalog[chosen.model]
    for n_ctx in GROW_CONTEXTS:
        if n_ctx <= chosen.n_ctx or n_ctx > model.n_ctx_train:
            continue
        for option in options_at(model, chosen.quant, n_ctx, chosen.type_kv, devices, catalog, wants):
            if option.layout == chosen.layout and option.draft == chosen.draft and \
                    option.plain_decode_tps >= chosen.plain_decode_tps * 0.95:  # more context, not less speed
                option.quality = chosen.quality
                option.reasons.append(f"n_ctx {n_ctx}: memory is left over, so the context grows from "
                                      f"{chosen.n_ctx} tokens (the model was trained for {model.n_ctx_train}).")
                return option
    return chosen


def _alternative(option: Option, why: str) -> Alternative:
    return Alternative(option.model, option.quant, option.layout, option.n_ctx, round(option.decode_tps, 1),
                       round(option.quality, 2), why)


def plan(hardware: HardwareInfo, catalog: dict[str, ModelFacts], wants: Wants | None = None) -> Plan:
    """Pick model, quant, context, KV type, placement and draft for this machine; every choice says why."""
    wants = wants or Wants()
    devices, warnings = devices_of(hardware, {**DEFAULT_EFFICIENCY, **wants.efficiency})
    no_gptq = unavailable(devices, wants.gptq_extra)
    priced = _candidates(catalog, devices, wants)
    # A checkpoint is priced on an NVIDIA GPU even without the extra, so the plan can say what it would give.
    options = [o for o in priced if no_gptq is None or not catalog[o.model].files[o.quant].is_checkpoint]
    if not options:
        what = f"the '{wants.family}' models" if wants.family else "any catalog model"
        raise ModelNotFoundError(f"{what} cannot fit this machine's memory"
                                 + (f" with a {wants.n_ctx}-token context" if wants.n_ctx else "")
                                 + "; free some memory, ask for a shorter context, or pick a smaller model.")
    verdict = _choose(options, catalog, wants)
    chosen, speeds = options[verdict.chosen], _speeds(wants)
    standings = [_standing(o, catalog) for o in options]
    pick, whole = standings[verdict.chosen], any(s.layout not in ("cpu", "partial") for s in standings)
    if not wants.n_ctx:
        chosen = _grow_context(chosen, catalog, devices, wants)
    model = catalog[chosen.model]
    reasons = verdict.reasons + chosen.reasons
    reasons += not_offered(_wanted(catalog, wants), no_gptq)
    if not verdict.fast_enough:
        warnings.append(f"predicted decode speed {chosen.plain_decode_tps:.1f} tok/s is below {wants.min_decode_tps:g}.")
    seen, alternatives = {(chosen.model, chosen.quant)}, []
    # Ranked as the policy ranks them: those that reach the floor first, then by worth.
    ranked = sorted(range(len(options)), key=lambda i: (standings[i].speed < speeds.floor, -verdict.worth[i],
                                                        -options[i].decode_tps))
    for i in ranked:
        option = options[i]
        if (option.model, option.quant) in seen:
            continue
        seen.add((option.model, option.quant))
        alternatives.append(_alternative(option, why_not(standings[i], pick, speeds, whole)))
        if len(alternatives) == 3:
            break
    faster = None
    if verdict.faster is not None:
        quick = options[verdict.faster]
        faster = _alternative(quick, trade(standings[verdict.faster], pick))
    gptq = []
    if nvidia_gpus(devices):  # elsewhere the reasons say why no checkpoint is offered
        judged = [(o, "chosen" if o is options[verdict.chosen] else
                   f"not chosen: {NEEDS_EXTRA}" if no_gptq else f"not chosen: {why_not(_standing(o, catalog), pick, speeds, whole)}")
                  for o in priced if catalog[o.model].files[o.quant].is_checkpoint]
        gptq = gptq_entries(_wanted(catalog, wants), judged, {**DEFAULT_EFFICIENCY, **wants.efficiency})
    file = model.files[chosen.quant]
    return Plan(
        model=model.key, name=model.name, quant=chosen.quant, file=file.file, size=file.size,
        layout=chosen.layout, n_ctx=chosen.n_ctx, type_k=chosen.type_kv, type_v=chosen.type_kv,
        n_gpu_layers=chosen.n_gpu_layers, main_gpu=chosen.main_gpu, tensor_split=chosen.tensor_split,
        draft=chosen.draft, draft_quant=chosen.draft_quant, draft_device=chosen.draft_device, n_draft=chosen.n_draft,
        devices=[DeviceUse(**u) for u in chosen.usage], predicted_decode_tps=round(chosen.decode_tps, 1),
        predicted_prefill_tps=round(chosen.prefill_tps, 1), decode_tps_without_draft=round(chosen.plain_decode_tps, 1),
        quality=round(chosen.quality, 3), reasons=reasons, alternatives=alternatives, warnings=warnings,
        format=file.format, speed_target=wants.speed_target, faster=faster, gptq=gptq)
