"""The model's text, read as it streams, into content and tool calls, for the families that write each call
between markers (api/tool_families.py). Same surface as tool_parser.ToolCallParser.

Each call goes out whole (its start and its arguments) the moment its closing marker arrives, so a call
that max_tokens cuts is never half-sent. Text around the calls is content, as written. A call that does
not read (broken JSON, an unknown tool) comes back as content, never as a server error.
"""

from __future__ import annotations

import json

from .markers import Marker, MarkerStream
from .tool_families import CallUnreadable, Schemas, SectionFormat
from .tool_parser import ArgsDelta, CallStart, Piece, ToolCall, new_call_id


class SectionParser:
    """Feed it text deltas; it returns content and call pieces. `calls` holds the finished calls."""

    def __init__(self, fmt: SectionFormat, names: set[str], schemas: Schemas | None = None) -> None:
        self.fmt = fmt
        self.names = names
        self.schemas = schemas or {}
        self.calls: list[ToolCall] = []
        self.broken: str | None = None
        self._stream = MarkerStream(fmt.markers)
        self._call: list[str] | None = None  # the open call's text and markers, as written
        self._out: list[Piece] = []

    def feed(self, text: str) -> list[Piece]:
        self._out = []
        for item in self._stream.feed(text):
            self._item(item)
        return self._merged()

    def finish(self, cut: bool = False) -> list[Piece]:
        """The end of the answer (`cut`: by max_tokens, when a call still open is left out)."""
        self._out = []
        for item in self._stream.finish():
            self._item(item)
        if self._call is not None:
            if cut:
                self._call = None
            else:  # a family without a closing marker ends its last call with the answer
                self._close()
        return self._merged()

    def _item(self, item: str) -> None:
        fmt = self.fmt
        if self._call is None:
            if isinstance(item, Marker) and item == fmt.call_open:
                self._call = [item]
            elif not isinstance(item, Marker) or item not in (fmt.section_open, fmt.section_close, fmt.call_close):
                self._out.append(str(item))
            return
        if isinstance(item, Marker) and item == fmt.call_close:
            self._call.append(item)
            self._close()
        elif isinstance(item, Marker) and item == fmt.call_open and fmt.call_close is None:
            self._close()
            self._call = [item]
        elif isinstance(item, Marker) and item == fmt.section_close and fmt.call_close is None:
            self._close()
        else:
            self._call.append(item)

    def _close(self) -> None:
        written = "".join(self._call or [])
        self._call = None
        body = written[len(self.fmt.call_open):]
        if self.fmt.call_close and body.endswith(self.fmt.call_close):
            body = body[:-len(self.fmt.call_close)]
        try:
            found = self.fmt.read(body, self.schemas)
            for name, _ in found:
                if name not in self.names:
                    known = ", ".join(sorted(self.names)) or "none"
                    raise CallUnreadable(f"it names the tool {name!r}, which the request does not offer ({known})")
        except CallUnreadable as exc:
            self.broken = f"the model's tool call could not be read ({exc})"
            self._out.append(written)
            return
        for name, args in found:
            call = ToolCall(new_call_id(), name, json.dumps(args, ensure_ascii=False))
            self._out += [CallStart(len(self.calls), call.id, name), ArgsDelta(len(self.calls), call.arguments)]
            self.calls.append(call)

    def _merged(self) -> list[Piece]:
        merged: list[Piece] = []
        for piece in self._out:
            if isinstance(piece, str) and merged and isinstance(merged[-1], str):
                merged[-1] += piece
            elif not (isinstance(piece, str) and not piece):
                merged.append(piece)
        return merged
