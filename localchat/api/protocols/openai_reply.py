"""An answer in OpenAI's shapes: chat completions and text completions, whole or as server-sent chunks
(content or tool calls, logprobs, usage, localchat's own numbers)."""

from __future__ import annotations

import asyncio
import secrets
import time
from typing import Any, AsyncGenerator, AsyncIterator

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

    def _envelope(self, obj: str, choices: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model,
                "system_fingerprint": "localchat", "choices": choices, **extra}

    def _logprobs(self, delta: Delta, offset: "Offset") -> Any:
        """The logprobs object for one delta's tokens (None when the request asked for none)."""
        if not delta.logprobs:
            return None
        shaped = chat_logprobs(delta.logprobs) if self.chat else text_logprobs(delta.logprobs, offset.chars)
        offset.chars += len(delta.text)
        return shaped

    def _choice(self, answer: Answer, end: End, index: int) -> dict[str, Any]:
        """One whole choice: the message (or text), why it ended, its logprobs."""
        logprobs = None
        if answer.logprobs:
            logprobs = chat_logprobs(answer.logprobs) if self.chat else text_logprobs(answer.logprobs, 0)
        choice: dict[str, Any] = {"index": index, "finish_reason": end.finish_reason, "logprobs": logprobs}
        if self.chat:
            choice["message"] = message(answer)
        else:
            choice["text"] = "".join(answer.content)
        return choice

    async def whole(self, answers: list[Answer]) -> dict[str, Any]:
        """The whole answers (one per choice, `n`) as one OpenAI response object."""
        ends = await asyncio.gather(*(last_event(answer) for answer in answers))
        choices = [self._choice(answer, end, i) for i, (answer, end) in enumerate(zip(answers, ends))]
        obj = "chat.completion" if self.chat else "text_completion"
        return self._envelope(obj, choices, usage=summed_usage(ends),
                              x_localchat=extras(ends[0].stats, answers[0].notes))

    async def chunks(self, answers: list[Answer], include_usage: bool) -> AsyncIterator[bytes]:
        """The answers (one per choice) as server-sent events, their chunks interleaved as they come, ending
        with the usage of them all (when asked) and [DONE]."""
        obj = "chat.completion.chunk" if self.chat else "text_completion"
        extra: dict[str, Any] = {"usage": None} if include_usage else {}
        ends: list[End] = []

        def chunk(index: int, pieces: list[Piece], finish: str | None = None, logprobs: Any = None,
                  **more: Any) -> bytes:
            if self.chat:
                choice = {"index": index, "delta": delta_of(pieces), "finish_reason": finish, "logprobs": logprobs}
            else:
                text = "".join(p for p in pieces if isinstance(p, str))
                choice = {"index": index, "text": text, "finish_reason": finish, "logprobs": logprobs}
            return sse(self._envelope(obj, [choice], **{**extra, **more}))

        async def one(index: int, answer: Answer) -> AsyncGenerator[bytes, None]:
            if self.chat:  # OpenAI opens with the role, so clients can start the message at once
                yield sse(self._envelope(obj, [{"index": index, "delta": {"role": "assistant", "content": ""},
                                                "finish_reason": None, "logprobs": None}], **extra))
            offset = Offset()
            async for event in answer.events():
                if isinstance(event, Delta):
                    yield chunk(index, event.pieces, logprobs=self._logprobs(event, offset))
                elif isinstance(event, End):
                    ends.append(event)
                    yield chunk(index, [], event.finish_reason, x_localchat=extras(event.stats, answer.notes))

        try:
            async for data in interleaved([one(i, answer) for i, answer in enumerate(answers)]):
                yield data
        except LocalchatError as exc:
            # Headers are gone already: the error travels in the stream, as OpenAI's does.
            yield sse(error_body(str(exc), "server_error", None, "engine_error"))
            return
        if include_usage:
            yield sse(self._envelope(obj, [], usage=summed_usage(ends)))
        yield b"data: [DONE]\n\n"


class Offset:
    """Characters of one choice's text with logprobs so far (text completions' text_offset)."""

    def __init__(self) -> None:
        self.chars = 0


async def last_event(answer: Answer) -> End:
    """Read an answer to its end (its text gathers in the Answer)."""
    async for event in answer.events():
        if isinstance(event, End):
            return event
    raise AssertionError("an answer's events end with End")


async def interleaved(streams: list[AsyncGenerator[bytes, None]]) -> AsyncIterator[bytes]:
    """The items of several streams as each comes; an error in one raises here, and leaving (or an error)
    closes them all (an answer's stream cancels its request when closed)."""
    if len(streams) == 1:  # the usual case: no task between the answer and the client
        try:
            async for item in streams[0]:
                yield item
        finally:
            await streams[0].aclose()
        return
    queue: asyncio.Queue[tuple[bytes | None, BaseException | None]] = asyncio.Queue()

    async def pump(stream: AsyncIterator[bytes]) -> None:
        try:
            async for item in stream:
                queue.put_nowait((item, None))
        except Exception as exc:  # re-raised on the reading side
            queue.put_nowait((None, exc))
            return
        queue.put_nowait((None, None))

    tasks = [asyncio.ensure_future(pump(stream)) for stream in streams]
    try:
        running = len(tasks)
        while running:
            item, error = await queue.get()
            if error is not None:
                raise error
            if item is None:
                running -= 1
            else:
                yield item
    finally:
        for task in tasks:
            task.cancel()


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


def summed_usage(ends: list[End]) -> dict[str, Any]:
    """The usage of all choices: the prompt counted once (every choice reads the same one, as OpenAI counts it),
    the completions' tokens summed."""
    total = usage(ends[0].stats, ends[0].reasoning_tokens)
    for end in ends[1:]:
        more = usage(end.stats, end.reasoning_tokens)
        total["completion_tokens"] += more["completion_tokens"]
        total["total_tokens"] += more["completion_tokens"]
        total["completion_tokens_details"]["reasoning_tokens"] += more["completion_tokens_details"]["reasoning_tokens"]
    return total


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
