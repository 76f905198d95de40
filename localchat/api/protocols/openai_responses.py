"""OpenAI's Responses API (POST /v1/responses, GET and DELETE /v1/responses/{id}), translated to and from
the neutral request: `input` as a string or items (messages, function_call, function_call_output),
`instructions`, function tools and `tool_choice`, `text.format`, `max_output_tokens`, logprobs through
`include`, streaming as the typed event sequence, and stored responses a request can go on from
(`previous_response_id`; api/response_store.py). The answer's shapes are in responses_reply.py.

The `mcp` tool runs MCP servers' tools here, with the user's approval where asked (responses_mcp.py). What
this server cannot do is a 400 that says so: other built-in tools (web search, file search, computer use...),
images and files, background runs, server-side conversations. A thinking model's thinking comes
as a reasoning item (its text in `content`, as reasoning_text); `reasoning.effort` sets its switch; a
reasoning item a client sends back is the thinking of the assistant turn that follows it.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any, Literal

from pydantic import Field
from starlette.requests import Request as HTTPRequest
from starlette.responses import JSONResponse, Response

from ...errors import RequestError
from ..response_store import stored_responses
from ..schemas import Body, parse
from ..mcp_tools import Toolset, responses_uses, toolset_of
from ..service import Answer, AskedSampling, Generation, Route, Service
from ..thinking import check_thinking
from ..wire import error_response
from .responses_mcp import Approvals, ToolLoop, close_unanswered, take_approvals
from .responses_reply import MEDIA_TYPE, ResponseReply

TEXT_PARTS = ("input_text", "output_text", "text", "refusal")
LOGPROBS = "message.output_text.logprobs"  # what `include` names to get each output token's logprobs
ID = re.compile(r"resp_[0-9a-f]{24}")  # this server's response ids; any other is no stored response


class ResponsesBody(Body):
    model: str | None = None
    input: str | list[dict[str, Any]]
    instructions: str | None = None
    tools: list[Any] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    text: dict[str, Any] | None = None  # {format: {type: text | json_object | json_schema, schema, ...}}
    max_output_tokens: int | None = Field(None, ge=1)
    temperature: float | None = None
    top_p: float | None = None
    top_logprobs: int | None = Field(None, ge=0, le=20)
    include: list[str] | None = None
    stream: bool | None = False
    previous_response_id: str | None = None
    store: bool | None = True
    background: bool | None = None
    conversation: Any = None
    truncation: Literal["auto", "disabled"] | None = "disabled"  # auto: the oldest turns go when it is too long
    reasoning: dict[str, Any] | None = None  # {effort: none | low | medium | high, summary}


# -- requests --------------------------------------------------------------------------------------


def _text(content: Any, where: str) -> str:
    """A message's or an output's content as text: a string, or its text parts joined."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise RequestError(f"{where} must be a string or a list of input_text parts.", where)
    texts = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else type(part).__name__
        text = part.get("text", part.get("refusal")) if isinstance(part, dict) else None
        if kind not in TEXT_PARTS or not isinstance(text, str):
            raise RequestError(f"{where}.{j} is a '{kind}' part; this model reads text only (input_text parts).",
                               f"{where}.{j}")
        texts.append(text)
    return "".join(texts)


