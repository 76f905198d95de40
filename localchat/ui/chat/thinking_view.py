"""A thinking model's answer in the window: its text read apart as it streams (api/reader.py), how long the
thinking took, the template's switch for this chat, and earlier thinking handed back as the template wants."""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable, Iterator

from ...api.reader import reader_for
from ...api.thinking import switches_for
from ...runtime.events import Event, Stream, TextDelta
from ...runtime.templates.thinking import Thought, thinking_style
from .session import thinking_asked


class ThinkingView:
    """One answer: `thought` and `answer` so far, whether it is thinking now, and for how long it thought."""

    def __init__(self, template_source: str, prompt: str) -> None:
        self.style = thinking_style(template_source)
        self.reader = reader_for(self.style, prompt, None, set())
        self.thought, self.answer = "", ""
        self.raw: list[str] = []  # the model's text as written (a budget goes on from it)
        self.started = time.perf_counter()
        self.seconds: float | None = None  # set when the thinking closes

    @property
    def thinking(self) -> bool:
        return self.reader is not None and self.reader.thinking

    def feed(self, text: str) -> None:
        self.raw.append(text)
        self._keep(self.reader.feed(text) if self.reader is not None else [text])

    def over(self, budget: int) -> bool:
        """Whether the thinking has spent `budget` tokens (0: no limit) and is still going."""
        return bool(budget) and self.thinking and self.reader is not None and self.reader.thought_deltas >= budget

    def close_thinking(self) -> str:
        """Close the thinking where it is: the answer's text so far and the close, the beginning to go on from."""
        assert self.style is not None
        close = "\n" + self.style.close + "\n\n"
        self.feed(close)
        return "".join(self.raw)

    def finish(self, cut: bool = False) -> None:
        self._keep(self.reader.finish(cut) if self.reader is not None else [])
        if self.thought and self.seconds is None:
            self.seconds = time.perf_counter() - self.started

    def _keep(self, pieces: list[Any]) -> None:
        for piece in pieces:
            if isinstance(piece, Thought):
                self.thought += piece.text
            else:
                if self.thought and self.seconds is None:  # the first answer text closes the thinking
                    self.seconds = time.perf_counter() - self.started
                self.answer += piece

    def saved(self) -> dict[str, Any]:
        """What the chat keeps of the thinking beside the answer (its stats)."""
        if not self.thought:
            return {}
        # Counted as the API counts reasoning_tokens: the deltas (one a token) read while thinking.
        tokens = self.reader.thought_deltas if self.reader is not None else 0
        return {"thinking": self.thought, "thought_s": round(self.seconds or 0.0, 1), "thinking_tokens": tokens}


class Budgeted:
    """An answer's stream that keeps its thinking within `budget` tokens: when they are spent, the answer goes
    on from its text so far with the thinking closed (a forced beginning, as the API's budget does). Its
    reader (the window) feeds `view` each delta before asking for the next event."""

    def __init__(self, submit: Callable[[Any], Stream], request: Any, view: ThinkingView, budget: int) -> None:
        self._submit, self._request, self._view, self._budget = submit, request, view, budget
        self.current = submit(request)

    def __iter__(self) -> Iterator[Event]:
        while True:
            for event in self.current:
                yield event
                if isinstance(event, TextDelta) and self._view.over(self._budget):
                    break
            else:
                return
            self.current.cancel()
            self._budget = 0
            self.current = self._submit(dataclasses.replace(self._request, forced=self._view.close_thinking()))

    @property
    def finished(self) -> bool:
        return self.current.finished

    def cancel(self) -> None:
        self.current.cancel()


def switches(template_source: str, choice: str) -> dict[str, Any]:
    """The template variables for this chat's thinking choice (settings drawer)."""
    return switches_for(thinking_style(template_source), thinking_asked(choice), None)


def with_thinking(message: dict[str, Any], stats: dict[str, Any], template_source: str) -> dict[str, Any]:
    """An earlier answer with its thinking where the template looks for it (it keeps it or leaves it out)."""
    thought = stats.get("thinking")
    if not isinstance(thought, str) or not thought:
        return message
    style = thinking_style(template_source)
    key = "thinking" if style is not None and style.name == "harmony" else "reasoning_content"
    return {**message, key: thought}
