"""Llama 4's pythonic tool calls, read as they stream: a reply that is a Python list of calls,
`[get_weather(city='LA', metric='C'), get_time()]`, maybe between `<|python_start|>` and `<|python_end|>`.
Same surface as tool_parser.ToolCallParser.

Only a reply that opens with the list is calls (Llama 4 never writes text beside them); any other reply is
content as written. The list goes out the moment its `]` closes, every call whole, so a list that
max_tokens cuts sends none. It is read with Python's own parser (`ast`, no code is run): a value must be a
literal (a string, a number, True/False/None or JSON's true/false/null, a list or a dict of them). A list
that does not read (an unknown tool, a value that is not a literal) goes back as content, never as a
server error.
"""

from __future__ import annotations

import ast
import json
import math
from typing import Any

from .tool_parser import ArgsDelta, CallStart, Piece, ToolCall, new_call_id

START, END = "<|python_start|>", "<|python_end|>"
LITERAL_NAMES = {"True": True, "False": False, "None": None, "true": True, "false": False, "null": None}
_UNDECIDED, _CONTENT, _LIST, _AFTER = range(4)


class CallsUnreadable(ValueError):
    """The list is not a list of calls of offered tools."""


class PythonicParser:
    """Feed it text deltas; it returns content and call pieces. `calls` holds the finished calls."""

    def __init__(self, names: set[str]) -> None:
        self.names = names
        self.calls: list[ToolCall] = []
        self.broken: str | None = None
        self._state = _UNDECIDED
        self._text = ""  # the reply so far while undecided; the list as written once it opened
        self._depth = 0
        self._quote = ""  # the quote of the string the list is inside ("" outside strings)
        self._escaped = False

    def feed(self, text: str) -> list[Piece]:
        out: list[Piece] = []
        for char in text:
            self._char(char, out)
        if self._state == _CONTENT and self._text:
            out.append(self._text)
            self._text = ""
        return _joined(out)

    def finish(self, cut: bool = False) -> list[Piece]:
        """The end of the answer (`cut`: by max_tokens, when a list still open is no call and no content)."""
        out: list[Piece] = []
        if self._state == _LIST and not cut:
            self.broken = "the model's tool calls did not close"
            out.append(self._text)
        elif self._state == _UNDECIDED and self._text.strip() and not START.startswith(self._text.strip()):
            out.append(self._text)
        elif self._state == _AFTER and self._text.strip() and not END.startswith(self._text.strip()):
            out.append(self._text.strip())
        self._text = ""
        return _joined(out)

    def _char(self, char: str, out: list[Piece]) -> None:
        if self._state == _LIST:
            self._scan(char, out)
            return
        self._text += char
        if self._state == _UNDECIDED:
            head = self._text.lstrip().removeprefix(START).lstrip()
            if head.startswith("[") and head[1:].lstrip()[:1].isidentifier():
                self._state, self._text = _LIST, ""
                for c in head:
                    self._scan(c, out)
            elif not _begins_calls(self._text):
                self._state = _CONTENT
        elif self._state == _AFTER:
            rest = self._text.strip()
            if rest == END:
                self._text = ""
            elif rest and not END.startswith(rest):
                self._state = _CONTENT  # text after the calls is content, as written

    def _scan(self, char: str, out: list[Piece]) -> None:
        self._text += char
        if self._quote:
            if self._escaped:
                self._escaped = False
            elif char == "\\":
                self._escaped = True
            elif char == self._quote:
                self._quote = ""
            return
        if char in "'\"":
            self._quote = char
        elif char in "([{":
            self._depth += 1
        elif char in ")]}":
            self._depth -= 1
            if self._depth == 0:
                self._close(out)

    def _close(self, out: list[Piece]) -> None:
        written, self._text, self._state = self._text, "", _AFTER
        try:
            found = read_calls(written, self.names)
        except CallsUnreadable as exc:
            self.broken = f"the model's tool calls could not be read ({exc})"
            out.append(written)
            self._state = _CONTENT
            return
        for name, args in found:
            call = ToolCall(new_call_id(), name, json.dumps(args, ensure_ascii=False))
            out += [CallStart(len(self.calls), call.id, name), ArgsDelta(len(self.calls), call.arguments)]
            self.calls.append(call)


def _begins_calls(text: str) -> bool:
    """Whether `text` (the reply so far) may still become a list of calls: white space, the start marker
    or a part of it, then `[` and a name's first character."""
    head = text.lstrip()
    if START.startswith(head):
        return True
    head = head.removeprefix(START).lstrip()
    if not head:
        return True
    if not head.startswith("["):
        return False
    rest = head[1:].lstrip()
    return not rest or rest[0].isidentifier()


def read_calls(text: str, names: set[str]) -> list[tuple[str, dict[str, Any]]]:
    """`[f(a=1), g()]` as [(name, arguments)]."""
    try:
        tree = ast.parse(text.strip(), mode="eval").body
        if not isinstance(tree, ast.List) or not tree.elts:
            raise CallsUnreadable("it is not a list of calls")
        return [_call(node, names) for node in tree.elts]
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        if isinstance(exc, CallsUnreadable):
            raise
        raise CallsUnreadable("it is not Python") from None


def _call(node: ast.expr, names: set[str]) -> tuple[str, dict[str, Any]]:
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name) or node.args:
        raise CallsUnreadable("each item must be a call with named arguments, name(key=value)")
    name = node.func.id
    if name not in names:
        known = ", ".join(sorted(names)) or "none"
        raise CallsUnreadable(f"it names the tool {name!r}, which the request does not offer ({known})")
    args = {}
    for keyword in node.keywords:
        if keyword.arg is None:
            raise CallsUnreadable("**arguments are not values")
        args[keyword.arg] = _literal(keyword.value)
    return name, args


def _literal(node: ast.expr) -> Any:
    """A value written as a Python (or JSON) literal."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (str, int, float, bool, type(None))):
        if isinstance(node.value, float) and not math.isfinite(node.value):
            raise CallsUnreadable("a number is not finite")
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)) and \
            isinstance(node.operand, ast.Constant) and type(node.operand.value) in (int, float):
        value = _literal(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.Name) and node.id in LITERAL_NAMES:
        return LITERAL_NAMES[node.id]
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_literal(item) for item in node.elts]
    if isinstance(node, ast.Dict) and all(isinstance(k, ast.Constant) and isinstance(k.value, str)
                                          for k in node.keys):
        return {k.value: _literal(v) for k, v in zip(node.keys, node.values)}  # type: ignore[union-attr]
    raise CallsUnreadable("a value is not a literal")


def _joined(pieces: list[Piece]) -> list[Piece]:
    merged: list[Piece] = []
    for piece in pieces:
        if isinstance(piece, str) and merged and isinstance(merged[-1], str):
            merged[-1] += piece
        elif not (isinstance(piece, str) and not piece):
            merged.append(piece)
    return merged
