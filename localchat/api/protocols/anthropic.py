"""Anthropic's Messages API (/v1/messages, /v1/messages/count_tokens), translated to and from the
neutral request: content blocks (text, tool_use, tool_result), tools and tool_choice, stop sequences,
structured output (output_config.format), and streaming as Anthropic's typed events. Errors on these
routes take Anthropic's shape (api/wire.py).

temperature, top_p and top_k are taken as Anthropic's API took them (the current client sends them
through extra_body). A thinking model's thinking comes as thinking blocks (`thinking: {type: "enabled",
budget_tokens}` switches it on and closes it when the budget is spent; "disabled" switches it off). What
this server cannot do (images, documents, built-in tools, a prefilled assistant turn) is a 400 that says so.
The MCP connector (`mcp_servers`, with `mcp_toolset` tools) runs its servers' tools here: each call an
mcp_tool_use block and its mcp_tool_result, as Anthropic's connector writes them.
"""

from __future__ import annotations

import json
import secrets
from typing import Any, AsyncIterator, Literal

from pydantic import Field
from starlette.requests import Request as HTTPRequest
from starlette.responses import JSONResponse, Response

from ...errors import LocalchatError, RequestError
from ...runtime.events import Stats
from ...runtime.templates.thinking import Thought
from ..schemas import Body, parse
from ..mcp_tools import anthropic_uses, toolset_of
from ..service import Answer, AskedSampling, Delta, End, Generation, Route, Service, Started
from ..tool_parser import ArgsDelta, CallStart, ToolCall
from .responses_mcp import Approvals, McpEvent, ToolLoop

MEDIA_TYPE = "text/event-stream"
STOP_REASONS = {"tool_calls": "tool_use", "length": "max_tokens"}  # the rest: end_turn, or stop_sequence
CHOICES = {"auto": "auto", "any": "required", "none": "none"}  # Anthropic's tool_choice types, ours


class AnthropicMessage(Body):
    role: Literal["user", "assistant"]
    content: str | list[dict[str, Any]]


class CountBody(Body):
    model: str | None = None
    messages: list[AnthropicMessage] = Field(min_length=1)
    system: str | list[dict[str, Any]] | None = None
    tools: list[Any] | None = None
    tool_choice: dict[str, Any] | None = None
    thinking: dict[str, Any] | None = None
    mcp_servers: list[Any] | None = None  # Anthropic's MCP connector: run here (responses_mcp.py's loop)


class MessagesBody(CountBody):
    max_tokens: int | None = None  # required: checked below, with Anthropic's own words
    output_config: dict[str, Any] | None = None  # {format: {type: json_schema, schema}}; effort is a hint
    stop_sequences: list[str] | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    stream: bool | None = False


# -- requests --------------------------------------------------------------------------------------


def _text(value: Any, where: str) -> str:
    """A string, or text blocks joined; any other block is refused."""
    if isinstance(value, str):
        return value
    texts = []
    for j, block in enumerate(value if isinstance(value, list) else [value]):
        if not isinstance(block, dict) or block.get("type") != "text" or not isinstance(block.get("text"), str):
            kind = block.get("type", "unknown") if isinstance(block, dict) else type(block).__name__
            raise RequestError(f"{where}.{j} is a '{kind}' block where text is expected; this model reads text only.",
                               f"{where}.{j}")
        texts.append(block["text"])
    return "\n\n".join(texts)


