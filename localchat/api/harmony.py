"""gpt-oss's harmony format, read as it streams: thinking, answer and tool calls by channel.

After the prompt's `<|start|>assistant` the model writes messages, each a header then a body:
`<|channel|>analysis<|message|>…<|end|>` (thinking), `<|start|>assistant<|channel|>final<|message|>…`
(the answer, ended by `<|return|>`, the stop token), and calls on the commentary channel with a
recipient, in the role header or after the channel: `<|start|>assistant to=functions.NAME<|channel|>
commentary json<|message|>{…}` or `<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{…}`,
ended by `<|call|>` (a stop token). Commentary without a recipient is a preamble the user sees: content.
"""

from __future__ import annotations

import json

from ..runtime.templates.thinking import Thought, merged
from .json_values import JSONUnreadable, json_value
from .markers import Marker, MarkerStream
from .tool_parser import ArgsDelta, CallStart, Piece, ToolCall, new_call_id

START, CHANNEL, MESSAGE, END, CALL, RETURN, CONSTRAIN = ("<|start|>", "<|channel|>", "<|message|>", "<|end|>",
                                                         "<|call|>", "<|return|>", "<|constrain|>")
ENDS = (END, CALL, RETURN)
HARMONY_MARKERS = (START, CHANNEL, MESSAGE, END, CALL, RETURN, CONSTRAIN)
MAX_HEADER = 512  # characters of a message header: a longer one is not a header


class HarmonyParser:
    """Feed it text deltas; it returns Thought pieces, content and call pieces. `calls`: the finished calls."""

    def __init__(self, names: set[str]) -> None:
        self.names = names
        self.calls: list[ToolCall] = []
        self.broken: str | None = None
        self._stream = MarkerStream(HARMONY_MARKERS)
        self._header: list[str] | None = []  # the header being read (the prompt ended with one's start)
        self._body: str | None = None  # the body's kind: analysis | final | call
        self._recipient = ""
        self._args: list[str] = []
        self._out: list[Piece] = []
        self.thought_chars = 0

    @property
    def thinking(self) -> bool:
        return self._body == "analysis"

    def feed(self, text: str) -> list[Piece]:
        self._out = []
        for item in self._stream.feed(text):
            self._item(item)
        return merged(self._out)

    def finish(self, cut: bool = False) -> list[Piece]:
        """The end of the answer: a call's body ended by the stop token is whole unless max_tokens cut it."""
        self._out = []
        for item in self._stream.finish():
            self._item(item)
        if self._body == "call" and not cut:
            self._end_call()
        return merged(self._out)

    def _item(self, item: str) -> None:
        if isinstance(item, Marker) and item in (START, CHANNEL) and self._header is None:
            if self._body == "call":
                self._end_call()
            self._header, self._body = [], None
        if self._header is not None:
            if isinstance(item, Marker) and item == MESSAGE:
                self._open_body("".join(self._header))
            elif sum(map(len, self._header)) < MAX_HEADER:
                self._header.append(item)
            return
        if isinstance(item, Marker) and item in ENDS:
            if self._body == "call":
                self._end_call()
            self._body = None
            return
        if isinstance(item, Marker):
            return  # a stray marker inside a body is never text
        if self._body == "analysis":
            self.thought_chars += len(item)
            self._out.append(Thought(item))
        elif self._body == "final":
            self._out.append(item)
        elif self._body == "call":
            self._args.append(item)

    def _open_body(self, header: str) -> None:
        self._header = None
        channel = header.partition(CHANNEL)[2].split(CONSTRAIN)[0].split()
        recipient = next((w[len("to="):] for w in header.replace(CHANNEL, " ").split() if w.startswith("to=")), "")
        kind = channel[0] if channel else ""
        if recipient:
            self._body, self._recipient, self._args = "call", recipient.split("<|")[0], []
        elif kind == "analysis":
            self._body = "analysis"
        else:  # final, or a commentary preamble
            self._body = "final"

    def _end_call(self) -> None:
        self._body = None
        name = self._recipient[len("functions."):] if self._recipient.startswith("functions.") else self._recipient
        raw = "".join(self._args).strip()
        try:
            args = json_value(raw) if raw else {}
        except JSONUnreadable:
            args = None
        if name not in self.names or not isinstance(args, dict):
            self.broken = f"the model's call of {name!r} could not be read"
            return
        call = ToolCall(new_call_id(), name, json.dumps(args, ensure_ascii=False))
        self._out += [CallStart(len(self.calls), call.id, name), ArgsDelta(len(self.calls), call.arguments)]
        self.calls.append(call)
