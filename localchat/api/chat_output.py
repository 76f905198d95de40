"""One choice's output in OpenAI's shapes: content or tool calls, and logprobs, whole or as deltas."""

from __future__ import annotations

from typing import Any

from .tool_parser import ArgsDelta, CallStart, Piece, ToolCallParser


class ChoiceOutput:
    """Feeds the engine's text through the tool-call parser (when the request has tools) and shapes it."""

    def __init__(self, chat: bool, parser: ToolCallParser | None = None) -> None:
        self.chat = chat
        self.parser = parser
        self.text: list[str] = []  # content
        self.logprobs: list[Any] = []  # every TokenLogprob so far
        self.offset = 0  # characters of text so far (completions' text_offset)

    def feed(self, text: str) -> list[Piece]:
        pieces = self.parser.feed(text) if self.parser else [text]
        self.text += [p for p in pieces if isinstance(p, str)]
        return pieces

    def finish(self) -> list[Piece]:
        """What the parser still held; raises ToolCallError on an unfinished or broken call."""
        pieces = self.parser.finish() if self.parser else []
        self.text += [p for p in pieces if isinstance(p, str)]
        return pieces

    def finish_reason(self, reason: str) -> str:
        return "tool_calls" if self.parser is not None and self.parser.calls else reason

    def message(self) -> dict[str, Any]:
        """The whole assistant message."""
        content = "".join(self.text)
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if self.parser is not None and self.parser.calls:
            message["content"] = content or None
            message["tool_calls"] = [{"id": c.id, "type": "function",
                                      "function": {"name": c.name, "arguments": c.arguments}}
                                     for c in self.parser.calls]
        return message

    def delta(self, pieces: list[Piece]) -> dict[str, Any]:
        """A chat chunk's delta for `pieces` (content, call openings, argument text)."""
        delta: dict[str, Any] = {}
        content = "".join(p for p in pieces if isinstance(p, str))
        if content:
            delta["content"] = content
        calls = []
        for piece in pieces:
            if isinstance(piece, CallStart):
                calls.append({"index": piece.index, "id": piece.id, "type": "function",
                              "function": {"name": piece.name, "arguments": ""}})
            elif isinstance(piece, ArgsDelta):
                calls.append({"index": piece.index, "function": {"arguments": piece.text}})
        if calls:
            delta["tool_calls"] = calls
        return delta

    # -- logprobs ----------------------------------------------------------------------------

    def add_logprobs(self, tokens: list[Any], text: str) -> Any:
        """The logprobs object for one delta's tokens (None when the request asked for none)."""
        if not tokens:
            return None
        self.logprobs += tokens
        shaped = chat_logprobs(tokens) if self.chat else text_logprobs(tokens, self.offset)
        self.offset += len(text)
        return shaped

    def all_logprobs(self) -> Any:
        if not self.logprobs:
            return None
        return chat_logprobs(self.logprobs) if self.chat else text_logprobs(self.logprobs, 0)


def chat_logprobs(tokens: list[Any]) -> dict[str, Any]:
    """Chat completions' shape: content = [{token, logprob, bytes, top_logprobs}]."""
    return {"content": [{"token": t.token, "logprob": t.logprob, "bytes": list(t.bytes),
                         "top_logprobs": [{"token": s, "logprob": lp, "bytes": list(b)} for s, b, lp in t.top]}
                        for t in tokens], "refusal": None}


def text_logprobs(tokens: list[Any], offset: int) -> dict[str, Any]:
    """Text completions' shape: parallel lists of tokens, their logprobs, alternatives and offsets."""
    offsets = []
    for t in tokens:
        offsets.append(offset)
        offset += len(t.token)
    return {"tokens": [t.token for t in tokens], "token_logprobs": [t.logprob for t in tokens],
            "top_logprobs": [{s: lp for s, _, lp in t.top} for t in tokens], "text_offset": offsets}
