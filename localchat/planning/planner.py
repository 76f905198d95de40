"""`plan(hardware, catalog, wants) -> Plan`: the best model, quant, context and placement, with reasons."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..arguments import Parser
from ..errors import ConfigError, ModelNotFoundError
from ..hardware import DESCRIPTION_HELP, HardwareInfo
from ..models.catalog import ModelFacts, load_catalog as load_facts
from ..units import size_text
from .cost import DECODE_FILL, DEFAULT_EFFICIENCY, Option, devices_of, gpu_indices, options_for
from .gptq_options import gptq_options, not_offered, unavailable
from .placements import placement_of
from .site import Device

# Quality is a model's log2 size in billions, plus a family bonus (newer training, same size),
# minus the quant's loss; one unit ~ doubling the parameters. Penalties follow llama.cpp's
# published perplexity ladder: Q8_0 is near-lossless, Q4_K_M mild, Q3 noticeable, Q2 heavy.
QUANT_PENALTY = {"F32": 0.0, "F16": 0.0, "BF16": 0.0, "Q8_0": -0.02, "Q6_K": -0.05, "Q5_K_M": -0.1,
                 "Q5_K_S": -0.12, "Q5_1": -0.12, "Q5_0": -0.15, "Q4_K_M": -0.25, "Q4_K_S": -0.3,
                 "IQ4_XS": -0.3, "Q4_1": -0.3, "Q4_0": -0.4, "IQ4_NL": -0.35, "Q3_K_L": -0.55,
                 "Q3_K_M": -0.7, "IQ3_M": -0.75, "Q3_K_S": -0.9, "Q2_K": -1.5,
                 # GPTQ with group-128 scales: 4-bit loses about what Q4_1 does, 8-bit about what Q8_0 does.
                 "GPTQ-INT4": -0.3, "GPTQ-INT8": -0.02}
FAMILY_BONUS = {"qwen3": 0.3, "gemma3": 0.2, "qwen2.5": 0.1, "llama3": 0.0, "smollm2": -0.5}
KV_PENALTY = {"f16": 0.0, "q8_0": -0.02}
SHORT_CONTEXT_PENALTY = 0.1   # planning 4k instead of 8k tokens costs about a Q5->Q4 step
DEFAULT_CONTEXTS = (8192, 4096)
GROW_CONTEXTS = (32768, 16384)
SPEED_TIE = 0.05              # quality within this of the best counts as equal; then speed decides


@dataclass(slots=True)
class Wants:
    """What the user asked for; everything optional."""

    n_ctx: int | None = None
    family: str | None = None
    min_decode_tps: float = 8.0
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

    def to_dict(self) -> dict:
        """Plain data for JSON."""
        return dataclasses.asdict(self)

    def gpu_indices(self) -> str:
        """The GPUs the plan uses, as the `devices` setting writes them ("0,1")."""
        return gpu_indices([u.device for u in self.devices])


def quality(model: ModelFacts, quant: str) -> float:
    """Quality score of a model at a quant (see QUANT_PENALTY)."""
    return (math.log2(max(model.params_b, 0.01)) + 10 + FAMILY_BONUS.get(model.family, 0.0)
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


def _candidates(catalog: dict[str, ModelFacts], devices: list[Device], wants: Wants, checkpoints: bool) -> list[Option]:
    """Every model+quant's options at the longest default context that fits; GPTQ checkpoints when `checkpoints`."""
    found = []
    for model in _wanted(catalog, wants):
        contexts = (wants.n_ctx,) if wants.n_ctx else DEFAULT_CONTEXTS
        for quant, file in model.files.items():
            if file.is_checkpoint and not checkpoints:
                continue
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


def _choose(options: list[Option], wants: Wants) -> tuple[Option, bool]:
    # The floor applies without the draft: acceptance varies with the text, so speculation is a bonus.
    fast = [o for o in options if o.plain_decode_tps >= wants.min_decode_tps]
    pool = fast or options
    best_quality = max(o.quality for o in pool)
    tied = [o for o in pool if o.quality >= best_quality - SPEED_TIE]
    # Serving several chats (or long prompts), a PD split beats a draft: decode never waits on a prefill.
    split_first = wants.concurrency > 1 or wants.long_prompts
    return max(tied, key=lambda o: (split_first and o.layout == "pd-split", o.decode_tps, o.quality)), bool(fast)


