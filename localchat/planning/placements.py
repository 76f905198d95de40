"""The one vocabulary of placements. Each placement is declared once, at the bottom: its name (the
setting, the flag value), its help line, the planner's layouts that run as it (where the layers go
and why: "cpu", "gpu", "partial"... the planner's and the tuned profile's word) and how it arranges
the engine's workers, or why it cannot. A placement says how workers run a model; a layout, where one
model's layers go: `single` runs as the layouts cpu, gpu and partial.

Settings, flags, the profile, the wizard, the planner and the launch all read PLACEMENTS, so adding
a placement is a change in this module plus its test. Pure: no llama.cpp, no probing.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable

from ..errors import PlacementError
from ..hardware import GPUInfo, HardwareInfo
from ..runtime.worker_types import WorkerConfig, default_threads
from ..units import size_text
from .fit import N_UBATCH, ModelSize, fits, gpu_budget
from .site import Device, Site

ALL_LAYERS = -1


@dataclass(slots=True)
class Arrangement:
    """The engine's workers for one placement, and a sentence saying what runs where."""

    placement: str
    worker: WorkerConfig
    prefill: WorkerConfig | None = None
    draft: WorkerConfig | None = None
    description: str = ""
    # Step cost by width in ms, measured by `localchat tune` for this model on this machine: seeds
    # the speculator instead of measuring again (None: not tuned, or the profile does not hold).
    step_costs: dict[int, float] | None = None

    def with_context(self, n_ctx: int) -> "Arrangement":
        """The same workers, each holding at least `n_ctx` tokens of context."""
        def roomy(worker: WorkerConfig | None) -> WorkerConfig | None:
            return dataclasses.replace(worker, n_ctx=max(worker.n_ctx, n_ctx)) if worker else None

        return dataclasses.replace(self, worker=roomy(self.worker), prefill=roomy(self.prefill),
                                   draft=roomy(self.draft))


@dataclass(slots=True)
class Ask:
    """What a placement is asked to arrange: the base worker, the GPUs to use and the sizes to fit."""

    placement: str
    base: WorkerConfig
    gpus: list[GPUInfo]
    named: bool                   # the GPUs were named (--devices), not all found
    size: ModelSize | None
    draft_size: ModelSize | None
    gpu_gap: str = ""             # why no GPU is usable, when the GPUs were checked against llama.cpp's

    @property
    def need(self) -> int:
        return self.size.bytes_for(self.base.n_ctx) if self.size else 0


Parts = list[tuple["Device", int, bool]]   # (device, layers, holds the output head)


@dataclass(frozen=True, slots=True)
class Layout:
    """One way the planner puts a model on devices. `place` gives (parts, usage) where it fits. A draft
    site has no `place`: `draft_on(beside, devices, usage)` names devices for the draft beside layout `beside`."""

    name: str
    why: str                      # the plan's reason; may use {L} {dev} {k} {split} {why}
    place: Callable[[Site], tuple[Parts, list[dict]] | None] | None = None
    draft_on: Callable[[str, list[Device], list[dict]], list[Device]] | None = None


@dataclass(frozen=True, slots=True)
class Placement:
    """A placement: the name users and the profile give it, and everything that follows from it."""

    name: str
    help: str                     # one line of `--help` (under 85 characters)
    arrange: Callable[[Ask], Arrangement] | None   # None: auto, resolved before arranging
    layouts: tuple[Layout, ...] = ()
    drafts: bool = True           # the planner may pair a draft model on the target's own device
    names_gpus: bool = False      # its workers sit on chosen GPUs: the profile keeps their indices


# --- the workers -----------------------------------------------------------------------------------

def _need_two(ask: Ask, what: str) -> None:
    if len(ask.gpus) < 2:
        have = {0: "no GPU", 1: "one GPU"}[len(ask.gpus)]
        raise PlacementError(f"--placement {ask.placement} needs two GPUs ({what}); {have} is available. "
                             "Use --placement single" + (" or pd-split (it runs on two CPU workers)."
                                                         if not ask.gpus else "."))


