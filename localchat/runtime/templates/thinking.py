"""Thinking models: whether and how a model thinks (from its chat template), and its streamed text split
into thinking and answer.

A thinking model writes its reasoning between two markers before the answer: `<think>`…`</think>`
(Qwen3, QwQ, DeepSeek-R1 and V3.1, GLM 4.5+, Kimi K2, SmolLM3), `[THINK]`…`[/THINK]` (Magistral,
Ministral reasoning), `<|channel>thought`…`<channel|>` (Gemma 4), `<|open|>think<|sep|>`…`<|close|>think<|sep|>`
(Kimi K3's XTML, whose answer then sits in a `response` element of its own). Some templates open the block
in the prompt (Qwen3-2507-Thinking, DeepSeek-R1), so the answer carries only the closing marker. gpt-oss
writes harmony channels instead (api/harmony.py reads those); its style here only names its switch.

The split never lets a marker, or the start of one, into either side: text that could still become a
marker is held back until it does or cannot. (A marker the model writes again in its answer is dropped
from the answer's content by api/reader.py, after the tool calls are read: inside an argument it is text.) The reasoning is trimmed at both ends, and the answer's
leading white space after the thinking goes, as every engine's parser does.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Iterable


@dataclass(frozen=True, slots=True)
class ThinkingStyle:
    """How one family marks its thinking, and the switch its template reads (None: it has none)."""

    name: str  # think | mistral | gemma4 | xtml | harmony
    open: str
    close: str
    switch: str | None = None  # the template variable: enable_thinking, thinking (on/off) or reasoning_effort
    levels: tuple[str, ...] = ()  # the values of a level switch (gpt-oss: low, medium, high)
    detect: str = ""  # what in the template picks this style (none: its close written out)
    # The marker that opens the answer, where a family writes one: written while thinking it ends the thinking
    # (the model skipped the close), and a prompt that ends with it has the thinking off.
    answer: str = ""
    frame: tuple[str, ...] = ()  # markers around the answer, never its content

    @property
    def markers(self) -> tuple[str, ...]:
        """Every marker of the style: none of them is ever an answer's content."""
        return tuple(dict.fromkeys(filter(None, (self.open, self.close, self.answer, *self.frame))))


HARMONY = ThinkingStyle("harmony", "<|channel|>analysis<|message|>", "<|end|>", "reasoning_effort",
                        ("low", "medium", "high"))
# Kimi K3 writes XTML elements (its template builds them from its open_tag and close_tag macros).
XTML = ThinkingStyle("xtml", "<|open|>think<|sep|>", "<|close|>think<|sep|>", "thinking", detect="open_tag('think')",
                     answer="<|open|>response<|sep|>", frame=("<|close|>response<|sep|>", "<|close|>message<|sep|>"))
STYLES = (
    XTML,
    ThinkingStyle("mistral", "[THINK]", "[/THINK]"),
    ThinkingStyle("gemma4", "<|channel>thought", "<channel|>", "enable_thinking"),
    ThinkingStyle("think", "<think>", "</think>", "enable_thinking"),
)


def thinking_style(template_source: str) -> ThinkingStyle | None:
    """The way the model behind this template thinks; None for a model that does not."""
    if "<|channel|>" in template_source and "analysis" in template_source:
        return HARMONY
    for style in STYLES:
        if (style.detect or style.close) in template_source:
            switch = style.switch if style.switch and style.switch in template_source else None
            return dataclasses.replace(style, switch=switch)
    return None


def opened_by_prompt(style: ThinkingStyle | None, prompt: str) -> bool:
    """Whether the rendered prompt ends inside an open thinking block (the answer starts thinking)."""
    return style is not None and style.name != "harmony" and prompt.rstrip().endswith(style.open)


def closed_by_prompt(style: ThinkingStyle | None, prompt: str) -> bool:
    """Whether the prompt wrote an empty block itself (thinking switched off: `<think>\\n\\n</think>`), or
    opened the answer with no thinking before it."""
    if style is None or style.name == "harmony":
        return False
    end = prompt.rstrip()
    return end.endswith(style.close) or bool(style.answer) and end.endswith(style.answer)


@dataclass(slots=True)
class Thought:
    """A piece of the model's thinking (the answer's pieces are plain str)."""

    text: str


_START, _THINKING, _AFTER, _ANSWER = range(4)