def _grow_context(chosen: Option, catalog: dict[str, ModelFacts], devices: list[Device], wants: Wants) -> Option:
    model = catalog[chosen.model]
    for n_ctx in GROW_CONTEXTS:
        if n_ctx <= chosen.n_ctx or n_ctx > model.n_ctx_train:
            continue
        for option in options_at(model, chosen.quant, n_ctx, chosen.type_kv, devices, catalog, wants):
            if option.layout == chosen.layout and option.draft == chosen.draft and \
                    option.plain_decode_tps >= min(wants.min_decode_tps, chosen.plain_decode_tps * 0.95):
                option.quality = chosen.quality
                option.reasons.append(f"n_ctx {n_ctx}: memory is left over, so the context grows from "
                                      f"{chosen.n_ctx} tokens (the model was trained for {model.n_ctx_train}).")
                return option
    return chosen


def _why_not(option: Option, chosen: Option, wants: Wants) -> str:
    if option.plain_decode_tps < wants.min_decode_tps <= chosen.plain_decode_tps:
        return f"too slow: {option.plain_decode_tps:.1f} tok/s predicted, under the {wants.min_decode_tps:g} tok/s floor"
    if option.quality < chosen.quality - SPEED_TIE:
        return f"lower quality (score {option.quality:.2f} vs {chosen.quality:.2f})"
    return f"slower ({option.decode_tps:.1f} vs {chosen.decode_tps:.1f} tok/s) at about the same quality"


def plan(hardware: HardwareInfo, catalog: dict[str, ModelFacts], wants: Wants | None = None) -> Plan:
    """Pick model, quant, context, KV type, placement and draft for this machine; every choice says why."""
    wants = wants or Wants()
    devices, warnings = devices_of(hardware, {**DEFAULT_EFFICIENCY, **wants.efficiency})
    no_gptq = unavailable(devices, wants.gptq_extra)
    options = _candidates(catalog, devices, wants, checkpoints=no_gptq is None)
    if not options:
        what = f"the '{wants.family}' models" if wants.family else "any catalog model"
        raise ModelNotFoundError(f"{what} cannot fit this machine's memory"
                                 + (f" with a {wants.n_ctx}-token context" if wants.n_ctx else "")
                                 + "; free some memory, ask for a shorter context, or pick a smaller model.")
    chosen, fast_enough = _choose(options, wants)
    if not wants.n_ctx:
        chosen = _grow_context(chosen, catalog, devices, wants)
    model = catalog[chosen.model]
    reasons = [f"{model.name} {chosen.quant}: the best quality (score {chosen.quality:.2f}) that fits this machine"
               + (f" and decodes at least {wants.min_decode_tps:g} tok/s." if fast_enough else
                  f"; nothing that fits reaches {wants.min_decode_tps:g} tok/s, so this is the best of the rest.")]
    reasons += chosen.reasons
    reasons += not_offered(_wanted(catalog, wants), no_gptq)
    if not fast_enough:
        warnings.append(f"predicted decode speed {chosen.plain_decode_tps:.1f} tok/s is below {wants.min_decode_tps:g}.")
    seen, alternatives = {(chosen.model, chosen.quant)}, []
    ranked = sorted(options, key=lambda o: (o.plain_decode_tps >= wants.min_decode_tps, o.quality, o.decode_tps))
    for option in reversed(ranked):
        if (option.model, option.quant) in seen:
            continue
        seen.add((option.model, option.quant))
        alternatives.append(Alternative(option.model, option.quant, option.layout, option.n_ctx,
                                        round(option.decode_tps, 1), round(option.quality, 2),
                                        _why_not(option, chosen, wants)))
        if len(alternatives) == 3:
            break
    file = model.files[chosen.quant]
    return Plan(
        model=model.key, name=model.name, quant=chosen.quant, file=file.file, size=file.size,
        layout=chosen.layout, n_ctx=chosen.n_ctx, type_k=chosen.type_kv, type_v=chosen.type_kv,
        n_gpu_layers=chosen.n_gpu_layers, main_gpu=chosen.main_gpu, tensor_split=chosen.tensor_split,
        draft=chosen.draft, draft_quant=chosen.draft_quant, draft_device=chosen.draft_device, n_draft=chosen.n_draft,
        devices=[DeviceUse(**u) for u in chosen.usage], predicted_decode_tps=round(chosen.decode_tps, 1),
        predicted_prefill_tps=round(chosen.prefill_tps, 1), decode_tps_without_draft=round(chosen.plain_decode_tps, 1),
        quality=round(chosen.quality, 3), reasons=reasons, alternatives=alternatives, warnings=warnings,
        format=file.format)


