"""The Responses API's tool loop for `mcp` tools, as OpenAI's runs it: the servers' tools listed
(`mcp_list_tools`), the model answering with them offered, each call it makes to one of them run by this server
(`mcp_call`, with its `output` or `error`) and fed back, until it answers in text, calls a client's own function
tool, reaches the step limit, or makes a call that waits for the user (`mcp_approval_request`): the response
ends there, stored, and a request that goes on from it (`previous_response_id`) with an `mcp_approval_response`
runs or refuses the call and goes on. A denial is told to the model. A server that fails mid-call is an
`mcp_call` with `error`, never a 5xx.
"""

from __future__ import annotations

import dataclasses
import secrets
from dataclasses import dataclass
from typing import Any, AsyncIterator

from starlette.requests import Request as HTTPRequest

from ...errors import RequestError, ToolServerError
from ...mcp_host.limits import LIMITS
from ..mcp_tools import ServerUse, Toolset, listed_tools
from ..service import Answer, Delta, End, Generation, Replying, Service, Started
from ..tool_parser import ArgsDelta, CallStart

DENIED = "The user denied this call; it did not run."
UNANSWERED = "The user did not answer the approval request for this call; it did not run."


@dataclass(slots=True)
class McpEvent:
    """An MCP output item at one point of its life: "listed", "call" (under way), "done", or "approval"."""

    kind: str
    item: dict[str, Any]


@dataclass(slots=True)
class Approvals:
    """What a request brings for earlier approval requests: the requests (id -> item) and the answers."""

    requests: dict[str, dict[str, Any]]
    answers: dict[str, tuple[bool, str]]  # approval request id -> (approved, reason)


def take_approvals(items: Any, earlier_output: list[dict[str, Any]]) -> tuple[Any, Approvals]:
    """`input` without its `mcp_approval_response` items, and the approvals they answer (the requests from the
    response gone on from, or replayed in `input`)."""
    requests = {i["id"]: i for i in earlier_output if i.get("type") == "mcp_approval_request"}
    if not isinstance(items, list):
        return items, Approvals(requests, {})
    answers, kept = {}, []
    for i, item in enumerate(items):
        if isinstance(item, dict) and item.get("type") == "mcp_approval_response":
            found = item.get("approval_request_id")
            if not isinstance(found, str) or not isinstance(item.get("approve"), bool):
                raise RequestError(f"input.{i} must be {{'type': 'mcp_approval_response', 'approval_request_id': "
                                   "..., 'approve': true | false}.", f"input.{i}")
            answers[found] = (item["approve"], str(item.get("reason") or "")[:1000])
            continue
        if isinstance(item, dict) and item.get("type") == "mcp_approval_request" and isinstance(item.get("id"), str):
            requests[item["id"]] = item
        kept.append(item)
    for found in answers:
        if found not in requests:
            raise RequestError(f"the mcp_approval_response answers {found!r}, which is no approval request of the "
                               "response this one goes on from.", "input")
    return kept, Approvals(requests, answers)


def close_unanswered(conversation: list[dict[str, Any]], approvals: Approvals) -> list[dict[str, Any]]:
    """The conversation with a tool turn for each call that waited for approval and got no answer (the user
    went on without one): every call a template shows needs its result, and the model learns it did not run."""
    answered = {m.get("tool_call_id") for m in conversation if m.get("role") == "tool"} | set(approvals.answers)
    out: list[dict[str, Any]] = []
    for message in conversation:
        out.append(message)
        if message.get("role") == "assistant":
            out += [{"role": "tool", "tool_call_id": call["id"], "content": UNANSWERED}
                    for call in message.get("tool_calls") or []
                    if call["id"] in approvals.requests and call["id"] not in answered]
    return out


def _item(kind: str, prefix: str, **fields: Any) -> dict[str, Any]:
    return {"id": prefix + secrets.token_hex(12), "type": kind, **fields}


