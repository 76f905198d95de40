"""The hardware wizard in the window: in the sidebar what this machine is tuned for, whether the wizard may
download a better model and measure placements, Tune and Cancel; above the chat, as wide as the chat, its
progress (wizard_progress.py) while it runs and what it kept or why it stopped once it ends (tuning.py runs
it; this is the window's part)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Iterator

import gradio as gr

from ...errors import LocalchatError
from ..wizard.tuning import TuneJob, tuned_summary
from ..wizard.wizard_progress import progress_html
from .models_panel import ModelsPanel
from .window import Window

WIZARD = "Hardware wizard"  # the accordion's title


@dataclass(slots=True)
class Wizard:
    box: gr.Accordion
    note: gr.Markdown
    download: gr.Checkbox
    placements: gr.Checkbox
    tune: gr.Button
    cancel: gr.Button


@dataclass(slots=True)
class WizardProgress:
    view: gr.HTML
    hide: gr.Button


def build() -> Wizard:
    """The wizard's accordion (inside the sidebar being built)."""
    # Closed; its title says whether the machine is tuned (checked again on every page load: layout.py).
    with gr.Accordion(WIZARD, open=False, elem_id="tune") as box:
        note = gr.Markdown(elem_id="tune-note")
        # Off unless asked: a better model can be gigabytes, fetched without another question.
        download = gr.Checkbox(False, label="May download a better model (can be several GB)",
                               elem_id="tune-download")
        placements = gr.Checkbox(True, label="Measure where the model runs best (splits across "
                                             "devices; a few minutes more)", elem_id="tune-placements")
        tune = gr.Button("Tune for this machine", size="sm", elem_id="tune-button")
        cancel = gr.Button("Cancel the wizard", size="sm", variant="stop", visible=False, elem_id="tune-cancel")
    return Wizard(box, note, download, placements, tune, cancel)


def build_progress() -> WizardProgress:
    """The wizard's progress above the chat (inside the main column being built), shown once a run starts."""
    view = gr.HTML(visible=False, elem_id="tune-progress")
    hide = gr.Button("Hide the wizard's report", size="sm", visible=False, elem_id="tune-hide")
    return WizardProgress(view, hide)


def _shown(job: TuneJob, state: str) -> dict:
    return gr.update(value=progress_html(job.lines, state, job.elapsed_s), visible=True)


def wire(w: Window, wizard: Wizard, progress: WizardProgress, models: ModelsPanel) -> None:
    """Tune runs the wizard (or follows the one running) and loads what it kept; Cancel stops it."""
    core = w.core
    jobs: dict[str, TuneJob] = {}  # one wizard at a time for the whole app, whichever tab started it

    def tune(download: bool, placements: bool) -> Iterator[tuple]:
        job = jobs.get("current")
        if job is None or not job.running:
            job = jobs["current"] = TuneJob(download, placements, loaded=core.runtime.engine.worker.model_path)
        # The Cancel button shows while it runs, the Hide button once it has ended.
        running, ended = (gr.update(visible=True), gr.update(visible=False)), (gr.update(visible=False),
                                                                               gr.update(visible=True))
        while job.running:
            yield _shown(job, "running"), gr.skip(), gr.skip(), gr.skip(), *running
            time.sleep(0.5)
        job.wait()
        kept, note = tuned_summary()
        if job.cancelled:
            gr.Info("The wizard was cancelled; the settings are as they were.")
            yield _shown(job, "cancelled"), note, gr.skip(), gr.skip(), *ended
            return
        if job.returncode != 0 or kept is None:
            gr.Warning("The wizard stopped before it kept a model; its report says why.")
            yield _shown(job, "failed"), note, gr.skip(), gr.skip(), *ended
            return
        try:
            core.runtime.switch(kept.path)  # the tuned file, with its tuned settings
        except LocalchatError as exc:
            gr.Warning(f"tuned, but loading the kept model failed: {exc}")
            yield _shown(job, "kept"), note, gr.skip(), gr.skip(), *ended
            return
        gr.Info(f"Tuned: now answering with {kept.model} {kept.quant}.")
        yield _shown(job, "kept"), note, w.picker(), core.status(), *ended

    def cancel() -> None:
        job = jobs.get("current")
        if job is not None:
            job.cancel()

    wizard.cancel.click(cancel, None, None, api_name=False, queue=False)
    progress.hide.click(lambda: (gr.update(visible=False),) * 2, None, [progress.view, progress.hide],
                        api_name=False, queue=False)
    # The Models panel's Measured column and "best here" come from the profile the wizard just saved.
    shown = [progress.view, wizard.note, w.model, w.status, wizard.cancel, progress.hide]
    wizard.tune.click(tune, [wizard.download, wizard.placements], shown, api_name=False, concurrency_limit=1).then(
        models.refreshed, None, [models.table, models.local, w.model], api_name=False)