def _messages(items: str | list[dict[str, Any]], answering: bool = False) -> list[dict[str, Any]]:
    """`input` as neutral messages; function calls in a row (and the text before them) are one assistant turn."""
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    out: list[dict[str, Any]] = []
    thought = ""  # a reasoning item's text, for the assistant turn after it
    for i, item in enumerate(items):
        kind, where = item.get("type", "message"), f"input.{i}"
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "system", "developer", "assistant"):
                raise RequestError(f"{where}.role must be user, assistant, system or developer.", f"{where}.role")
            out.append({"role": "system" if role == "developer" else role,
                        "content": _text(item.get("content", ""), f"{where}.content")})
            if role == "assistant" and thought:
                out[-1]["reasoning"], thought = thought, ""
        elif kind == "function_call":
            if not isinstance(item.get("name"), str) or not isinstance(item.get("call_id"), str):
                raise RequestError(f"{where} must be {{'type': 'function_call', 'call_id': ..., 'name': ..., "
                                   "'arguments': '{...}'}.", where)
            call = {"id": item["call_id"], "type": "function",
                    "function": {"name": item["name"], "arguments": item.get("arguments") or "{}"}}
            last = out[-1] if out else None
            if last is not None and last["role"] == "assistant":
                last.setdefault("tool_calls", []).append(call)
            else:
                out.append({"role": "assistant", "content": "", "tool_calls": [call]})
            if thought:
                out[-1]["reasoning"], thought = thought, ""
        elif kind == "function_call_output":
            out.append({"role": "tool", "tool_call_id": str(item.get("call_id") or ""),
                        "content": _text(item.get("output", ""), f"{where}.output")})
        elif kind in ("mcp_call", "mcp_approval_request"):  # a call the model made (an MCP one, replayed)
            if not all(isinstance(item.get(k), str) for k in ("id", "name")):
                raise RequestError(f"{where} must carry the id, name and arguments of the call.", where)
            call = {"id": item["id"], "type": "function",
                    "function": {"name": item["name"], "arguments": str(item.get("arguments") or "{}")}}
            last = out[-1] if out else None
            if last is not None and last["role"] == "assistant":
                last.setdefault("tool_calls", []).append(call)
            else:
                out.append({"role": "assistant", "content": "", "tool_calls": [call]})
            if kind == "mcp_call":
                out.append({"role": "tool", "tool_call_id": item["id"],
                            "content": str(item.get("output") or item.get("error") or "")})
        elif kind == "mcp_list_tools":
            continue  # what the server listed: the tools are listed again for this request
        elif kind == "reasoning":
            parts = item.get("content") or []
            thought = "".join(p.get("text", "") for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str))
        else:
            raise RequestError(f"{where} is a '{kind}' item; this server reads message, function_call, "
                               "function_call_output and mcp items.", f"{where}.type")
    if not answering and (not out or out[-1]["role"] == "assistant"):
        raise RequestError("input must end with a user message or a function_call_output; this server does not "
                           "continue a prefilled answer.", "input")
    return out


def _tools(body: ResponsesBody) -> tuple[list[dict[str, Any]] | None, Any]:
    """Function tools and tool_choice in the neutral (chat completions') shape."""
    tools = []
    for i, tool in enumerate(body.tools or []):
        kind = tool.get("type") if isinstance(tool, dict) else tool
        if kind == "mcp":
            continue  # run here (responses_mcp.py)
        if kind != "function":
            raise RequestError(f"tools.{i} is the built-in tool {kind!r}, which this server does not run; send "
                               "function tools ({'type': 'function', 'name': ..., 'parameters': {...}}).", f"tools.{i}")
        function = {k: tool[k] for k in ("name", "description", "parameters", "strict") if k in tool}
        tools.append({"type": "function", "function": function})
    choice = body.tool_choice
    if isinstance(choice, dict):
        if choice.get("type") not in ("function", "mcp") or not isinstance(choice.get("name"), str):
            raise RequestError("tool_choice must be auto, none, required, {'type': 'function', 'name': ...} or "
                               "{'type': 'mcp', 'server_label': ..., 'name': ...}; this server runs no "
                               f"{choice.get('type')!r} tools.", "tool_choice")
        choice = {"type": "function", "function": {"name": choice["name"]}}
    return tools or None, choice


def _format(body: ResponsesBody) -> dict[str, Any] | None:
    """text.format in the neutral (chat completions' response_format) shape."""
    found = (body.text or {}).get("format")
    if found is None or found.get("type") == "text":
        return None
    if found.get("type") == "json_schema":
        if not isinstance(found.get("schema"), dict):
            raise RequestError("text.format.schema must be a JSON schema object.", "text.format.schema")
        return {"type": "json_schema", "json_schema": {k: found[k] for k in ("name", "schema", "strict") if k in found}}
    if found.get("type") == "json_object":
        return {"type": "json_object"}
    raise RequestError("text.format.type must be text, json_object or json_schema.", "text.format.type")


