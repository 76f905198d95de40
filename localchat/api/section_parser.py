"""The model's text, read as it streams, into content and tool calls, for the families that write each call
between markers (api/tool_families.py). Same surface as tool_parser.ToolCallParser.

Each call goes out whole (its start and its arguments) the moment its closing marker arrives, so a call
that max_tokens cuts is never half-sent. Text around the calls is content, as written. A call that does
not read (broken JSON, an unknown tool) comes back as content, never as a server error.
"""

from __future__ import annotations

import json

from .markers import Marker, MarkerStream
from .tool_families import SectionFormat
from .tool_xml import CallUnreadable, Schemas
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
        self._in_section = False
        self._out: list[Piece] = []

    def feed(self, text: str) -> list[Piece]:
        self._out = []
        for item in self._stream.feed(text):
            self._item(item)
        return self._merged()

    def finish(self, cut: bool = False) -> list[Piece]:
        """The end of the answer (`cut`: by max_tokens, when only the whole calls of the open one count)."""
        self._out = []
        for item in self._stream.finish():
            self._item(item)
        if self._call is not None:
            # A closer the call ended with closes it after all (a value left without its own closing tag); a
            # family without closers ends its last call with the answer.
            if self._call[-1] in self.fmt.closes and isinstance(self._call[-1], Marker) and not cut:
                self._call.pop()
            self._close(cut)
        return self._merged()

    def _item(self, item: str) -> None:
        fmt, marker = self.fmt, isinstance(item, Marker)
        if self._call is None:
            if marker and item in fmt.opens:
                self._call = [item]
            elif marker and item in fmt.section:
                self._in_section = item == fmt.section[0]
            elif not marker and not self._in_section:  # text inside a section but outside calls is noise
                self._out.append(str(item))
            return
        if marker and item in fmt.closes and fmt.whole("".join(self._call)):
            self._close()
        elif marker and item in fmt.opens and not fmt.closes and fmt.whole("".join(self._call)):
            self._close()
            self._call = [item]
        elif marker and item in fmt.section and not fmt.closes:
            self._close()
        else:
            self._call.append(item)

    def _close(self, cut: bool = False) -> None:
        written = "".join(self._call or [])
        self._call = None
        try:
            found = self.fmt.read(written, self.schemas, cut)
            for name, _ in found:
                if name not in self.names:
                    known = ", ".join(sorted(self.names)) or "none"
                    raise CallUnreadable(f"it names the tool {name!r}, which the request does not offer ({known})")
        except CallUnreadable as exc:
            if not cut:  # a call cut short is no call, and no content either
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
