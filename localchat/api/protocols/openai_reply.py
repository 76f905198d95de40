"""An answer in OpenAI's shapes: chat completions and text completions, whole or as server-sent chunks
(content or tool calls, logprobs, usage, localchat's own numbers)."""

from __future__ import annotations

import secrets
import time
from typing import Any, AsyncIterator

from ...errors import LocalchatError
from ...runtime.events import Stats
from ...runtime.templates.thinking import Thought
from ..reader import Piece
from ..service import Answer, Delta, End
from ..tool_parser import ArgsDelta, CallStart
from ..wire import error_body, sse


class Reply:
    """One response's identity (id, created, model) and its shape for chat or text completions."""

    def __init__(self, chat: bool, model: str) -> None:
        self.chat = chat
        self.id = ("chatcmpl-" if chat else "cmpl-") + secrets.token_hex(12)
        self.created = int(time.time())
        self.model = model
        self.offset = 0  # characters of text with logprobs so far (completions' text_offset)

    def _envelope(self, obj: str, choices: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model,
                "system_fingerprint": "localchat", "choices": choices, **extra}

    def _logprobs(self, delta: Delta) -> Any:
        """The logprobs object for one delta's tokens (None when the request asked for none)."""
        if not delta.logprobs:
            return None
        shaped = chat_logprobs(delta.logprobs) if self.chat else text_logprobs(delta.logprobs, self.offset)
        self.offset += len(delta.text)
        return shaped

    async def whole(self, answer: Answer) -> dict[str, Any]:
        """The whole answer as one OpenAI response object."""
        async for event in answer.events():
            if isinstance(event, End):
                logprobs = None
                if answer.logprobs:
                    logprobs = chat_logprobs(answer.logprobs) if self.chat else text_logprobs(answer.logprobs, 0)
                choice: dict[str, Any] = {"index": 0, "finish_reason": event.finish_reason, "logprobs": logprobs}
                if self.chat:
                    choice["message"] = message(answer)
                else:
                    choice["text"] = "".join(answer.content)
                obj = "chat.completion" if self.chat else "text_completion"
                return self._envelope(obj, [choice], usage=usage(event.stats, event.reasoning_tokens),
                                      x_localchat=extras(event.stats, answer.notes))
        raise AssertionError("an answer's events end with End")

    async def chunks(self, answer: Answer, include_usage: bool) -> AsyncIterator[bytes]:
        """The answer as server-sent events, ending with [DONE]."""
        obj = "chat.completion.chunk" if self.chat else "text_completion"
        extra: dict[str, Any] = {"usage": None} if include_usage else {}

        def chunk(pieces: list[Piece], finish: str | None = None, logprobs: Any = None, **more: Any) -> bytes:
            if self.chat:
                choice = {"index": 0, "delta": delta_of(pieces), "finish_reason": finish, "logprobs": logprobs}
            else:
                text = "".join(p for p in pieces if isinstance(p, str))
                choice = {"index": 0, "text": text, "finish_reason": finish, "logprobs": logprobs}
            return sse(self._envelope(obj, [choice], **{**extra, **more}))

        if self.chat:  # OpenAI opens with the role, so clients can start the message at once
            yield sse(self._envelope(obj, [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                            "finish_reason": None, "logprobs": None}], **extra))
        try:
            async for event in answer.events():
                if isinstance(event, Delta):
                    yield chunk(event.pieces, logprobs=self._logprobs(event))
                elif isinstance(event, End):
                    yield chunk([], event.finish_reason, x_localchat=extras(event.stats, answer.notes))
                    if include_usage:
                        yield sse(self._envelope(obj, [], usage=usage(event.stats, event.reasoning_tokens)))
        except LocalchatError as exc:
            # Headers are gone already: the error travels in the stream, as OpenAI's does.
            yield sse(error_body(str(exc), "server_error", None, "engine_error"))
            return
        yield b"data: [DONE]\n\n"


def message(answer: Answer) -> dict[str, Any]:
    """The whole assistant message: content, or tool calls (content None when there is none), and a thinking
    model's thinking in `reasoning_content` (as llama.cpp's server, vLLM and DeepSeek's API return it)."""
    content = "".join(answer.content)
    out: dict[str, Any] = {"role": "assistant", "content": content}
    if answer.reasoning:
        out["reasoning_content"] = "".join(answer.reasoning)
    if answer.calls:
        out["content"] = content or None
        out["tool_calls"] = [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                             for c in answer.calls]
    return out


def delta_of(pieces: list[Piece]) -> dict[str, Any]:
    """A chat chunk's delta for `pieces` (content, call openings, argument text)."""
    delta: dict[str, Any] = {}
    reasoning = "".join(p.text for p in pieces if isinstance(p, Thought))
    if reasoning:
        delta["reasoning_content"] = reasoning
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


def usage(stats: Stats | None, reasoning_tokens: int = 0) -> dict[str, Any]:
    prompt = stats.prompt_tokens if stats else 0
    completion = stats.completion_tokens if stats else 0
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": stats.cached_tokens if stats else 0},
            "completion_tokens_details": {"reasoning_tokens": reasoning_tokens}}


def extras(stats: Stats | None, notes: list[str] | None = None) -> dict[str, Any] | None:
    """localchat's own numbers (and notes of what it did unasked), in a field clients of other servers ignore."""
    own = stats.to_dict() if stats is not None else None
    return {**(own or {}), "notes": notes} if notes else own
