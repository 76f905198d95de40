"""An answer as OpenAI's Responses API shapes it: a response object whose output is items (a message with
output_text, function calls), whole or as the typed event stream (response.created, ….output_item.added,
….output_text.delta, ….function_call_arguments.delta, …, response.completed); stored when asked to be.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import json
import secrets
import time
from typing import Any, AsyncIterator, Union

from ...errors import LocalchatError
from ...runtime.events import Stats, TokenLogprob
from ...runtime.templates.thinking import Thought
from ..response_store import stored_responses
from ..service import Answer, Delta, End
from ..tool_parser import ArgsDelta, CallStart
from .openai_reply import chat_logprobs, extras
from .responses_mcp import McpEvent, ToolLoop

MEDIA_TYPE = "text/event-stream"
Event = tuple[str, dict[str, Any]]  # a stream event's type and its fields
Reply = Union[Answer, ToolLoop]  # one answer, or the answers of a tool loop read as one


def _logprobs(tokens: list[TokenLogprob]) -> list[dict[str, Any]]:
    return chat_logprobs(tokens)["content"] if tokens else []


def usage(stats: Stats | None, reasoning_tokens: int = 0) -> dict[str, Any]:
    prompt = stats.prompt_tokens if stats else 0
    completion = stats.completion_tokens if stats else 0
    return {"input_tokens": prompt, "input_tokens_details": {"cached_tokens": stats.cached_tokens if stats else 0},
            "output_tokens": completion, "output_tokens_details": {"reasoning_tokens": reasoning_tokens},
            "total_tokens": prompt + completion}


class _Items:
    """The output items, built as the answer's pieces arrive; each step returns the stream events it makes."""

    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []
        self.open: dict[str, Any] | None = None  # the item being written

    def _event_ids(self) -> dict[str, Any]:
        return {"item_id": self.open["id"], "output_index": len(self.items) - 1} if self.open else {}

    def _begin(self, item: dict[str, Any]) -> list[Event]:
        events = self.close("completed")
        self.items.append(item)
        self.open = item
        events.append(("response.output_item.added",
                       {"output_index": len(self.items) - 1, "item": copy.deepcopy(item)}))
        return events

    def text(self, text: str, logprobs: list[TokenLogprob]) -> list[Event]:
        events: list[Event] = []
        if self.open is None or self.open["type"] != "message":
            events += self._begin({"id": "msg_" + secrets.token_hex(12), "type": "message", "status": "in_progress",
                                   "role": "assistant", "content": []})
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            events.append(("response.content_part.added",
                           {**self._event_ids(), "content_index": 0, "part": copy.deepcopy(part)}))
            self.open["content"].append(part)
        part, shaped = self.open["content"][0], _logprobs(logprobs)
        part["text"] += text
        part["logprobs"] += shaped
        if text:
            events.append(("response.output_text.delta", {**self._event_ids(), "content_index": 0, "delta": text,
                                                          "logprobs": shaped}))
        return events

    def thought(self, text: str) -> list[Event]:
        """A thinking model's thinking: a reasoning item, its text streamed as reasoning_text."""
        events: list[Event] = []
        if self.open is None or self.open["type"] != "reasoning":
            events += self._begin({"id": "rs_" + secrets.token_hex(12), "type": "reasoning", "status": "in_progress",
                                   "summary": [], "content": [{"type": "reasoning_text", "text": ""}]})
        self.open["content"][0]["text"] += text
        events.append(("response.reasoning_text.delta", {**self._event_ids(), "content_index": 0, "delta": text}))
        return events

    def call(self, start: CallStart) -> list[Event]:
        return self._begin({"id": "fc_" + secrets.token_hex(12), "type": "function_call", "status": "in_progress",
                            "call_id": start.id, "name": start.name, "arguments": ""})

    def arguments(self, piece: ArgsDelta) -> list[Event]:
        assert self.open is not None and self.open["type"] == "function_call"
        self.open["arguments"] += piece.text
        return [("response.function_call_arguments.delta", {**self._event_ids(), "delta": piece.text})]

    def close(self, status: str) -> list[Event]:
        """End the open item (a message that stopped short is "incomplete")."""
        item, events = self.open, []
        if item is None:
            return []
        ids = self._event_ids()
        if item["type"] == "message":
            part = item["content"][0]
            events += [("response.output_text.done", {**ids, "content_index": 0, "text": part["text"],
                                                      "logprobs": part["logprobs"]}),
                       ("response.content_part.done", {**ids, "content_index": 0, "part": part})]
        elif item["type"] == "reasoning":
            status = "completed"
            events.append(("response.reasoning_text.done", {**ids, "content_index": 0,
                                                            "text": item["content"][0]["text"]}))
        else:
            status = "completed"
            events.append(("response.function_call_arguments.done", {**ids, "name": item["name"],
                                                                     "arguments": item["arguments"]}))
        item["status"] = status
        events.append(("response.output_item.done", {"output_index": ids["output_index"], "item": item}))
        self.open = None
        return events

    def mcp(self, event: McpEvent) -> list[Event]:
        """An MCP item: listed tools, a call (under way, then done) or an approval request."""
        item = event.item
        if event.kind == "done":  # the call item added when it began
            index = next(i for i, known in enumerate(self.items) if known is item)
            ids = {"item_id": item["id"], "output_index": index}
            done = "completed" if item["status"] == "completed" else "failed"
            return [(f"response.mcp_call.{done}", ids), ("response.output_item.done", {"output_index": index,
                                                                                       "item": item})]
        events = self.close("completed")
        self.items.append(item)
        ids = {"item_id": item["id"], "output_index": len(self.items) - 1}
        events.append(("response.output_item.added", {"output_index": ids["output_index"],
                                                      "item": copy.deepcopy(item)}))
        if event.kind == "call":
            return events + [("response.mcp_call_arguments.delta", {**ids, "delta": item["arguments"]}),
                             ("response.mcp_call_arguments.done", {**ids, "arguments": item["arguments"]}),
                             ("response.mcp_call.in_progress", ids)]
        if event.kind == "listed":
            events += [("response.mcp_list_tools.in_progress", ids), ("response.mcp_list_tools.completed", ids)]
        return events + [("response.output_item.done", {"output_index": ids["output_index"], "item": item})]

    def feed(self, delta: Delta) -> list[Event]:
        events: list[Event] = []
        logprobs = delta.logprobs
        for piece in delta.pieces:
            if isinstance(piece, Thought):
                events += self.thought(piece.text)
            elif isinstance(piece, str):
                events += self.text(piece, logprobs)
                logprobs = []  # a delta's tokens go with its first text
            elif isinstance(piece, CallStart):
                events += self.call(piece)
            elif isinstance(piece, ArgsDelta):
                events += self.arguments(piece)
        if logprobs and self.open is not None and self.open["type"] == "message":
            self.open["content"][0]["logprobs"] += _logprobs(logprobs)
        return events

    def end(self, status: str) -> list[Event]:
        if not any(item["type"] != "reasoning" for item in self.items):  # an empty answer is still one message
            return self.text("", []) + self.close(status)
        return self.close(status)