def _check_fits(ask: Ask, gpu: GPUInfo, need: int, what: str) -> None:
    room = gpu_budget(gpu)
    if need > room:
        raise PlacementError(
            f"--placement {ask.placement}: {what} needs {size_text(need)} on GPU {gpu.index} ({gpu.name}), "
            f"which has {size_text(room)} to spare. Choose a smaller model or context, or --placement single.")


_WHOLE_GPU = {"n_gpu_layers": ALL_LAYERS, "split_mode": "none"}


def _named(gpu: GPUInfo) -> str:
    """"GPU 1 (Vulkan1)" where llama.cpp's name is known, else "GPU 1"."""
    return f"GPU {gpu.index} ({gpu.device})" if gpu.device else f"GPU {gpu.index}"


def _arrange_single(ask: Ask) -> Arrangement:
    base = ask.base
    if base.n_gpu_layers and ask.gpu_gap:
        return Arrangement("single", dataclasses.replace(base, n_gpu_layers=0),
                           description=f"one worker on the CPU: no GPU is usable ({ask.gpu_gap})")
    worker = dataclasses.replace(base, main_gpu=ask.gpus[0].index) if ask.gpus and ask.named else base
    layers = "all" if base.n_gpu_layers < 0 else str(base.n_gpu_layers)
    gpu = next((g for g in ask.gpus if g.index == worker.main_gpu), None)
    name = _named(gpu) if gpu else f"GPU {worker.main_gpu}"
    where = f"{layers} layers on {name}" if base.n_gpu_layers else "on the CPU"
    return Arrangement("single", worker, description=f"one worker, {where}")


