"""The settings drawer at the chat's right: this chat's system prompt and sampling, the model's context length.

A drawer (Gradio's right-hand sidebar) rather than a panel under the chat: opened, it sits beside the
conversation and the message box instead of pushing them out of view.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import gradio as gr

from ...errors import LocalchatError
from ...runtime.overflow import POLICIES
from ...runtime.sampling import LIMITS
from ...runtime.templates.thinking import thinking_style
from ..chat.core import ChatCore
from ..chat.presets import Preset, Presets
from ..chat.session import MAX_TOKENS_STEP, SHOWN_SETTINGS, THINKING, Sampling, max_answer_tokens, settings_of

MIN_CONTEXT = 64  # the n_ctx setting's own lower bound (config.py)
OVERFLOW_CHOICES = [("Leave out the oldest turns", "rolling"),
                    ("Keep the first turn, leave out the ones after it", "truncate-middle"),
                    ("Refuse the message", "refuse")]


def slider(name: str, label: str, low: float, high: float, step: float, value: float) -> gr.Slider:
    """A sampling slider over the window's range for it, kept inside what the engine accepts (LIMITS)."""
    limit = LIMITS[name]
    if limit.low is not None:
        low = max(low, limit.low + (step if limit.open_low else 0))
    if limit.high is not None:
        high = min(high, limit.high - (step if limit.open_high else 0))
    return gr.Slider(low, high, value=value, step=step, label=label, elem_id=name.replace("_", "-"))


@dataclass(slots=True)
class PresetControls:
    pick: gr.Dropdown
    name: gr.Textbox
    save: gr.Button
    as_default: gr.Checkbox
    delete: gr.Button


@dataclass(slots=True)
class SettingsPanel:
    drawer: gr.Sidebar
    system: gr.Textbox
    controls: list[Any]  # one per SHOWN_SETTINGS name, in that order
    n_ctx: gr.Number
    reload: gr.Button
    note: gr.Markdown
    shown_ctx: gr.State  # the context length the box last showed from the loaded model
    presets: PresetControls

    @property
    def inputs(self) -> list[Any]:
        """What every answer reads: the system prompt, then the sampling controls."""
        return [self.system, *self.controls]

    def control(self, name: str) -> Any:
        return self.controls[SHOWN_SETTINGS.index(name)]