def _earlier(previous_id: str | None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The stored response a request goes on from, and the conversation it ended."""
    if previous_id is None:
        return {}, []
    found = stored_responses().get(previous_id) if ID.fullmatch(previous_id) else None
    if found is None:
        raise RequestError(f"previous_response_id {previous_id!r} names no stored response here (it was never "
                           "stored, was deleted, or is among the oldest, which are let go); send the whole "
                           "conversation in input instead.", "previous_response_id")
    return found


def _generation(body: ResponsesBody) -> tuple[Generation, list[dict[str, Any]], Approvals]:
    """The neutral request, the conversation it carries without the instructions (what is stored), and the
    answers it brings to earlier MCP approval requests."""
    for field, why in (("background", "background runs"), ("conversation", "server-side conversations")):
        if getattr(body, field):
            raise RequestError(f"{field}: this server does not offer {why}; leave it out (previous_response_id "
                               "goes on from a stored response).", field)
    earlier, before = _earlier(body.previous_response_id)
    items, approvals = take_approvals(body.input, earlier.get("output") or [])
    conversation = close_unanswered(before + _messages(items, answering=bool(approvals.answers)), approvals)
    head = [{"role": "system", "content": body.instructions}] if body.instructions else []
    tools, choice = _tools(body)
    logprobs = (body.top_logprobs or 0) if LOGPROBS in (body.include or []) else None
    sampling = AskedSampling.named_alike(body, {"max_tokens": "max_output_tokens"}, max_tokens=body.max_output_tokens,
                                         logprobs=logprobs)
    generation = Generation(messages=head + conversation, model=body.model, sampling=sampling, tools=tools,
                            tool_choice=choice, parallel_tool_calls=body.parallel_tool_calls,
                            response_format=_format(body), format_param="text.format.schema",
                            stream=bool(body.stream),
                            context_overflow="rolling" if body.truncation == "auto" else "refuse",
                            thinking=check_thinking((body.reasoning or {}).get("effort"), "reasoning.effort"))
    return generation, conversation, approvals


def _check_mcp_choice(choice: Any, toolset: Toolset) -> None:
    """tool_choice {'type': 'mcp', 'server_label', 'name'} names a tool that server lists."""
    if isinstance(choice, dict) and choice.get("type") == "mcp":
        found = toolset.by_name.get(choice.get("name"))
        if found is None or found[0].label != choice.get("server_label"):
            raise RequestError(f"tool_choice names {choice.get('name')!r} of MCP server "
                               f"{choice.get('server_label')!r}, which lists no such tool.", "tool_choice")


def _echoed(body: ResponsesBody) -> dict[str, Any]:
    """The request's fields a response object repeats, as OpenAI's does."""
    return {"instructions": body.instructions, "max_output_tokens": body.max_output_tokens,
            "parallel_tool_calls": body.parallel_tool_calls is not False,
            "previous_response_id": body.previous_response_id, "temperature": body.temperature,
            "text": {"format": (body.text or {}).get("format") or {"type": "text"}},
            "tool_choice": body.tool_choice or "auto", "tools": body.tools or [], "top_p": body.top_p,
            "truncation": body.truncation or "disabled", "metadata": getattr(body, "metadata", None) or {},
            "reasoning": {"effort": (body.reasoning or {}).get("effort"), "summary": None}}


# -- routes ----------------------------------------------------------------------------------------


async def create(service: Service, data: Any, request: HTTPRequest) -> Response:
    body = parse(ResponsesBody, data)
    generation, conversation, approvals = _generation(body)
    answer: Answer | ToolLoop
    if any(isinstance(t, dict) and t.get("type") == "mcp" for t in body.tools or []):
        names = {t["function"]["name"] for t in generation.tools or []}
        uses = responses_uses(body.tools or [], request.client.host if request.client else "")
        toolset = await toolset_of(uses, names)
        _check_mcp_choice(body.tool_choice, toolset)
        answer = ToolLoop(service, generation, toolset, request, approvals)
    else:
        answer = await service.generate(generation, request)
    reply = ResponseReply(_echoed(body), answer.model, conversation if body.store is not False else None)
    if generation.stream:
        return answer.streamed(reply.events(answer), MEDIA_TYPE)
    return await answer.whole(request, reply.whole)


def _missing(response_id: str, path: str) -> Response:
    return error_response(404, f"no stored response has the id {response_id!r}; it was never stored (store: false), "
                          "was deleted, or is among the oldest, which are let go.", param="response_id",
                          code="not_found", path=path)


async def retrieve(service: Service, data: Any, request: HTTPRequest) -> Response:
    response_id = request.path_params["response_id"]
    found = await asyncio.to_thread(stored_responses().get, response_id) if ID.fullmatch(response_id) else None
    return JSONResponse(found[0]) if found else _missing(response_id, request.url.path)


async def delete(service: Service, data: Any, request: HTTPRequest) -> Response:
    response_id = request.path_params["response_id"]
    if not (ID.fullmatch(response_id) and await asyncio.to_thread(stored_responses().delete, response_id)):
        return _missing(response_id, request.url.path)
    return JSONResponse({"id": response_id, "object": "response", "deleted": True})


ROUTES = [
    Route("POST", "/v1/responses", create),
    Route("GET", "/v1/responses/{response_id}", retrieve),
    Route("DELETE", "/v1/responses/{response_id}", delete),
]
