"""One answer's text read as it streams: thinking apart, then content and tool calls in the model's own form.

Which readers an answer needs follows from the model's template (its thinking style, its tool-call
family) and from the rendered prompt (a thinking block the prompt opened, or closed empty):
`reader_for` builds them, `OutputReader` runs them in order (thinking first; the calls are read
only from the answer after it, so a call drafted while thinking is never made).
"""

from __future__ import annotations

from typing import Any, Union

from ..runtime.templates.thinking import ThinkingSplitter, ThinkingStyle, Thought, closed_by_prompt, opened_by_prompt
from .harmony import HarmonyParser
from .markers import Marker, MarkerStream
from .pythonic import PythonicParser
from .section_parser import SectionParser
from .tool_families import SectionFormat
from .tool_formats import PYTHONIC, ToolFormat
from .tool_parser import Piece, ToolCall, ToolCallParser

Piece = Union[Piece, Thought]  # noqa: F811  (an answer's pieces: the tool parser's, and thinking)
CallParser = Union[ToolCallParser, SectionParser, HarmonyParser, PythonicParser]


class OutputReader:
    """Feed it the answer's text deltas; get Thought pieces, content (str) and tool-call pieces."""

    def __init__(self, splitter: ThinkingSplitter | None = None, calls: CallParser | None = None,
                 style: ThinkingStyle | None = None) -> None:
        self.splitter = splitter
        self.parser = calls
        self.thought_deltas = 0  # the deltas (one a token, as the engine streams them) read while thinking
        # A thinking marker the model writes again in its answer (a second close), or one of the markers its
        # answer is framed by, is never content.
        style = style or (splitter.style if splitter else None)
        self._stray = MarkerStream(style.markers) if style else None

    @property
    def calls(self) -> list[ToolCall]:
        return self.parser.calls if self.parser is not None else []

    @property
    def broken(self) -> str | None:
        return getattr(self.parser, "broken", None)

    @property
    def thinking(self) -> bool:
        """Whether the text so far ends inside the thinking."""
        if isinstance(self.parser, HarmonyParser):
            return self.parser.thinking
        return self.splitter is not None and self.splitter.thinking

    def feed(self, text: str) -> list[Piece]:
        was_thinking = self.thinking
        pieces = self._after_thinking(self.splitter.feed(text) if self.splitter else [text], False)
        if was_thinking or any(isinstance(p, Thought) for p in pieces):
            self.thought_deltas += 1
        return pieces

    def finish(self, cut: bool = False) -> list[Piece]:
        """The end of the answer (`cut`: by max_tokens)."""
        return self._after_thinking(self.splitter.finish() if self.splitter else [], True, cut)

    def _after_thinking(self, pieces: list[Any], last: bool, cut: bool = False) -> list[Piece]:
        out: list[Piece] = []
        for piece in pieces:
            if isinstance(piece, Thought):
                out.append(piece)
            else:
                out += self.parser.feed(piece) if self.parser is not None else [piece]
        if last and self.parser is not None:
            out += self.parser.finish(cut)
        return self._without_stray(out, last)

    def _without_stray(self, pieces: list[Piece], last: bool) -> list[Piece]:
        if self._stray is None:
            return [p for p in pieces if not (isinstance(p, str) and not p)]
        out: list[Piece] = []
        for piece in pieces:
            if isinstance(piece, str):
                out += [t for t in self._stray.feed(piece) if not isinstance(t, Marker) and t]
            else:
                out.append(piece)
        if last:  # an answer cut inside a marker: the part of it written is no text either
            out += [t for t in self._stray.finish() if not any(m.startswith(t) for m in self._stray.markers)]
        return _joined(out)


def _joined(pieces: list[Piece]) -> list[Piece]:
    merged: list[Piece] = []
    for piece in pieces:
        if isinstance(piece, str) and merged and isinstance(merged[-1], str):
            merged[-1] += piece
        else:
            merged.append(piece)
    return merged


def reader_for(style: ThinkingStyle | None, prompt: str, fmt: ToolFormat | SectionFormat | None,
               names: set[str], schemas: dict[str, dict[str, Any]] | None = None) -> OutputReader | None:
    """The reader an answer to `prompt` needs (None: its text is all content, as written)."""
    if style is not None and style.name == "harmony":
        return OutputReader(None, HarmonyParser(names))
    splitter = None
    if style is not None and not closed_by_prompt(style, prompt):
        # A family's calls that open with a marker of their own (not `[` or `{"name"`, which a thought may
        # hold as text) end a thinking block the prompt opened.
        calls = fmt.trigger if names and fmt is not None and len(fmt.trigger) > 1 and fmt.trigger[0] != "{" else ""
        splitter = ThinkingSplitter(style, opened_by_prompt(style, prompt), calls)
    parser: CallParser | None = None
    if names and isinstance(fmt, SectionFormat):
        parser = SectionParser(fmt, names, schemas)
    elif names and fmt is PYTHONIC:
        parser = PythonicParser(names)
    elif names and fmt is not None:
        parser = ToolCallParser(fmt, names)
    if splitter is None and parser is None and not (style is not None and style.frame):
        return None
    return OutputReader(splitter, parser, style)