def format_plan(result: Plan) -> str:
    """A readable plan."""
    what = "GPTQ checkpoint folder " if result.format == "gptq" else ""
    lines = [f"model      {result.name} {result.quant}  ({what}{result.file}, {size_text(result.size)})",
             f"layout     {result.layout} (--placement {placement_of(result.layout).name})  "
             f"n_gpu_layers={result.n_gpu_layers}  n_ctx={result.n_ctx}  type_k/type_v={result.type_k}",
             f"draft      {result.draft + ' ' + (result.draft_quant or '') + ' on ' + (result.draft_device or '') if result.draft else 'none'}",
             f"speed      decode {result.predicted_decode_tps} tok/s, prefill {result.predicted_prefill_tps} tok/s (predicted)"]
    lines += [f"memory     {u.device}: {size_text(u.total)} of {size_text(u.free)} free (weights "
              f"{size_text(u.weights)}, KV {size_text(u.kv)}, compute {size_text(u.compute)}"
              + (f", draft {size_text(u.draft)})" if u.draft else ")") for u in result.devices]
    lines += ["why"] + [f"  - {r}" for r in result.reasons]
    lines += ["alternatives"] + [f"  - {a.model} {a.quant} ({a.layout}, {a.predicted_decode_tps} tok/s): {a.why_not}"
                                 for a in result.alternatives]
    lines += [f"warning    {w}" for w in result.warnings]
    return "\n".join(lines)


@dataclass(slots=True)
class Measured:
    """What `localchat tune` measured on this machine, for the planner: speed corrections and the
    draft acceptance by target key, and a note saying where they come from."""

    efficiency: dict[str, float]
    acceptance: dict[str, float]
    note: str


def main(argv: list[str] | None = None, measured: Callable[[HardwareInfo], Measured | None] | None = None) -> int:
    """`localchat plan [--json] [--hardware FILE.json] [--context N] [--model FAMILY]`; `measured` gives
    this machine's tuned corrections when it has some (the command passes the tuned profile's)."""
    parser = Parser(prog="localchat plan", description="Plan the best model for a machine.",
                    epilog=DESCRIPTION_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print the plan as JSON")
    parser.add_argument("--hardware", type=Path,
                        help="plan for the machine this JSON file describes (format below; this machine's: "
                             "`localchat probe --json > FILE`)")
    parser.add_argument("--context", type=int, help="context length in tokens (default: the longest that fits)")
    parser.add_argument("--model", help="limit to a model family (qwen3, qwen2.5, llama3, gemma3, smollm2) or key")
    parser.add_argument("--catalog", type=Path, help="catalog file (default: the built-in models.yaml)")
    parser.add_argument("--min-speed", type=float, default=8.0, help="decode tokens/s floor (default 8)")
    parser.add_argument("--concurrency", type=int, default=1, help="chats served at once (PD split needs > 1)")
    parser.add_argument("--offline", action="store_true",
                        help="plan with the catalog's file sizes; do not ask the model hub for current ones")
    args = parser.parse_args(argv)
    wants = Wants(n_ctx=args.context, family=args.model, min_decode_tps=args.min_speed, concurrency=args.concurrency)
    notes: list[str] = []
    if args.hardware:
        try:
            hardware = HardwareInfo.from_description(args.hardware.read_text(encoding="utf-8"))
        except OSError as exc:
            raise ConfigError(f"cannot read {args.hardware} ({exc.strerror}); write one with `localchat probe --json`.") from None
        except ConfigError as exc:
            raise ConfigError(f"{args.hardware}: {exc}") from None
    else:
        from ..hardware.probe import probe

        hardware = probe()
        tuned = measured(hardware) if measured else None
        if tuned is not None:
            # This machine was measured: its corrections and draft acceptance beat the defaults.
            wants.efficiency, wants.measured_acceptance = dict(tuned.efficiency), dict(tuned.acceptance)
            notes.append(tuned.note)
    from ..models.sizes import refresh_sizes

    sized = refresh_sizes(load_facts(args.catalog), network=not args.offline)
    result = plan(hardware, sized.facts, wants)
    result.reasons += sized.reasons + notes
    result.warnings += sized.warnings
    print(json.dumps(result.to_dict(), indent=2) if args.json else format_plan(result))
    return 0