class ThinkingSplitter:
    """Feed it the answer's text as it streams; it returns Thought pieces and answer text (str)."""

    def __init__(self, style: ThinkingStyle, opened: bool = False, calls: str = "") -> None:
        """`calls`: the marker that opens the family's tool calls, which ends a thinking block the prompt
        opened and the model never closed (the calls then are the answer's, read as such)."""
        self.style = style
        self._ends = tuple(filter(None, (style.close, style.answer, calls if opened else "")))
        self._calls = calls
        self._state = _THINKING if opened else _START
        self._held = ""  # text that may still be (the start of) a marker, or white space at an edge
        self._began = False  # the reasoning has had a character that is not white space
        self.thought_chars = 0

    @property
    def thinking(self) -> bool:
        """Whether the text so far ends inside the thinking (a thinking budget closes it)."""
        return self._state == _THINKING

    def feed(self, text: str) -> list[Thought | str]:
        out: list[Thought | str] = []
        self._held += text
        while self._held:
            if not self._step(out):
                break
        return merged(out)

    def finish(self) -> list[Thought | str]:
        """The end of the text: what was held back is what it is (a cut marker is dropped: it was never
        written whole)."""
        out: list[Thought | str] = []
        held, self._held = self._held, ""
        if self._state == _START and not self.style.open.startswith(held.lstrip()):
            out.append(held)
        elif self._state == _ANSWER and not _is_marker_start(held, (self.style.open, self.style.close)):
            out.append(held)
        elif self._state == _THINKING and held.strip() and not _is_marker_start(held.strip(), self._ends):
            self._thought(out, held.rstrip())
        return merged(out)

    # Each step consumes what it can from _held; False: it needs more text.
    def _step(self, out: list[Thought | str]) -> bool:
        held = self._held
        if self._state == _START:
            stripped = held.lstrip()
            if stripped.startswith(self.style.open):
                self._held = stripped[len(self.style.open):]
                self._state = _THINKING
                return True
            if self.style.open.startswith(stripped):
                return False  # white space, or the open marker's first characters
            self._state = _ANSWER  # no thinking in this answer; its text goes out as written
            return True
        if self._state == _THINKING:
            at, end = _first(held, self._ends)
            if at >= 0:
                self._thought(out, held[:at].rstrip())
                kept = self._calls and held.startswith(self._calls, at)  # the calls' marker is the answer's
                self._held, self._state = held[at if kept else end:], _AFTER
                return True
            keep = max(_partial_suffix(held, end) for end in self._ends)
            body = held[:len(held) - keep]
            edge = len(body) - len(body.rstrip())  # white space that may end the reasoning: held
            self._thought(out, body[:len(body) - edge])
            self._held = held[len(body) - edge:]
            return False
        if self._state == _AFTER:
            stripped = held.lstrip()
            if not stripped:
                self._held = ""
                return False
            self._held, self._state = stripped, _ANSWER
            return True
        out.append(held)
        self._held = ""
        return False

    def _thought(self, out: list[Thought | str], text: str) -> None:
        if not self._began:
            text = text.lstrip()
            self._began = bool(text)
        if text:
            self.thought_chars += len(text)
            out.append(Thought(text))


def _first(text: str, markers: tuple[str, ...]) -> tuple[int, int]:
    """Where the earliest of `markers` in `text` starts and ends; (-1, -1) when none is there."""
    found = [(at, at + len(m)) for m in markers if (at := text.find(m)) >= 0]
    return min(found) if found else (-1, -1)


def _is_marker_start(text: str, markers: Iterable[str]) -> bool:
    return bool(text) and any(m.startswith(text) for m in markers)


def _partial_suffix(text: str, marker: str) -> int:
    """The length of the longest end of `text` that begins `marker`."""
    for n in range(min(len(text), len(marker) - 1), 0, -1):
        if marker.startswith(text[-n:]):
            return n
    return 0


def merged(pieces: list[Any]) -> list[Any]:
    """Pieces of an answer with neighbouring thoughts and neighbouring texts joined, empty texts dropped
    (other pieces, such as a tool call's parts, pass as they are)."""
    joined: list[Any] = []
    for piece in pieces:
        last = joined[-1] if joined else None
        if isinstance(piece, Thought) and isinstance(last, Thought):
            last.text += piece.text
        elif isinstance(piece, str) and isinstance(last, str):
            joined[-1] = last + piece
        elif not (isinstance(piece, str) and not piece):
            joined.append(piece)
    return joined