class ToolLoop(Replying):
    """A response whose model may call MCP tools: the answers of its steps, read as one."""

    def __init__(self, service: Service, generation: Generation, toolset: Toolset, request: HTTPRequest,
                 approvals: Approvals) -> None:
        self.service, self.generation, self.toolset, self.request = service, generation, toolset, request
        self.approvals = approvals
        self.base_tools = list(generation.tools or [])
        self.model = generation.model or ""
        self.notes: list[str] = []
        self._added: list[dict[str, Any]] = []  # the turns this response adds before its last answer
        self._answer: Answer | None = None  # the step under way
        self._last: Answer | None = None  # the answer that ended the response, None when it waits for approval
        self._cancelled = False

    @property
    def calls(self) -> list[Any]:
        """The client's own function calls the response ends with."""
        return self._last.calls if self._last is not None else []

    def cancel(self) -> None:
        self._cancelled = True
        if self._answer is not None:
            self._answer.cancel()

    def turns(self) -> list[dict[str, Any]]:
        return self._added + (self._last.turns() if self._last is not None else [])

    async def _run(self, use: ServerUse, name: str, arguments: str, call_id: str,
                   approval_id: str | None) -> AsyncIterator[McpEvent]:
        item = _item("mcp_call", "mcp_", server_label=use.label, name=name, arguments=arguments, output=None,
                     error=None, approval_request_id=approval_id, status="in_progress")
        yield McpEvent("call", item)
        try:
            outcome = await self.toolset.call(use, name, arguments, LIMITS.call_seconds, LIMITS.result_chars)
            text, failed = outcome.text, outcome.is_error
        except ToolServerError as exc:
            text, failed = str(exc), True
        item.update(status="failed" if failed else "completed", output=None if failed else text,
                    error=text if failed else None)
        self._added.append({"role": "tool", "tool_call_id": call_id, "content": text})
        yield McpEvent("done", item)

    async def _answered(self) -> AsyncIterator[McpEvent]:
        """The calls an earlier response asked approval for, run or refused as this request answers."""
        waiting = [m for m in self.generation.messages or [] if m.get("role") == "assistant"][-1:]
        for call in (waiting[0].get("tool_calls") or []) if waiting else []:
            asked = self.approvals.requests.get(call["id"])
            if asked is None:
                continue
            approved, reason = self.approvals.answers.get(call["id"], (None, ""))
            use = self.toolset.use_of(str(asked.get("server_label")))
            if approved and use is not None:
                async for event in self._run(use, asked["name"], asked.get("arguments") or "{}", call["id"],
                                             call["id"]):
                    yield event
            else:
                why = DENIED + (f" Their reason: {reason}" if reason else "") if approved is False else UNANSWERED
                self._added.append({"role": "tool", "tool_call_id": call["id"], "content": why})

    def _hidden(self, delta: Delta, hidden: set[int]) -> Delta:
        """A step's delta without the pieces of MCP calls (they go out as mcp_call items instead)."""
        pieces = []
        for piece in delta.pieces:
            if isinstance(piece, CallStart) and piece.name in self.toolset.by_name:
                hidden.add(piece.index)
            elif not (isinstance(piece, ArgsDelta) and piece.index in hidden):
                pieces.append(piece)
        calls = [c for c in delta.calls if c.name not in self.toolset.by_name]
        return Delta(pieces, delta.text, delta.logprobs, calls)

    async def events(self) -> AsyncIterator[Any]:
        for use in self.toolset.uses:
            yield McpEvent("listed", _item("mcp_list_tools", "mcpl_", server_label=use.label,
                                           tools=listed_tools(use), error=None))
        async for event in self._answered():
            yield event
        prompt = completion = thought = 0
        end: End | None = None
        for step in range(LIMITS.steps):
            generation = dataclasses.replace(self.generation, tools=self.base_tools + self.toolset.function_tools(),
                                             messages=[*(self.generation.messages or []), *self._added])
            if step:  # a tool named by tool_choice (or "required") is the first step's; then the model chooses
                generation.tool_choice = "auto" if generation.tool_choice != "none" else "none"
            answer = self._answer = await self.service.generate(generation, self.request)
            self.model, hidden = answer.model, set()
            async for event in answer.events():
                if isinstance(event, Started) and step == 0:
                    yield event
                elif isinstance(event, Delta):
                    shown = self._hidden(event, hidden)
                    if shown.pieces or shown.logprobs:
                        yield shown
                elif isinstance(event, End):
                    end = event
            assert end is not None
            if end.stats is not None:
                prompt, completion = prompt + end.stats.prompt_tokens, completion + end.stats.completion_tokens
            thought += end.reasoning_tokens
            self.notes += answer.notes
            mcp = [c for c in answer.calls if c.name in self.toolset.by_name]
            if not mcp or end.finish_reason in ("length", "cancelled") or self._cancelled:
                self._last = answer
                break
            turn = answer.turns()[0]
            turn["tool_calls"] = [t for t in turn["tool_calls"] if t["function"]["name"] in self.toolset.by_name]
            asked = False
            for call, shown in zip(mcp, turn["tool_calls"]):
                use, _ = self.toolset.by_name[call.name]
                if use.needs_approval(call.name):
                    request = _item("mcp_approval_request", "mcpr_", server_label=use.label, name=call.name,
                                    arguments=call.arguments)
                    shown["id"] = request["id"]  # the tool turn that answers it later names it
                    asked = True
                    yield McpEvent("approval", request)
            self._added.append(turn)
            for call, shown in zip(mcp, turn["tool_calls"]):
                use, _ = self.toolset.by_name[call.name]
                if not use.needs_approval(call.name):
                    async for event in self._run(use, call.name, call.arguments, shown["id"], None):
                        yield event
            if asked:
                break
        else:
            self.notes.append(f"the model was still calling tools after {LIMITS.steps} steps (the mcp_steps "
                              "setting); the response ends there.")
        assert end is not None
        stats = end.stats and dataclasses.replace(end.stats, prompt_tokens=prompt, completion_tokens=completion)
        reason = "stop" if end.finish_reason == "tool_calls" and not self.calls else end.finish_reason
        yield End(reason, end.stop_sequence, stats, thought)