def _messages(body: CountBody) -> list[dict[str, Any]]:
    """The system prompt and the messages' blocks as neutral messages (a user turn's tool results first)."""
    out: list[dict[str, Any]] = []
    if body.system:
        out.append({"role": "system", "content": _text(body.system, "system")})
    for i, message in enumerate(body.messages):
        if isinstance(message.content, str):
            out.append({"role": message.role, "content": message.content})
            continue
        texts, calls, results, thoughts = [], [], [], []
        for j, block in enumerate(message.content):
            kind, where = block.get("type"), f"messages.{i}.content.{j}"
            if kind == "text" and isinstance(block.get("text"), str):
                texts.append(block["text"])
            elif kind in ("thinking", "redacted_thinking") and message.role == "assistant":
                if isinstance(block.get("thinking"), str):
                    thoughts.append(block["thinking"])
            elif kind == "tool_use" and message.role == "assistant":
                if not isinstance(block.get("name"), str) or not isinstance(block.get("input", {}), dict):
                    raise RequestError(f"{where} must be {{'type': 'tool_use', 'id': ..., 'name': ..., 'input': "
                                       "{...}}.", where)
                calls.append({"id": str(block.get("id") or ""), "type": "function",
                              "function": {"name": block["name"], "arguments": block.get("input") or {}}})
            elif kind == "tool_result" and message.role == "user":
                text = _text(block.get("content") or "", f"{where}.content")
                results.append({"role": "tool", "tool_call_id": str(block.get("tool_use_id") or ""),
                                "content": f"Error: {text}" if block.get("is_error") else text})
            else:
                raise RequestError(f"{where} is a '{kind}' block in a {message.role} turn; this model reads text, "
                                   "tool_use (from the assistant) and tool_result (from the user) blocks.", where)
        out += results
        if calls:
            out.append({"role": "assistant", "content": "\n\n".join(texts), "tool_calls": calls})
        elif texts or not results:
            out.append({"role": message.role, "content": "\n\n".join(texts)})
        if thoughts and out[-1]["role"] == "assistant":
            out[-1]["reasoning"] = "\n\n".join(thoughts)
    if out and out[-1]["role"] == "assistant":
        raise RequestError("the last message is the assistant's: this server does not continue a prefilled answer; "
                           "end with a user message.", f"messages.{len(body.messages) - 1}")
    return out


def _tools(body: CountBody) -> tuple[list[dict[str, Any]] | None, Any, bool | None]:
    """Anthropic's tools and tool_choice as neutral function tools, choice and parallel calls."""
    tools = []
    for i, tool in enumerate(body.tools or []):
        if isinstance(tool, dict) and tool.get("type") == "mcp_toolset":
            continue  # which of an MCP server's tools are on (anthropic_uses)
        if not isinstance(tool, dict) or tool.get("type", "custom") != "custom":
            kind = tool.get("type") if isinstance(tool, dict) else tool
            raise RequestError(f"tools.{i} is the built-in tool {kind!r}, which this server does not run; send "
                               "custom tools ({'name': ..., 'description': ..., 'input_schema': {...}}).", f"tools.{i}")
        function = {"name": tool.get("name"), "parameters": tool.get("input_schema")}
        if tool.get("description"):
            function["description"] = tool["description"]
        tools.append({"type": "function", "function": function})
    choice = body.tool_choice or {}
    kind = choice.get("type", "auto")
    if kind == "tool":
        chosen: Any = {"type": "function", "function": {"name": choice.get("name")}}
    elif kind in CHOICES:
        chosen = CHOICES[kind]
    else:
        raise RequestError(f"tool_choice type {kind!r} is not one of auto, any, tool and none.", "tool_choice")
    return tools or None, chosen, False if choice.get("disable_parallel_tool_use") else None


def _format(body: CountBody) -> dict[str, Any] | None:
    """output_config.format (Anthropic's structured output) as the neutral response format."""
    found = (getattr(body, "output_config", None) or {}).get("format")
    if found is None:
        return None
    if not isinstance(found, dict) or found.get("type") != "json_schema" or not isinstance(found.get("schema"), dict):
        raise RequestError("output_config.format must be {'type': 'json_schema', 'schema': {...}}.",
                           "output_config.format")
    return {"type": "json_schema", "json_schema": {"name": "output", "schema": found["schema"]}}


def _thinking(body: CountBody) -> tuple[bool | None, int | None]:
    """`thinking` as the neutral switch and budget: {type: enabled, budget_tokens}, disabled, adaptive."""
    asked = body.thinking
    if asked is None:
        return None, None
    kind = asked.get("type") if isinstance(asked, dict) else None
    if kind == "disabled":
        return False, None
    if kind == "adaptive":
        return True, None
    budget = asked.get("budget_tokens") if kind == "enabled" else None
    if kind != "enabled" or not (isinstance(budget, int) and not isinstance(budget, bool) and budget >= 1):
        raise RequestError("thinking must be {'type': 'enabled', 'budget_tokens': N} (N at least 1), "
                           "{'type': 'adaptive'} or {'type': 'disabled'}.", "thinking")
    return True, budget


