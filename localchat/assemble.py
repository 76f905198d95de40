"""The one place that builds an Engine from settings: model resolution, workers, placement."""

from __future__ import annotations

import functools
import logging
import sys
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from . import paths
from .config import Settings
from .errors import ModelLoadError
from .units import size_text

if TYPE_CHECKING:
    from .runtime.workers.worker import WorkerConfig

log = logging.getLogger(__name__)


def progress_bar(label: str) -> Callable[[int, int], None]:
    """A one-line progress display on stderr."""
    def show(done: int, total: int) -> None:
        if not sys.stderr.isatty() and done < total:
            return
        width = 30
        filled = int(width * done / total) if total else width
        end = "\n" if done >= total else ""
        print(f"\r{label} [{'#' * filled}{'.' * (width - filled)}] {size_text(done)} of {size_text(total)}",
              end=end, file=sys.stderr, flush=True)
    return show


def model_file(name: str) -> Path:
    """The local file of a model name or path, fetched (with a progress bar) when it is not here yet:
    the one model resolution of chat, serve, the window and the selftest."""
    from .models.resolve import resolve_model

    return resolve_model(name, progress=progress_bar(f"fetching {name}"))


def worker_config(settings: Settings) -> WorkerConfig:
    """The worker's knobs from the settings: every field the two share (both use llama.cpp's names)."""
    from .runtime.workers.worker import WorkerConfig

    shared = {f.name for f in fields(WorkerConfig)} & {f.name for f in fields(Settings)}
    return WorkerConfig(**{name: getattr(settings, name) for name in sorted(shared)})


def open_engine(settings: Settings, status: Callable[[str], None] | None = None,
                progress: Callable[[float], None] | None = None):
    """Resolve (fetching when needed) and load the configured model; `status` hears when loading starts,
    `progress` how much of the model file is loaded (0 to 1)."""
    from .models.resolve import catalog_draft
    from .runtime.engine import Engine, EngineConfig

    path = model_file(settings.model)
    worker = worker_config(settings)
    draft = None
    if settings.speculation and not settings.lookup:
        draft = model_file(settings.draft) if settings.draft else catalog_draft(settings.model)
    if status is not None:
        status(f"loading {path.name}")
    arrangement = arrange_workers(settings, worker, path, draft)
    log.info("placement: %s", arrangement.description)
    config = EngineConfig.placed(arrangement, step_budget=settings.step_budget, draft_path=draft,
                                 lookup=settings.speculation and draft is None, on_load_progress=progress,
                                 kv_disk_dir=paths.kv_states_dir() if settings.kv_disk_mb else None,
                                 kv_disk_bytes=settings.kv_disk_mb << 20)
    return Engine.load(path, config)


def open_supervised(settings: Settings, status: Callable[[str], None] | None = None,
                    progress: Callable[[float], None] | None = None):
    """The configured model in a supervised runner process (runners/): how the server (the window and
    the API) loads, so a model file, grammar or schema that crashes or stalls llama.cpp costs the
    requests in flight, not the server. A file that crashed its runner while loading is refused until
    it changes."""
    import dataclasses

    from .models import bad_files
    from .runners.supervisor import LoadCrashError, SupervisedEngine

    path = model_file(settings.model)  # fetched here, where the progress bar shows
    reason = bad_files.reason_for(path)
    if reason is not None:
        raise ModelLoadError(f"{path.name} is marked bad: {reason}. Choose another file, or download this one "
                             "again.")
    if status is not None:
        status(f"loading {path.name}")
    try:
        return SupervisedEngine(functools.partial(open_engine, dataclasses.replace(settings, model=str(path))),
                                progress)
    except LoadCrashError as exc:
        bad_files.mark(path, f"the model runner {exc.how} when it was loaded")
        raise


def on_demand(settings_for: Callable[[str], Settings]):
    """The runners of the models requests name besides the served one (runners/pool.py): each file loaded
    in a supervised runner with the settings for it (its own draft pairing, not the served model's) and
    sized as the planner's fit model counts it, at that context."""
    import dataclasses

    from .planning.fit import ModelSize
    from .runners.pool import Runners, free_memory

    def settings_of(path: Path) -> Settings:
        return dataclasses.replace(settings_for(str(path)), draft="")

    def needs(path: Path) -> int:
        try:
            return ModelSize.of(path).bytes_for(settings_of(path).n_ctx)
        except Exception:  # a header the reader refuses: the load refuses the file, with the loader's words
            return path.stat().st_size

    base = settings_for(None)
    room: dict = {}
    if base.n_gpu_layers:  # the models go to the GPUs: their room is the GPUs' free memory, read live
        from .hardware import HardwareInfo
        from .planning.fit import budget
        from .runtime.backends.gpus import usable

        def gpu_free() -> int:  # one GPU holds a model, except where its layers are split over them
            free = [g.memory_free for g in usable(HardwareInfo()).gpus] or [free_memory()]
            return sum(free) if base.placement == "layer-split" else max(free)

        room = {"free": gpu_free, "room": lambda free: budget(free, "gpu")}
    return Runners(lambda path: open_supervised(settings_of(path)), needs, base.keep_alive * 60.0, **room)


def arrange_workers(settings: Settings, worker, path, draft):
    """The workers of the configured placement (`auto`: the tuned profile's when it holds for this model,
    else the planner's pick for this machine), with the profile's measured step costs where they hold.
    The hardware is read (quickly, in-process, once) only when the placement depends on it."""
    from .planning.choose import choose_arrangement
    from .tune.profile import launch_profile, quick_hardware, tuned_for

    hardware = functools.cache(lambda: _usable(quick_hardware()))
    profile = tuned_for(launch_profile(hardware), path)
    arrangement = choose_arrangement(settings.placement, worker, path, draft, settings.devices, hardware,
                                     tuned=profile.layout if profile else None)
    arrangement.step_costs = profile.step_costs(arrangement) if profile else None
    return arrangement


def _usable(info):
    """The machine with the GPUs this process's llama.cpp can use (it runs the model: it loads them anyway)."""
    from .runtime.backends.devices import usable_here

    return usable_here(info) if info is not None else None
