"""The launch's arrangement of workers: the placement the settings name, with `auto` resolved as the README
says (the tuned profile's placement when it holds for this model, else the planner's pick for this machine)."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from ..errors import LocalchatError
from ..hardware import HardwareInfo
from .fit import ModelSize
from .placements import SINGLE, Arrangement, arrange, placement_of

if TYPE_CHECKING:
    from ..runtime.workers.worker import WorkerConfig

log = logging.getLogger(__name__)


@dataclasses.dataclass(slots=True)
class Pick:
    """The planner's placement for one model file on one machine."""

    placement: str
    n_gpu_layers: int
    main_gpu: int
    devices: str


def planned(hardware: HardwareInfo, n_ctx: int, model: Path, draft: Path | None = None) -> Pick | None:
    """What the planner picks for this model file (and its draft) at n_ctx on `hardware`, from the
    files' headers; None when it finds no way to fit the file there."""
    from ..models.catalog import facts_from_gguf
    from ..models.gguf_info import read_model
    from .planner import Wants, plan

    try:  # a file the header reader refuses is left for the load to refuse, with the loader's words
        info = read_model(model)  # a split model: all its parts
        target = facts_from_gguf(info, "model", info.file_size or 0)
        catalog = {target.key: target}
        if draft is not None:
            drafted = read_model(draft)
            catalog["draft"] = facts_from_gguf(drafted, "draft", drafted.file_size or 0)
            target.draft = "draft"
        result = plan(hardware, catalog, Wants(n_ctx=n_ctx, min_decode_tps=0.0))
    except (LocalchatError, OSError) as exc:
        log.info("the planner finds no layout for %s (%s); one worker it is", Path(model).name, exc)
        return None
    chosen = placement_of(result.layout)
    return Pick(chosen.name, result.n_gpu_layers, result.main_gpu, result.gpu_indices() if chosen.names_gpus else "")


def choose_arrangement(placement: str, base: WorkerConfig, model: Path, draft: Path | None = None, devices: str = "",
                  hardware: Callable[[], HardwareInfo | None] | None = None, tuned: str | None = None) -> Arrangement:
    """The engine's workers for `placement`. `auto`: `tuned` (the profile's layout, given when the
    profile holds for this model), else the planner's pick for this model on `hardware()`, whose layer
    count counts where `base` offloads none. The hardware is read only where the placement needs it."""
    read = hardware or (lambda: None)
    if placement == "auto" and tuned:
        placement = placement_of(tuned).name
    elif placement == "auto":
        info = read()
        # Without a GPU every layout for one chat is one CPU worker: no need to read the file's header.
        pick = planned(info, base.n_ctx, model, draft) if info is not None and info.gpus else None
        if pick is None:
            placement = SINGLE.name
        else:
            placement, devices = pick.placement, devices or pick.devices
            if not base.n_gpu_layers and pick.n_gpu_layers:
                base = dataclasses.replace(base, n_gpu_layers=pick.n_gpu_layers, main_gpu=pick.main_gpu)
    if placement == SINGLE.name and not devices:  # the GPUs are read only to check one is usable
        return arrange(SINGLE.name, (read() or HardwareInfo()) if base.n_gpu_layers else HardwareInfo(), base)
    info = read() or HardwareInfo()
    return arrange(placement, info, base, ModelSize.of(model), devices, ModelSize.of(draft) if draft else None)