def _generation(body: CountBody, stream: bool = False, sampling: AskedSampling | None = None) -> Generation:
    tools, choice, parallel = _tools(body)
    thinking, budget = _thinking(body)
    return Generation(messages=_messages(body), model=body.model, sampling=sampling or AskedSampling(),
                      tools=tools, tool_choice=choice, parallel_tool_calls=parallel, response_format=_format(body),
                      format_param="output_config.format.schema", stream=stream, thinking=thinking,
                      thinking_budget=budget)  # asked of a model that does not think: ignored, and said


# -- replies ---------------------------------------------------------------------------------------


def _stop(end: End) -> tuple[str, str | None]:
    if end.finish_reason in STOP_REASONS:
        return STOP_REASONS[end.finish_reason], None
    return ("stop_sequence", end.stop_sequence) if end.stop_sequence else ("end_turn", None)


def _usage(stats: Stats | None, prompt_tokens: int = 0) -> dict[str, Any]:
    """Anthropic counts the prompt tokens read from the cache apart from the ones computed."""
    prompt = stats.prompt_tokens if stats else prompt_tokens
    cached = stats.cached_tokens if stats else 0
    return {"input_tokens": prompt - cached, "output_tokens": stats.completion_tokens if stats else 0,
            "cache_read_input_tokens": cached, "cache_creation_input_tokens": 0}


def _tool_id(call_id: str) -> str:
    return "toolu_" + call_id.removeprefix("call_")


def _tool_use(call: ToolCall) -> dict[str, Any]:
    return {"type": "tool_use", "id": _tool_id(call.id), "name": call.name, "input": json.loads(call.arguments)}


def _mcp_blocks(event: McpEvent) -> list[dict[str, Any]]:
    """An MCP call as Anthropic's connector shows it: an mcp_tool_use block when it runs, its mcp_tool_result
    when it is done."""
    item = event.item
    use_id = "mcptoolu_" + item["id"].partition("_")[2]
    if event.kind == "call":
        try:
            arguments = json.loads(item["arguments"] or "{}")
        except ValueError:
            arguments = {}
        return [{"type": "mcp_tool_use", "id": use_id, "name": item["name"], "server_name": item["server_label"],
                 "input": arguments if isinstance(arguments, dict) else {}}]
    if event.kind == "done":
        failed = item["status"] != "completed"
        return [{"type": "mcp_tool_result", "tool_use_id": use_id, "is_error": failed,
                 "content": [{"type": "text", "text": item["error"] if failed else item["output"]}]}]
    return []  # a listing or an approval request: the connector shows neither


def _event(kind: str, **data: Any) -> bytes:
    return (f"event: {kind}\ndata: ".encode() + json.dumps({"type": kind, **data}, ensure_ascii=False,
                                                             separators=(",", ":")).encode("utf-8") + b"\n\n")