class ResponseReply:
    """One response's identity and its object, whole or as events; stored at its end when asked."""

    def __init__(self, echoed: dict[str, Any], model: str, conversation: list[dict[str, Any]] | None) -> None:
        self.id = "resp_" + secrets.token_hex(12)
        self.created = int(time.time())
        self.echoed = echoed  # the request's fields a response object repeats (instructions, tools, ...)
        self.model = model
        self.conversation = conversation  # None: not stored (store: false)

    def _object(self, status: str, output: list[dict[str, Any]], stats: Stats | None = None,
                error: dict[str, Any] | None = None, notes: list[str] | None = None,
                reasoning_tokens: int = 0) -> dict[str, Any]:
        incomplete = {"reason": "max_output_tokens"} if status == "incomplete" else None
        return {"id": self.id, "object": "response", "created_at": self.created, "status": status,
                "background": False, "error": error, "incomplete_details": incomplete, "model": self.model,
                "output": output, "reasoning": {"effort": None, "summary": None}, **self.echoed,
                "store": self.conversation is not None,
                "usage": usage(stats, reasoning_tokens) if status != "in_progress" else None,
                "x_localchat": extras(stats, notes)}

    async def _finish(self, answer: Reply, items: _Items, end: End) -> tuple[dict[str, Any], list[Event]]:
        """The closing events and the finished object, stored if asked."""
        status = "incomplete" if end.finish_reason == "length" else "completed"
        events = items.end(status)
        # A call max_tokens cut began on the stream, but is no call: the response lists the whole ones only.
        whole = {call.id for call in answer.calls}
        output = [i for i in items.items if i["type"] != "function_call" or i["call_id"] in whole]
        response = self._object(status, output, end.stats, notes=answer.notes,
                                reasoning_tokens=end.reasoning_tokens)
        if self.conversation is not None and end.finish_reason != "cancelled":
            await asyncio.to_thread(stored_responses().put, response, [*self.conversation, *answer.turns()])
        return response, events

    async def whole(self, answer: Reply) -> dict[str, Any]:
        items = _Items()
        async for event in answer.events():
            if isinstance(event, Delta):
                items.feed(event)
            elif isinstance(event, McpEvent):
                items.mcp(event)
            elif isinstance(event, End):
                return (await self._finish(answer, items, event))[0]
        raise AssertionError("an answer's events end with End")

    async def events(self, answer: Reply) -> AsyncIterator[bytes]:
        numbers = itertools.count()

        def sse(kind: str, data: dict[str, Any]) -> bytes:
            event = {"type": kind, "sequence_number": next(numbers), **data}
            return f"event: {kind}\ndata: ".encode() + json.dumps(event, ensure_ascii=False,
                                                                  separators=(",", ":")).encode("utf-8") + b"\n\n"

        items = _Items()
        yield sse("response.created", {"response": self._object("in_progress", [])})
        yield sse("response.in_progress", {"response": self._object("in_progress", [])})
        try:
            async for event in answer.events():
                if isinstance(event, (Delta, McpEvent)):
                    for kind, data in items.feed(event) if isinstance(event, Delta) else items.mcp(event):
                        yield sse(kind, data)
                elif isinstance(event, End):
                    response, closing = await self._finish(answer, items, event)
                    for kind, data in closing:
                        yield sse(kind, data)
                    done = "response.incomplete" if response["status"] == "incomplete" else "response.completed"
                    yield sse(done, {"response": response})
        except LocalchatError as exc:
            # The status line is gone: the failure travels in the stream, as OpenAI's does.
            error = {"code": "server_error", "message": str(exc)}
            yield sse("response.failed", {"response": self._object("failed", items.items, error=error)})