def build_settings_panel(defaults: Sampling, system_prompt: str, core: ChatCore, saved: Presets) -> SettingsPanel:
    """The drawer's components (inside the Blocks being built); it starts closed."""
    d, n_ctx_now = defaults, core.runtime.engine.n_ctx
    with gr.Sidebar(open=False, position="right", width=340, elem_id="settings-panel") as drawer:
        gr.Markdown("**Settings for this chat**")
        with gr.Group(elem_id="presets"):
            pick = gr.Dropdown(saved.names(), value=None, label="Preset", elem_id="preset",
                               info="Sets this chat's settings from a saved preset.")
            with gr.Row(equal_height=True):
                name = gr.Textbox(placeholder="Name these settings", show_label=False, container=False, scale=3,
                                  elem_id="preset-name")
                save = gr.Button("Save as preset", size="sm", scale=2, elem_id="save-preset")
            with gr.Row(equal_height=True):
                as_default = gr.Checkbox(label="New chats start with it", value=False, elem_id="preset-default")
                delete = gr.Button("Delete preset", size="sm", elem_id="delete-preset")
        system = gr.Textbox(system_prompt, label="System prompt", lines=2, max_lines=6, elem_id="system")
        sliders = {
            "temperature": slider("temperature", "Temperature (0: greedy)", 0, 2, 0.05, d.temperature),
            "top_p": slider("top_p", "Top p", 0, 1, 0.05, d.top_p),
            # Its end follows the loaded context (window.py moves it with each chat opened and each reload).
            "max_tokens": slider("max_tokens", "Max tokens", MAX_TOKENS_STEP, max_answer_tokens(n_ctx_now),
                                 MAX_TOKENS_STEP, min(d.max_tokens, max_answer_tokens(n_ctx_now))),
            "top_k": slider("top_k", "Top k (0: off)", 0, 200, 1, d.top_k),
            "min_p": slider("min_p", "Min p", 0, 1, 0.01, d.min_p),
            "repeat_penalty": slider("repeat_penalty", "Repeat penalty (1: off)", 0.5, 2, 0.05, d.repeat_penalty),
            # A text box: Gradio's number box shows (and sends) 0 for "no value", so "random" could not be chosen.
            "seed": gr.Textbox("" if d.seed is None else str(d.seed), label="Seed (empty: a random one each answer)",
                               max_lines=1, elem_id="seed"),
            "presence_penalty": slider("presence_penalty", "Presence penalty (0: off)", -2, 2, 0.05,
                                       d.presence_penalty),
            "frequency_penalty": slider("frequency_penalty", "Frequency penalty (0: off)", -2, 2, 0.05,
                                        d.frequency_penalty),
            "context_overflow": gr.Dropdown(OVERFLOW_CHOICES, value=d.context_overflow, elem_id="context-overflow",
                                            label="When the chat outgrows the context"),
            "thinking": thinking_control(core, d.thinking),
            "thinking_budget": gr.Slider(0, 8192, value=d.thinking_budget, step=64, elem_id="thinking-budget",
                                         label="Thinking budget (tokens, 0: no limit)",
                                         visible=thinking_style(core.runtime.engine.template.source) is not None),
        }
        gr.Markdown("**Model**")
        trained = core.runtime.engine.worker.n_ctx_train or core.runtime.engine.n_ctx
        # No minimum or maximum here: Gradio would refuse a value out of them with an error badge, not a toast.
        n_ctx = gr.Number(core.runtime.engine.n_ctx, label=f"Context length (tokens, {MIN_CONTEXT} to {trained:,})",
                          precision=0, elem_id="n-ctx")
        reload = gr.Button("Reload the model with this context", size="sm", elem_id="reload-context")
        note = gr.Markdown(context_note(core), elem_id="context-note")
    return SettingsPanel(drawer, system, [sliders[name] for name in SHOWN_SETTINGS], n_ctx, reload, note,
                         gr.State(core.runtime.engine.n_ctx), PresetControls(pick, name, save, as_default, delete))


def starting(saved: Presets, defaults: Sampling, system_prompt: str) -> tuple[Any, ...]:
    """A new chat's system prompt and control values (in SHOWN_SETTINGS order): the default preset's over
    the server's defaults."""
    preset = saved.default()
    if preset is None:
        return system_prompt, *(getattr(defaults, name) for name in SHOWN_SETTINGS)
    return preset.system_prompt, *(preset.settings.get(name, getattr(defaults, name)) for name in SHOWN_SETTINGS)


def wire_settings_panel(panel: SettingsPanel, core: ChatCore, saved: Presets, defaults: Sampling, conv_id: gr.State,
                        status: gr.Markdown) -> None:
    """The drawer's events: every change kept with the open chat, the presets, the context's reload; `status` is
    the window's status line."""
    system, sliders, seed = panel.system, panel.controls, panel.control("seed")

    def save_settings(cid: str | None, sys_prompt: str, *values: float) -> None:
        if cid:
            core.save_settings(cid, sys_prompt or "", sampling_of(values, defaults))

    wire_presets(panel, saved, defaults, conv_id, save_settings, lambda: core.runtime.engine.n_ctx)
    panel.reload.click(functools.partial(resize, core), [panel.n_ctx], [panel.n_ctx, panel.note, status],
                       api_name=False, concurrency_limit=1)
    # The status changes with every load (a model switch, the wizard, a new context): so does the context box.
    status.change(functools.partial(follow_load, core), [panel.shown_ctx, panel.control("max_tokens")],
                  [panel.n_ctx, panel.note, panel.shown_ctx, panel.control("max_tokens")], api_name=False)
    # A model chosen in the window may think where the one before did not (or the other way): its switch follows.
    status.change(functools.partial(thinking_controls, core), [panel.control("thinking")],
                  [panel.control("thinking"), panel.control("thinking_budget")], api_name=False)
    gr.on([system.blur, seed.blur, *(x.input if isinstance(x, gr.Dropdown) else x.release
                                     for x in sliders if x is not seed)], save_settings,
          [conv_id, *panel.inputs], None, api_name=False)