class _Message:
    """One answer as Anthropic's message, whole or as its stream of events."""

    def __init__(self, model: str) -> None:
        self.id = "msg_" + secrets.token_hex(12)
        self.model = model

    def _head(self, content: list[dict[str, Any]], usage: dict[str, Any], stop: tuple[str | None, str | None]
              ) -> dict[str, Any]:
        return {"id": self.id, "type": "message", "role": "assistant", "model": self.model, "content": content,
                "stop_reason": stop[0], "stop_sequence": stop[1], "usage": usage}

    async def whole(self, answer: Answer | ToolLoop) -> dict[str, Any]:
        content: list[dict[str, Any]] = []  # the blocks in the order written: thinking, text, MCP calls
        async for event in answer.events():
            if isinstance(event, McpEvent):
                content += _mcp_blocks(event)
            elif isinstance(event, Delta):
                for piece in event.pieces:
                    kind, key, text = (("thinking", "thinking", piece.text) if isinstance(piece, Thought) else
                                       ("text", "text", piece) if isinstance(piece, str) else (None, "", ""))
                    if kind is None:
                        continue
                    if not content or content[-1]["type"] != kind:
                        content.append({"type": kind, key: "", **({"signature": ""} if kind == "thinking" else {})})
                    content[-1][key] += text
            elif isinstance(event, End):
                if not any(block["type"] != "thinking" for block in content) and not answer.calls:
                    content.append({"type": "text", "text": ""})  # an empty answer is still one text block
                content += [_tool_use(call) for call in answer.calls]
                return self._head(content, _usage(event.stats), _stop(event))
        raise AssertionError("an answer's events end with End")

    async def events(self, answer: Answer | ToolLoop) -> AsyncIterator[bytes]:
        index, open_kind, started = -1, None, False  # the content block being written, and its kind

        def begin(block: dict[str, Any]) -> list[bytes]:
            nonlocal index, open_kind
            out = [_event("content_block_stop", index=index)] if open_kind else []
            index, open_kind = index + 1, block["type"]
            return [*out, _event("content_block_start", index=index, content_block=block)]

        try:
            async for event in answer.events():
                if not started:
                    started = True
                    prompt = event.prompt_tokens if isinstance(event, Started) else 0
                    yield _event("message_start", message=self._head([], _usage(None, prompt), (None, None)))
                    yield _event("ping")
                if isinstance(event, McpEvent):
                    for block in _mcp_blocks(event):
                        for chunk in begin(block):
                            yield chunk
                elif isinstance(event, Delta):
                    for piece in event.pieces:
                        if isinstance(piece, Thought):
                            if open_kind != "thinking":
                                for chunk in begin({"type": "thinking", "thinking": "", "signature": ""}):
                                    yield chunk
                            yield _event("content_block_delta", index=index,
                                         delta={"type": "thinking_delta", "thinking": piece.text})
                        elif isinstance(piece, str):
                            if open_kind != "text":
                                for chunk in begin({"type": "text", "text": ""}):
                                    yield chunk
                            yield _event("content_block_delta", index=index,
                                         delta={"type": "text_delta", "text": piece})
                        elif isinstance(piece, CallStart):
                            for chunk in begin({"type": "tool_use", "id": _tool_id(piece.id), "name": piece.name,
                                                "input": {}}):
                                yield chunk
                        elif isinstance(piece, ArgsDelta):
                            yield _event("content_block_delta", index=index,
                                         delta={"type": "input_json_delta", "partial_json": piece.text})
                elif isinstance(event, End):
                    if open_kind is None:  # an empty answer is still one (empty) text block
                        for chunk in begin({"type": "text", "text": ""}):
                            yield chunk
                    yield _event("content_block_stop", index=index)
                    reason, sequence = _stop(event)
                    yield _event("message_delta", delta={"stop_reason": reason, "stop_sequence": sequence},
                                 usage=_usage(event.stats))
                    yield _event("message_stop")
        except LocalchatError as exc:
            # The status line is gone: the error travels in the stream, as Anthropic's does.
            yield _event("error", error={"type": "api_error", "message": str(exc)})


# -- routes ----------------------------------------------------------------------------------------


async def messages(service: Service, data: Any, request: HTTPRequest) -> Response:
    body = parse(MessagesBody, data)
    if body.max_tokens is None:
        raise RequestError("max_tokens is required (Anthropic's API asks for it): send the most tokens the answer "
                           "may take, such as 1024.", "max_tokens")
    sampling = AskedSampling.named_alike(body, {"stop": "stop_sequences"}, stop=list(body.stop_sequences or []))
    generation = _generation(body, bool(body.stream), sampling)
    answer: Answer | ToolLoop
    if body.mcp_servers:
        uses = anthropic_uses(body.mcp_servers, body.tools or [], request.client.host if request.client else "")
        toolset = await toolset_of(uses, {t["function"]["name"] for t in generation.tools or []})
        answer = ToolLoop(service, generation, toolset, request, Approvals({}, {}))
    else:
        answer = await service.generate(generation, request)
    reply = _Message(answer.model)
    if generation.stream:
        return answer.streamed(reply.events(answer), MEDIA_TYPE)
    return await answer.whole(request, reply.whole)


async def count_tokens(service: Service, data: Any, request: HTTPRequest) -> Response:
    body = parse(CountBody, data)
    return JSONResponse({"input_tokens": await service.count_tokens(_generation(body), request)})


ROUTES = [
    Route("POST", "/v1/messages", messages),
    Route("POST", "/v1/messages/count_tokens", count_tokens),
]
