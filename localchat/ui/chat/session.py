"""What the window runs on: the loaded engine (and how to load another), and a chat's sampling settings."""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ...errors import LocalchatError
from ...runtime.engine import Engine
from ...runtime.overflow import POLICIES
from ...runtime.sampling import LIMITS, SamplingParams


@dataclass(slots=True)
class Runtime:
    """The loaded engine and how to load another; the API service follows a model switch."""

    engine: Engine
    model: str
    # (model name, n_ctx=None: its settings' own, progress=a callback of the share loaded) -> a loaded engine
    load: Callable[..., Engine] | None = None
    service: Any = None  # the API's LocalService, which serves the same engine
    lock: threading.Lock = field(default_factory=threading.Lock)
    loading: float | None = None  # while a switch loads: the share of the new model's file read so far
    # The models served before this one, oldest first: a file given with --model may lie outside every folder
    # the picker scans, and switching away must not make it unreachable until a restart.
    earlier: list[str] = field(default_factory=list)

    def switch(self, model: str, n_ctx: int | None = None) -> None:
        """Load `model` (with `n_ctx` tokens of context, or its settings' own) and make it the one every
        chat and the API use; the old one is closed once the answers it is giving have ended."""
        if self.load is None:
            raise LocalchatError("this window cannot load models; restart localchat with --model or --n-ctx.")
        with self.lock:
            if model == self.model and n_ctx in (None, self.engine.n_ctx):
                return
            self.loading = 0.0
            try:
                engine = self.load(model, n_ctx=n_ctx, progress=lambda share: setattr(self, "loading", share))
            finally:
                self.loading = None
            old, left, self.engine, self.model = self.engine, self.model, engine, model
            self.earlier = [m for m in self.earlier if m != model] + ([left] if left != model else [])
            if self.service is not None:
                from ...api.local import served_name

                self.service.engine, self.service.model_name = engine, served_name(model)
                self.service.served_before(served_name(left), old.worker.model_path)
        old.close_when_done()

    def forget(self, path: str) -> None:
        """The model file at `path` was deleted or taken off the list: it is no longer one served earlier, and
        the API stops listing it now (not at its next look at the disk)."""
        self.earlier = [m for m in self.earlier if m != path]
        if self.service is not None:
            self.service.forget(Path(path))


WINDOW_MAX_TOKENS = 512  # a new chat's answer limit unless the server was given --max-tokens
MAX_TOKENS_STEP = 16  # the Max tokens slider's step


def max_answer_tokens(n_ctx: int) -> int:
    """The most Max tokens may be with `n_ctx` tokens of context: three quarters of it, so the chat keeps a
    quarter (a limit the size of the whole context refused every message: "0 tokens left")."""
    return max(MAX_TOKENS_STEP, n_ctx * 3 // 4 // MAX_TOKENS_STEP * MAX_TOKENS_STEP)
_ENGINE_DEFAULTS = SamplingParams()


@dataclass(slots=True)
class Sampling:
    """The per-conversation settings shown in the window, in the order its controls (and the /send API's
    arguments) give them: sampling over the server's defaults, then what the chat does when it outgrows
    the context (runtime/overflow.py). Names and defaults are SamplingParams' own, but for the answer limit
    and the seed, which the window always shows with a value."""

    temperature: float = _ENGINE_DEFAULTS.temperature
    top_p: float = _ENGINE_DEFAULTS.top_p
    max_tokens: int = WINDOW_MAX_TOKENS
    top_k: int = _ENGINE_DEFAULTS.top_k
    min_p: float = _ENGINE_DEFAULTS.min_p
    repeat_penalty: float = _ENGINE_DEFAULTS.repeat_penalty
    seed: int | None = None  # None: a new random seed each answer
    presence_penalty: float = _ENGINE_DEFAULTS.presence_penalty
    frequency_penalty: float = _ENGINE_DEFAULTS.frequency_penalty
    context_overflow: str = POLICIES[0]
    thinking: str = "default"  # a thinking model's switch (THINKING): its template's default, on/off, a level
    thinking_budget: int = 0  # tokens a thinking model may think before its thinking is closed; 0: no limit
    base: SamplingParams = field(default_factory=SamplingParams)  # what the window does not show

    @classmethod
    def over(cls, base: SamplingParams, context_overflow: str = POLICIES[0], thinking_budget: int = 0) -> "Sampling":
        """A new chat's settings: the server's defaults (`localchat ui --temperature ... --context-overflow ...`)."""
        shown = {name: getattr(base, name) for name in SAMPLING_SETTINGS}
        return cls(**shown | {"max_tokens": base.max_tokens or WINDOW_MAX_TOKENS}, base=base,
                   context_overflow=context_overflow, thinking_budget=thinking_budget)

    def params(self) -> SamplingParams:
        """The engine's parameters: each control's number as the type SamplingParams takes (a slider's
        value may come as a float)."""
        shown = {name: getattr(self, name) for name in SAMPLING_SETTINGS}
        return dataclasses.replace(self.base, **{name: value if value is None else LIMITS[name].kind(value)
                                                 for name, value in shown.items()})


SHOWN_SETTINGS = tuple(f.name for f in dataclasses.fields(Sampling) if f.name != "base")
SAMPLING_SETTINGS = SHOWN_SETTINGS[:SHOWN_SETTINGS.index("context_overflow")]  # the ones SamplingParams takes


def settings_of(sampling: Sampling) -> dict[str, Any]:
    """A conversation's stored settings: the ones the window shows."""
    return {name: getattr(sampling, name) for name in SHOWN_SETTINGS}


THINKING = ("default", "on", "off", "low", "medium", "high")


def thinking_asked(choice: str) -> bool | str | None:
    """The drawer's thinking choice as the API's switch (api/thinking.py: switches_for)."""
    return {"default": None, "on": True, "off": False}.get(choice, choice if choice in THINKING else None)


def checked_settings(raw: dict[str, Any]) -> dict[str, Any]:
    """The settings the window shows out of ones from a file (an import, a preset): numbers (the seed may
    be none; each is range-checked when used) and the overflow policy by name; anything else is dropped."""
    return {k: v for k, v in raw.items() if k in SHOWN_SETTINGS
            and (isinstance(v, (int, float)) and not isinstance(v, bool) or (k == "seed" and v is None)
                 or (k == "context_overflow" and v in POLICIES) or (k == "thinking" and v in THINKING))}