def wire_presets(panel: SettingsPanel, saved: Presets, defaults: Sampling, conv_id: gr.State,
                 save_settings: Callable[..., None], panel_context: Callable[[], int]) -> None:
    """Save the drawer's settings under a name, set them from one (kept in the open chat), delete one."""
    controls = panel.presets
    shown = [panel.system, *panel.controls]

    def save(name: str, as_default: bool, system: str, *values: Any) -> tuple:
        *chosen, n_ctx = values
        try:
            saved.save(Preset(name or "", system or "", settings_of(sampling_of(tuple(chosen), defaults)),
                              int(n_ctx) if n_ctx else None), as_default)
        except LocalchatError as exc:
            gr.Warning(str(exc))
            return gr.skip(), gr.skip()
        gr.Info(f"Saved the preset “{name.strip()}”" + (": new chats start with it." if as_default else "."))
        return gr.update(choices=saved.names(), value=name.strip()), ""

    def pick(name: str | None) -> tuple:
        preset = saved.get(name)
        if preset is None:
            return (gr.skip(),) * (len(shown) + 2)
        values = [preset.settings.get(n, getattr(defaults, n)) for n in SHOWN_SETTINGS]
        at = SHOWN_SETTINGS.index("max_tokens")  # saved with a longer context, maybe: within the one loaded now
        values[at] = min(values[at], max_answer_tokens(panel_context()))
        default = saved.default()
        n_ctx = gr.skip()
        if preset.n_ctx and preset.n_ctx != panel_context():  # the box says it; Reload applies it
            n_ctx = preset.n_ctx
            gr.Info(f"“{preset.name}” was saved with {preset.n_ctx:,} tokens of context: press “Reload the model "
                    "with this context” to use that too.")
        return preset.system_prompt, *values, default is not None and default.name == preset.name, n_ctx

    def delete(name: str | None) -> dict[str, Any]:
        if name and saved.delete(name):
            gr.Info(f"Deleted the preset “{name}”.")
        return gr.update(choices=saved.names(), value=None)

    controls.save.click(save, [controls.name, controls.as_default, *shown, panel.n_ctx],
                        [controls.pick, controls.name], api_name=False)
    controls.name.submit(save, [controls.name, controls.as_default, *shown, panel.n_ctx],
                         [controls.pick, controls.name], api_name=False)
    # Picked, the settings are this chat's own from then on: kept with it as a change in the drawer is.
    controls.pick.input(pick, [controls.pick], [*shown, controls.as_default, panel.n_ctx], api_name=False).then(
        save_settings, [conv_id, *shown], None, api_name=False)
    controls.delete.click(delete, [controls.pick], [controls.pick], api_name=False)


def thinking_choices(core: ChatCore) -> list[str] | None:
    """The loaded model's thinking switch: on/off (Qwen3, GLM, DeepSeek V3.1) or a level (gpt-oss); None for a
    model that does not think or cannot be switched."""
    style = thinking_style(core.runtime.engine.template.source)
    if style is None or style.switch is None:
        return None
    return ["default", *(style.levels or ("on", "off"))]


THINKING_INFO = "Whether (or how hard) the model thinks before it answers."


def thinking_control(core: ChatCore, value: str) -> gr.Dropdown:
    """The thinking switch, where the loaded model has one; hidden otherwise."""
    choices = thinking_choices(core)
    if choices is None:
        return gr.Dropdown(["default"], value="default", visible=False, elem_id="thinking")
    return gr.Dropdown(choices, value=value if value in choices else "default", elem_id="thinking",
                       label="Thinking", info=THINKING_INFO)