def _arrange_pd_split(ask: Ask) -> Arrangement:
    base = ask.base
    if not ask.gpus:  # two CPU workers stand in for two devices: each gets half the cores
        threads = max(1, (base.n_threads or default_threads()) // 2)
        half = dataclasses.replace(base, n_threads=threads, n_gpu_layers=0)
        return Arrangement("pd-split", half, prefill=half,
                           description=f"prefill and decode workers on the CPU, {threads} thread(s) each")
    _need_two(ask, "one prefills, the other decodes")
    prefill_gpu, decode_gpu = ask.gpus[0], ask.gpus[1]
    for gpu, role in ((prefill_gpu, "the prefill copy"), (decode_gpu, "the decode copy")):
        _check_fits(ask, gpu, ask.need, f"{role} of the model and its KV cache")
    return Arrangement("pd-split", dataclasses.replace(base, main_gpu=decode_gpu.index, **_WHOLE_GPU),
                       prefill=dataclasses.replace(base, main_gpu=prefill_gpu.index, **_WHOLE_GPU),
                       description=f"prefill on {_named(prefill_gpu)}, decode on {_named(decode_gpu)}")


def _arrange_layer_split(ask: Ask) -> Arrangement:
    _need_two(ask, "the layers are spread over them")
    room = sum(gpu_budget(g) for g in ask.gpus)
    if ask.need > room:
        raise PlacementError(f"--placement layer-split: the model and its KV cache need {size_text(ask.need)}; "
                             f"the GPUs have {size_text(room)} to spare together.")
    total_free = sum(g.memory_free for g in ask.gpus)
    split = tuple(g.memory_free / total_free for g in ask.gpus)
    worker = dataclasses.replace(ask.base, n_gpu_layers=ALL_LAYERS, split_mode="layer", main_gpu=ask.gpus[0].index,
                                 tensor_split=split, gpus=tuple(g.index for g in ask.gpus))
    shares = ", ".join(f"{_named(g)} {s:.0%}" for g, s in zip(ask.gpus, split))
    return Arrangement("layer-split", worker, description=f"layers split by free memory: {shares}")


def _arrange_draft_gpu(ask: Ask) -> Arrangement:
    _need_two(ask, "the model on one, its draft model on the other")
    if ask.draft_size is None:
        raise PlacementError("--placement draft-gpu needs a draft model: pass --draft, or pick a model "
                             "whose catalog entry has a draft pairing.")
    _check_fits(ask, ask.gpus[0], ask.need, "the model and its KV cache")
    _check_fits(ask, ask.gpus[1], ask.draft_size.bytes_for(ask.base.n_ctx), "the draft model and its KV cache")
    target, draft = ask.gpus[0], ask.gpus[1]
    return Arrangement("draft-gpu", dataclasses.replace(ask.base, main_gpu=target.index, **_WHOLE_GPU),
                       draft=dataclasses.replace(ask.base, main_gpu=draft.index, **_WHOLE_GPU),
                       description=f"model on {_named(target)}, draft on {_named(draft)}")


# --- the planner's layouts -----------------------------------------------------------------------------

def _on_cpu(site: Site) -> tuple[Parts, list[dict]] | None:
    host = site.use(site.cpu, site.model.n_layer, True, whole_file=True)
    if fits([host]) and (not site.cpu.unified or not site.gpus):  # with unified memory, Metal always wins
        return [(site.cpu, site.model.n_layer, True)], [host]
    return None


def _on_one_gpu(site: Site) -> tuple[Parts, list[dict]] | None:
    for gpu in sorted(site.fitting, key=lambda g: -g.bandwidth)[:1]:
        L = site.model.n_layer
        return [(gpu, L, True)], [site.use(gpu, L, True), site.embeddings_on_host()]
    return None


def _gpu_and_cpu(site: Site) -> tuple[Parts, list[dict]] | None:
    if site.fitting or not site.gpus or site.cpu.unified:
        return None
    L, gpu = site.model.n_layer, max(site.gpus, key=lambda g: g.budget)
    k = min(L - 1, max(0, (gpu.budget - site.model.compute_bytes(N_UBATCH)) // site.per_layer))
    on_host = site.use(site.cpu, L - k, True)
    embedding = site.model.host_bytes(site.quant)
    on_host["weights"] += embedding
    on_host["total"] += embedding
    if k > 0 and fits([on_host]):
        return [(gpu, k, False), (site.cpu, L - k, True)], [site.use(gpu, k, False), on_host]
    return None


def _over_gpus(site: Site) -> tuple[Parts, list[dict]] | None:
    gpus = site.gpus
    if site.fitting or len(gpus) < 2:
        return None
    counts, left = [], site.model.n_layer
    for gpu in gpus:  # fill GPUs in order; the last one also holds the output head
        room = (gpu.budget - site.model.compute_bytes(N_UBATCH)
                - (site.model.output_bytes(site.quant) if gpu is gpus[-1] else 0))
        counts.append(min(left, max(0, room // site.per_layer)))
        left -= counts[-1]
    if left or sum(1 for c in counts if c) < 2:
        return None
    parts = [(g, c, g is gpus[-1]) for g, c in zip(gpus, counts) if c]
    return parts, [site.use(g, c, h) for g, c, h in parts] + [site.embeddings_on_host()]


def _prefill_and_decode_gpus(site: Site) -> tuple[Parts, list[dict]] | None:
    if len(site.fitting) < 2 or not (site.wants.concurrency > 1 or site.wants.long_prompts):
        return None
    L = site.model.n_layer
    pair = sorted(site.fitting, key=lambda g: -g.bandwidth)[:2]
    return [(pair[1], L, True)], [site.use(g, L, True) for g in pair] + [site.embeddings_on_host()]


def _spare_gpus(beside: str, devices: list[Device], use: list[dict]) -> list[Device]:
    used = {u["device"] for u in use}
    return [d for d in devices if d.kind == "gpu" and d.name not in used] if beside == "gpu" else []


# --- the vocabulary ------------------------------------------------------------------------------------

ON_CPU = Layout("cpu", "runs on the CPU from RAM{why}.", _on_cpu)
ON_GPU = Layout("gpu", "all {L} layers and the KV cache fit on {dev}.", _on_one_gpu)
PARTIAL = Layout("partial", "{dev} holds {k} of {L} layers; the rest run on the CPU from RAM.", _gpu_and_cpu)

AUTO = Placement("auto", "the tuned profile's placement (`localchat tune`), else the planner's pick", None)
SINGLE = Placement("single", "one worker: on the CPU, or n_gpu_layers of the layers on one GPU", _arrange_single,
                   (ON_CPU, ON_GPU, PARTIAL))
LAYER_SPLIT = Placement(
    "layer-split", "the layers spread over two GPUs by free memory: a model too big for one GPU",
    _arrange_layer_split, (Layout("layer-split", "too big for one GPU: layers split {split} over the GPUs.",
                                  _over_gpus),), names_gpus=True)
PD_SPLIT = Placement(
    "pd-split", "prompts read on one GPU while answers decode on another; no GPUs: two CPU workers",
    _arrange_pd_split, (Layout("pd-split", "each GPU holds the whole model and its KV cache: prompts prefill on "
                               "one, tokens decode on the other, so long prompts do not stall streaming chats.",
                               _prefill_and_decode_gpus),), drafts=False, names_gpus=True)
DRAFT_GPU = Placement(
    "draft-gpu", "the draft model of speculative decoding on a second GPU, the model on the first",
    _arrange_draft_gpu, (Layout("draft-on-second-gpu", "", draft_on=_spare_gpus),), names_gpus=True)

_DECLARED = (AUTO, SINGLE, LAYER_SPLIT, PD_SPLIT, DRAFT_GPU)
PLACEMENTS = tuple(p.name for p in _DECLARED)
PLACEMENT_HELP = {p.name: p.help for p in _DECLARED}
RUNNABLE = tuple(p.name for p in _DECLARED if p.arrange)   # what the wizard measures side by side
_BY_NAME = {p.name: p for p in _DECLARED} | {lay.name: p for p in _DECLARED for lay in p.layouts}


def placement_of(name: str) -> Placement:
    """The placement a setting or a planner layout names ("partial" runs as single); KeyError if none."""
    return _BY_NAME[name]


def layout_for(placement: str, n_gpu_layers: int, n_layer: int) -> str:
    """The layout `placement` runs a model of `n_layer` layers as, `n_gpu_layers` of them offloaded (the
    planner counts the output head as one more): a split's one layout, or where one worker's layers are."""
    found = _BY_NAME[placement]
    if found.name != placement or found.arrange is None:
        raise KeyError(placement)
    if found is not SINGLE:
        return found.layouts[0].name
    if n_gpu_layers == 0:
        return ON_CPU.name
    return ON_GPU.name if n_gpu_layers < 0 or n_gpu_layers > n_layer else PARTIAL.name


def layouts() -> list[tuple[Placement, Layout]]:
    """Every planner layout with its placement, in declaration order."""
    return [(p, lay) for p in _DECLARED for lay in p.layouts]


def layout_named(name: str) -> Layout:
    """The planner layout of this name."""
    return next(lay for _, lay in layouts() if lay.name == name)


def takes_draft(layout: str) -> bool:
    """Whether the planner may pair a draft on the device of this layout's target."""
    return placement_of(layout).drafts


def _gpus(hardware: HardwareInfo, devices: str) -> list[GPUInfo]:
    found = {g.index: g for g in hardware.gpus}
    if not devices:
        return sorted(found.values(), key=lambda g: g.index)
    chosen = []
    for part in devices.split(","):
        index = int(part)
        if index not in found:
            have = ", ".join(_named(found[i]) for i in sorted(found)) or "none"
            why = f" ({hardware.gpu_gap})" if hardware.gpu_gap else ""
            raise PlacementError(f"--devices names GPU {index}, but the GPUs this install can use are: {have}{why}. "
                                 "`localchat probe` lists them.")
        chosen.append(found[index])
    return chosen


def arrange(placement: str, hardware: HardwareInfo, base: WorkerConfig, size: ModelSize | None = None,
            devices: str = "", draft_size: ModelSize | None = None) -> Arrangement:
    """The worker configurations for `placement` on `hardware`; PlacementError when it cannot run there
    (the fit model's verdict, the planner's). `auto` arranged without a plan is one worker."""
    found = _BY_NAME.get(placement)
    if found is None or found.name != placement:
        raise PlacementError(f"unknown placement {placement!r}; use {', '.join(PLACEMENTS[:-1])} or {PLACEMENTS[-1]}.")
    if found.arrange is None:
        found = SINGLE
    gap = hardware.gpu_gap if hardware.gpus_checked and not hardware.gpus else ""
    return found.arrange(Ask(placement, base, _gpus(hardware, devices), bool(devices), size, draft_size, gap))
