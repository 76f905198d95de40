"""The one place that builds an Engine from settings: model resolution, workers, placement."""

from __future__ import annotations

import logging
import sys
from typing import Callable

from .config import Settings

log = logging.getLogger(__name__)


def progress_bar(label: str) -> Callable[[int, int], None]:
    """A one-line progress display on stderr."""
    def show(done: int, total: int) -> None:
        if not sys.stderr.isatty() and done < total:
            return
        width = 30
        filled = int(width * done / total) if total else width
        end = "\n" if done >= total else ""
        print(f"\r{label} [{'#' * filled}{'.' * (width - filled)}] {done / 1e6:.0f}/{total / 1e6:.0f} MB",
              end=end, file=sys.stderr, flush=True)
    return show


def open_engine(settings: Settings, status: Callable[[str], None] | None = None):
    """Resolve (fetching when needed) and load the configured model; `status` hears when loading starts."""
    from .models.resolve import catalog_draft, resolve_model
    from .runtime.engine import Engine, EngineConfig
    from .runtime.worker import WorkerConfig

    path = resolve_model(settings.model, progress=progress_bar(f"fetching {settings.model}"))
    worker = WorkerConfig(n_ctx=settings.n_ctx, n_batch=settings.n_batch, n_seq_max=settings.n_seq_max,
                          n_threads=settings.n_threads, n_gpu_layers=settings.n_gpu_layers,
                          deterministic=settings.deterministic)
    draft = None
    if settings.speculation and not settings.lookup:
        draft = (resolve_model(settings.draft, progress=progress_bar(f"fetching {settings.draft}"))
                 if settings.draft else catalog_draft(settings.model))
    if status is not None:
        status(f"loading {path.name}")
    layout = arrange_workers(settings, worker, path, draft)
    log.info("placement: %s", layout.description)
    config = EngineConfig(worker=layout.worker, step_budget=settings.step_budget, draft_path=draft,
                          lookup=settings.speculation and draft is None, prefill=layout.prefill,
                          draft_worker=layout.draft)
    engine = Engine.load(path, config)
    engine.placement = layout.description
    return engine


def arrange_workers(settings: Settings, worker, path, draft):
    """The workers of the configured placement (`auto`: the tuned profile's when it holds for this model,
    else the planner's pick for this machine), with the profile's measured step costs where they hold.
    The hardware is read (quickly, in-process, once) only when the placement depends on it."""
    import functools

    from .planning.choose import choose_layout
    from .tune.profile import launch_profile, quick_hardware, tuned_for

    hardware = functools.cache(quick_hardware)
    profile = tuned_for(launch_profile(hardware), path)
    layout = choose_layout(settings.placement, worker, path, draft, settings.devices, hardware,
                           tuned=profile.placement if profile else None)
    layout.step_costs = profile.step_costs(layout) if profile else None
    return layout