def thinking_controls(core: ChatCore, value: str | None) -> tuple:
    """(the thinking switch, the thinking budget) for the model loaded now: the page is built with the model the
    server started with, and the window may load another (a switch, the wizard)."""
    choices = thinking_choices(core)
    thinks = thinking_style(core.runtime.engine.template.source) is not None
    budget = gr.update(visible=thinks)
    if choices is None:
        return gr.update(choices=["default"], value="default", visible=False), budget
    return gr.update(choices=choices, value=value if value in choices else "default", visible=True,
                     label="Thinking", info=THINKING_INFO), budget


def sampling_of(values: tuple, defaults: Sampling) -> Sampling:
    """The controls' values (in SHOWN_SETTINGS order) over the server's defaults."""
    chosen = dict(zip(SHOWN_SETTINGS, values))
    chosen["max_tokens"], chosen["top_k"] = int(chosen["max_tokens"]), int(chosen["top_k"])
    chosen["thinking_budget"] = max(int(chosen["thinking_budget"] or 0), 0)
    chosen["seed"] = seed_of(chosen["seed"])
    if chosen["context_overflow"] not in POLICIES:  # a page may send anything
        chosen["context_overflow"] = defaults.context_overflow
    if chosen["thinking"] not in THINKING:
        chosen["thinking"] = defaults.thinking
    return Sampling(**chosen, base=defaults.base)


def seed_of(text: str | int | None) -> int | None:
    """The seed box's value: a whole number, or None (random) when empty or not a number (with a toast)."""
    text = str(text if text is not None else "").strip()
    if not text:
        return None
    if text.isdigit():
        return int(text)  # its range is checked with the other settings when the answer starts (LIMITS)
    gr.Warning(f"the seed {text!r} is not a whole number from 0 to {LIMITS['seed'].high:,}; a random seed is used.")
    return None


def context_note(core: ChatCore) -> str:
    engine = core.runtime.engine
    trained = engine.worker.n_ctx_train
    return (f"Context: {engine.n_ctx:,} tokens" + (f" (the model was trained for {trained:,})" if trained else "")
            + ". A reload keeps every chat; an answer in progress finishes on the current load.")


def follow_load(core: ChatCore, shown: int | None, max_tokens: float | None) -> tuple:
    """(box, note, shown, Max tokens) after the status changed: new only when the loaded context did (a model
    switch, the wizard, a reload), so a length being typed is not overwritten by the status of every answer;
    Max tokens' slider ends where the new context allows."""
    n_ctx = core.runtime.engine.n_ctx
    if n_ctx == shown:
        return (gr.skip(),) * 4
    room = max_answer_tokens(n_ctx)
    return n_ctx, context_note(core), n_ctx, gr.update(maximum=room, value=min(int(max_tokens or room), room))


def resize(core: ChatCore, n_ctx: float | None) -> Iterator[tuple]:
    """Reload the model with `n_ctx` tokens of context; yields (context box, note, status)."""
    engine = core.runtime.engine
    trained = engine.worker.n_ctx_train
    wanted = int(n_ctx or 0)
    if not MIN_CONTEXT <= wanted <= (trained or wanted):
        gr.Warning(f"a context of {wanted:,} tokens is out of range; use {MIN_CONTEXT} to {trained or wanted:,}.")
        yield engine.n_ctx, gr.skip(), gr.skip()
        return
    if wanted == engine.n_ctx:
        yield gr.skip(), context_note(core), gr.skip()
        return
    yield gr.skip(), f"Reloading with {wanted:,} tokens of context… the current load answers meanwhile.", gr.skip()
    try:
        core.runtime.switch(core.runtime.model, n_ctx=wanted)
    except LocalchatError as exc:
        gr.Warning(f"the model did not reload with {wanted:,} tokens of context, so it stays as it was: {exc}")
        yield core.runtime.engine.n_ctx, context_note(core), core.status()
        return
    gr.Info(f"The model now runs with {core.runtime.engine.n_ctx:,} tokens of context.")
    yield core.runtime.engine.n_ctx, context_note(core), core.status()
