"""The model's text, read as it streams, into content and OpenAI tool calls (with arguments in pieces).

Text before the format's trigger is content (held back only while it could still be the start of
the trigger). From the trigger on, everything must be call objects and the format's markers. The model's text is
never a server error: a call cut off by max_tokens is left out (the calls that closed before it are
kept, and the answer ends with finish_reason "length"), and a section that is not calls (an unknown
tool, broken JSON, prose among the calls) goes back to the client as content from where it broke.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from typing import Any, Union

from ..errors import EngineError
from .json_values import JSONUnreadable, json_value
from .tool_formats import ToolFormat

ARGS_KEYS = ("arguments", "parameters")  # families differ; either is read back


class ToolCallError(EngineError):
    """The model opened a tool call that cannot be read as one."""


def _read(text: str) -> Any:
    """A JSON text of the model's call, or the ToolCallError that turns its section into content."""
    try:
        return json_value(text)
    except JSONUnreadable as exc:
        raise ToolCallError(f"the model's tool call {exc}; try again.") from None


@dataclass(slots=True)
class CallStart:
    index: int
    id: str
    name: str


@dataclass(slots=True)
class ArgsDelta:
    index: int
    text: str


Piece = Union[str, CallStart, ArgsDelta]  # a str is content


@dataclass(slots=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # JSON text of an object, as OpenAI sends it


def new_call_id() -> str:
    return "call_" + secrets.token_hex(12)


@dataclass(slots=True)
class _Object:
    """Scanner state of the call object being read."""

    chars: list[str] = field(default_factory=list)
    depth: int = 0
    in_string: bool = False
    escaped: bool = False
    string_start: int = -1
    expect_key: bool = True
    key: str | None = None
    await_value: bool = False
    name: str | None = None
    args_start: int = -1  # index in chars of the streamed arguments object
    args_end: int = -1
    started: bool = False  # CallStart sent
    call_id: str = ""
    sent: int = 0  # argument characters sent so far


class ToolCallParser:
    """Feed it text deltas; it returns content and call pieces. `calls` holds the finished calls."""

    def __init__(self, fmt: ToolFormat, names: set[str]) -> None:
        self.fmt = fmt
        self.names = names
        self.calls: list[ToolCall] = []
        self._pending = ""  # content that may be the start of the trigger
        self._in_calls = False
        self._outside = ""  # text between call objects
        self._obj: _Object | None = None
        self._out: list[Piece] = []
        self._section = ""  # the raw text since the last call closed: content again if the section breaks
        self.broken: str | None = None  # why the calls section was read back as content

    def _broke(self, why: str, text: str = "") -> None:
        """The section is not calls after all: its raw text since the last whole call is content."""
        self.broken = why
        self._obj = None
        raw = self._section + text
        # After whole calls the section's markers are theirs, not content; with none, the text comes back as written.
        self._content(_without(raw, self.fmt.markers).strip() if self.calls else raw)
        self._section = self._outside = ""

    def feed(self, text: str) -> list[Piece]:
        self._out = []
        if self.broken is not None:
            self._content(text)
            return self._out
        if not self._in_calls:
            self._pending += text
            at = self._calls_start(self._pending)
            if at < 0:
                keep = max(_partial_suffix(self._pending, m) for m in (self.fmt.trigger, *self.fmt.silent))
                keep = max(keep, self._silent_tail(self._pending))
                self._content(self._silenced(self._pending[:len(self._pending) - keep]))
                self._pending = self._pending[len(self._pending) - keep:]
                return self._out
            self._content(self._silenced(self._pending[:at]))
            text, self._pending, self._in_calls = self._pending[at:], "", True
        for at, char in enumerate(text):
            self._section += char
            try:
                self._scan(char)
            except ToolCallError as exc:
                self._broke(str(exc), text[at + 1:])
                return self._merged()
        self._flush_args()
        return self._merged()

    def finish(self, cut: bool = False) -> list[Piece]:
        """The end of the answer (`cut`: by max_tokens). A call still open is left out when the answer was
        cut; otherwise an unclosed section is content."""
        self._out = []
        if self.broken is not None:
            return self._out
        if not self._in_calls:
            self._content(self._pending)
            self._pending = ""
            return self._out
        rest = self._leftover()
        if self._obj is not None or (rest and any(m.startswith(rest) for m in self.fmt.markers)):
            if not cut:
                self._broke("the model's tool call did not close")
            return self._out
        try:
            self._check_outside()
        except ToolCallError as exc:
            self._broke(str(exc))
            return self._out
        if not self.calls and not cut:
            self._broke("the model opened a tool call but wrote none")
        return self._out

    # -- before the calls -----------------------------------------------------------------------

    def _calls_start(self, text: str) -> int:
        """Where the calls begin: at the trigger, or at the object a silent marker opens (Llama 3's
        <|python_tag|> precedes a call, whatever its object's first key: Meta's own example writes
        {"type": "function", "name": ...}); -1 when not yet."""
        starts = [text.find(self.fmt.trigger)]
        for silent in self.fmt.silent:
            at = text.find(silent)
            while at >= 0:
                rest = text[at + len(silent):]
                if rest.lstrip().startswith("{"):
                    starts.append(len(text) - len(rest.lstrip()))
                    break
                at = text.find(silent, at + 1)
        return min((at for at in starts if at >= 0), default=-1)

    def _silent_tail(self, text: str) -> int:
        """The length of the end of `text` from a silent marker that only white space follows yet (an object
        may come next)."""
        ends = [len(text) - at for silent in self.fmt.silent
                if (at := text.rfind(silent)) >= 0 and not text[at + len(silent):].strip()]
        return max(ends, default=0)

    def _silenced(self, text: str) -> str:
        """Text before the calls without the silent markers (inside an argument they are text)."""
        for silent in self.fmt.silent:
            text = text.replace(silent, "")
        return text

    # -- scanning ------------------------------------------------------------------------------

    def _content(self, text: str) -> None:
        if text:
            self._out.append(text)

    def _scan(self, char: str) -> None:
        obj = self._obj
        if obj is None:
            if char != "{":
                self._outside += char
                return
            self._check_outside()
            obj = self._obj = _Object()
        obj.chars.append(char)
        if obj.in_string:
            if obj.escaped:
                obj.escaped = False
            elif char == "\\":
                obj.escaped = True
            elif char == '"':
                obj.in_string = False
                if obj.depth == 1:
                    self._string_at_top(obj, _read("".join(obj.chars[obj.string_start:])))
            return
        if obj.await_value and not char.isspace():
            obj.await_value = False
            if obj.key in ARGS_KEYS and char == "{" and obj.args_start < 0:
                obj.args_start = len(obj.chars) - 1
        if char == '"':
            obj.in_string, obj.string_start = True, len(obj.chars) - 1
        elif char in "{[":
            obj.depth += 1
        elif char in "}]":
            obj.depth -= 1
            if obj.depth == 1 and obj.args_start >= 0 and obj.args_end < 0:
                obj.args_end = len(obj.chars)
            if obj.depth == 0:
                self._flush_args()
                self._end_object(obj)
        elif obj.depth == 1 and char == ",":
            obj.expect_key = True
        elif obj.depth == 1 and char == ":":
            obj.expect_key, obj.await_value = False, True

    def _string_at_top(self, obj: _Object, text: str) -> None:
        if obj.expect_key:
            obj.key = text
        elif obj.key == "name" and obj.name is None:
            obj.name = text
            self._start(obj)

    def _start(self, obj: _Object) -> None:
        if obj.name not in self.names:
            known = ", ".join(sorted(self.names)) or "none"
            raise ToolCallError(f"the model called a tool named {obj.name!r}, which the request does not "
                                f"offer (offered: {known}).")
        obj.started, obj.call_id = True, new_call_id()
        self._out.append(CallStart(len(self.calls), obj.call_id, obj.name))

    def _flush_args(self) -> None:
        obj = self._obj
        if obj is None or not obj.started or obj.args_start < 0:
            return
        end = obj.args_end if obj.args_end >= 0 else len(obj.chars)
        upto = obj.args_start + obj.sent
        if end > upto:
            self._out.append(ArgsDelta(len(self.calls), "".join(obj.chars[upto:end])))
            obj.sent = end - obj.args_start

    def _end_object(self, obj: _Object) -> None:
        self._obj = None
        raw = "".join(obj.chars)
        call = _read(raw)
        key = next((k for k in ARGS_KEYS if k in call), None)
        args = call.get(key) if key else {}
        if isinstance(args, str):  # some models write the arguments as a JSON string
            try:
                args = json_value(args)
            except JSONUnreadable:
                args = None
        if not isinstance(call.get("name"), str) or not isinstance(args, dict):
            raise ToolCallError("the model's tool call lacks a name or an arguments object; try again.")
        if not obj.started:
            obj.name = call["name"]
            self._start(obj)
        streamed = obj.args_start >= 0 and obj.args_end >= 0
        text = raw[obj.args_start:obj.args_end] if streamed else json.dumps(args, ensure_ascii=False)
        sent = obj.sent if streamed else 0
        if len(text) > sent:
            self._out.append(ArgsDelta(len(self.calls), text[sent:]))
        self.calls.append(ToolCall(obj.call_id, call["name"], text))
        self._section = ""

    def _leftover(self) -> str:
        """The text between call objects that is not the format's markers."""
        return _without(self._outside, self.fmt.markers).strip()

    def _check_outside(self) -> None:
        rest = self._leftover()
        self._outside = ""
        if rest:
            raise ToolCallError(f"the model wrote {rest[:40]!r} among its tool calls, which is not a "
                                "call; try again.")

    def _merged(self) -> list[Piece]:
        merged: list[Piece] = []
        for piece in self._out:
            last = merged[-1] if merged else None
            if isinstance(piece, ArgsDelta) and isinstance(last, ArgsDelta) and last.index == piece.index:
                last.text += piece.text
            elif isinstance(piece, str) and isinstance(last, str):
                merged[-1] = last + piece
            else:
                merged.append(piece)
        return merged


def _without(text: str, markers: tuple[str, ...]) -> str:
    for marker in sorted(markers, key=len, reverse=True):
        text = text.replace(marker, "")
    return text


def _partial_suffix(text: str, marker: str) -> int:
    """The length of the longest end of `text` that begins `marker`."""
    for n in range(min(len(text), len(marker) - 1), 0, -1):
        if marker.startswith(text[-n:]):
            return n
    return 0

