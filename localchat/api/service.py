"""The seam every API protocol shares: one protocol-neutral request (`Generation`), the answer's events
(`Answer`), and the `Service` that answers them (api/local.py, on a local engine).

A protocol (api/protocols/) only translates: its request body into a Generation, the Answer's events
into its own replies. Driving the engine (the model check, the system prompt, the prompt's size,
tools and schemas as grammars, the time budget, the client leaving) happens once, behind the Service.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, AsyncIterator, Awaitable, Callable, Mapping, Protocol, Union

from starlette.requests import Request as HTTPRequest
from starlette.responses import JSONResponse, Response, StreamingResponse

from ..errors import EngineError
from ..runtime.events import Done, Failed, PrefillProgress, Stats, TextDelta, TokenLogprob
from ..runtime.sampling import SamplingParams
from ..runtime.templates.thinking import Thought
from .bridge import StreamBridge, wait_for_disconnect
from .reader import OutputReader, Piece
from .tool_parser import ToolCall

# Proxies (nginx) buffer responses unless told not to; a buffered stream arrives all at once.
STREAM_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
# What the server did that the client did not ask for, in every protocol (Anthropic's and Ollama's bodies have
# no field for it): the Answer's notes, joined by "; ".
NOTES_HEADER = "X-Localchat-Notes"


class AskedSampling:
    """The sampling a request asks for, by SamplingParams' own field names (runtime/sampling.py declares
    them, their defaults and their limits once); what it leaves out (None) takes the server's defaults.
    `names`: what the request's protocol calls a field, for the errors that name one."""

    # What a request may set: every field but the benchmarks' ignore_eos and the grammar (made from
    # the request's tools and formats, api/constraints.py).
    ASKABLE = frozenset(f.name for f in dataclasses.fields(SamplingParams)) - {"ignore_eos", "grammar"}

    def __init__(self, names: Mapping[str, str] | None = None, **asked: Any) -> None:
        unknown = set(asked) - self.ASKABLE
        if unknown:
            raise TypeError(f"not sampling fields: {', '.join(sorted(unknown))}")
        self.asked = {name: value for name, value in asked.items() if value is not None}
        self.names = dict(names or {})

    @classmethod
    def named_alike(cls, body: Any, names: Mapping[str, str] | None = None, **renamed: Any) -> "AskedSampling":
        """The sampling fields a request body (a pydantic model) names as SamplingParams does, and the ones
        `renamed` (given already in the engine's terms: another name, or a value to convert)."""
        same = {name: getattr(body, name) for name in cls.ASKABLE & set(type(body).model_fields) - set(renamed)}
        return cls(names, **same, **renamed)

    def over(self, defaults: SamplingParams | None = None) -> SamplingParams:
        """SamplingParams with the fields the client set, the server's defaults for the rest; checked."""
        params = dataclasses.replace(defaults) if defaults is not None else SamplingParams()
        asked = dict(self.asked)
        top_p, seed = asked.pop("top_p", None), asked.pop("seed", None)
        # A request's stop strings and logprobs are its own: the server's never add to them.
        params.stop = [s for s in asked.pop("stop", []) if s]  # an empty stop string would end every answer
        params.logprobs = asked.pop("logprobs", None)  # None: none; 0-20: each token's, with that many others
        for name, value in asked.items():
            setattr(params, name, value)
        if top_p == 0.0:  # keep only the most likely token: that is greedy decoding
            params.temperature = 0.0
        elif top_p is not None:
            params.top_p = top_p
        # -1 is the llama.cpp servers' "random seed"; OpenAI seeds are 64-bit, llama.cpp's are 32.
        if seed is not None and seed != -1:
            params.seed = seed % 2**32
        params.validate(self.names)
        return params


@dataclass(slots=True)
class Generation:
    """One request to generate, whatever protocol it came in: a chat (`messages`) or a raw `prompt`.

    Messages are plain dicts: role (system, user, assistant, tool), content (text), an assistant turn's
    `tool_calls` ([{id, function: {name, arguments}}], arguments as JSON text or an object) and a tool
    turn's `tool_call_id`. Tools are function tools ({type: function, function: {name, parameters}})."""

    messages: list[dict[str, Any]] | None = None
    prompt: str | None = None
    model: str | None = None
    sampling: AskedSampling = field(default_factory=AskedSampling)
    tools: list[Any] | None = None
    tool_choice: str | dict[str, Any] | None = None  # auto | none | required | {function: {name}}
    parallel_tool_calls: bool | None = None
    # OpenAI's shape ({type: text | json_object | json_schema, json_schema: {schema}}), whatever the protocol
    response_format: dict[str, Any] | None = None
    format_param: str | None = None  # where another protocol put it (Ollama's "format"), for its errors
    grammar: str | None = None  # the client's own GBNF (prompt requests only)
    stream: bool = False
    # What to do when the chat is longer than the context (runtime/overflow.py); the API's default, as
    # OpenAI's, is to refuse.
    context_overflow: str = "refuse"
    keep_alive_s: float | None = None  # how long a model loaded by name stays loaded after this (Ollama's)
    # A thinking model's switch: None leaves the template's default; False/True: off/on; "low" | "medium" |
    # "high": its effort (gpt-oss). A budget (tokens) closes the thinking when it is spent.
    thinking: bool | str | None = None
    thinking_budget: int | None = None
    # Where the protocol asks for thinking, when it refuses it for a model that does not think (Ollama's
    # `think`, as Ollama does); None: asked of a model without, it is ignored and a note says so (Anthropic's
    # `thinking`: llama.cpp's server takes it, and coding agents send it always).
    thinking_param: str | None = None
    template_kwargs: dict[str, Any] | None = None  # variables for the chat template (chat_template_kwargs)


@dataclass(slots=True)
class Started:
    """The prompt is read in: how many tokens it is."""

    prompt_tokens: int


@dataclass(slots=True)
class Delta:
    """New output: content text and tool-call pieces, the model's raw text, its tokens' logprobs, and the
    calls this delta finished."""

    pieces: list[Piece]
    text: str
    logprobs: list[TokenLogprob] = field(default_factory=list)
    calls: list[ToolCall] = field(default_factory=list)

    @property
    def content(self) -> str:
        return "".join(p for p in self.pieces if isinstance(p, str))

    @property
    def reasoning(self) -> str:
        return "".join(p.text for p in self.pieces if isinstance(p, Thought))


@dataclass(slots=True)
class End:
    """The end of the answer. finish_reason: stop | length | tool_calls | cancelled."""

    finish_reason: str
    stop_sequence: str | None
    stats: Stats | None
    reasoning_tokens: int = 0  # of the answer's tokens, those it thought in


Event = Union[Started, Delta, End]


@dataclass(slots=True)
class ThinkingBudget:
    """A thinking budget: after `tokens` of thinking the answer goes on from its text so far and `close`
    (the model's closing marker), `resubmit` starting the engine on that forced beginning."""

    tokens: int
    close: str
    resubmit: Callable[[str], Awaitable[StreamBridge]]


class Replying:
    """What goes out as one reply: read whole or streamed; `cancel()` ends the work behind it; `notes` say what
    the server did that the client did not ask for."""

    notes: list[str]

    def cancel(self) -> None:
        raise NotImplementedError

    async def whole(self, request: HTTPRequest, shape: Callable[[Any], Awaitable[dict[str, Any]]],
                    status: int = 200) -> Response:
        """The answer as one JSON object, built by `shape` (which reads the events); a 499 if the client left."""
        collecting = asyncio.ensure_future(shape(self))
        leaving = asyncio.ensure_future(wait_for_disconnect(request))
        try:
            await asyncio.wait({collecting, leaving}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            leaving.cancel()
        if not collecting.done():  # the client left: nobody will read the answer
            self.cancel()
            collecting.cancel()
            return Response(status_code=499)
        return JSONResponse(collecting.result(), status_code=status, headers=self._notes_header())

    def streamed(self, chunks: AsyncIterator[bytes], media_type: str) -> StreamingResponse:
        """The answer as a stream of `chunks` (written from the events), with the notes known when it starts."""
        return StreamingResponse(chunks, media_type=media_type, headers={**STREAM_HEADERS, **self._notes_header()})

    def _notes_header(self) -> dict[str, str]:
        # A header is Latin-1 on the wire: anything else in a note goes as "?".
        text = "; ".join(self.notes).encode("ascii", "replace").decode("ascii")
        return {NOTES_HEADER: text[:2000]} if text else {}


class Answer(Replying):
    """One answer's events, read once; leaving early (or a client leaving) cancels the request."""

    def __init__(self, bridge: StreamBridge, model: str, reader: OutputReader | None = None,
                 notes: list[str] | None = None, budget: ThinkingBudget | None = None) -> None:
        self.bridge = bridge
        self.model = model  # the name the answer goes out under
        self.reader = reader
        self.notes = notes or []  # what the server did that the client did not ask for ("2 early turns left out")
        self.budget = budget
        self.content: list[str] = []  # the content so far
        self.reasoning: list[str] = []  # the thinking so far
        self.logprobs: list[TokenLogprob] = []  # every token's so far (when asked for)
        self._raw: list[str] = []  # the model's text so far, as written
        self._budget_spent = False

    @property
    def calls(self) -> list[ToolCall]:
        return self.reader.calls if self.reader is not None else []

    def cancel(self) -> None:
        self.bridge.cancel()

    def turns(self) -> list[dict[str, Any]]:
        """The answer as the conversation keeps it: one assistant turn (its thinking and calls with it)."""
        turn: dict[str, Any] = {"role": "assistant", "content": "".join(self.content)}
        if self.reasoning:
            turn["reasoning"] = "".join(self.reasoning)
        if self.calls:
            turn["tool_calls"] = [{"id": c.id, "type": "function",
                                   "function": {"name": c.name, "arguments": c.arguments}} for c in self.calls]
        return [turn]

    async def events(self) -> AsyncIterator[Event]:
        """Started, Deltas, then End; a failure of the engine raises its LocalchatError (the model's own text
        never does)."""
        started, stats = False, None
        try:
            while True:
                bridge, self._budget_spent = self.bridge, False
                async for event in bridge.events():
                    if isinstance(event, PrefillProgress) and not started:
                        started = True
                        yield Started(event.total)
                    elif isinstance(event, TextDelta):
                        delta = self._feed(event.text, event.logprobs)
                        if delta.pieces or delta.logprobs:
                            yield delta
                        if self._over_budget():
                            break
                    elif isinstance(event, Stats):
                        stats = event
                    elif isinstance(event, Failed):
                        raise event.error
                    elif isinstance(event, Done):
                        end = self._end(event, stats)
                        delta = end[0]
                        if delta.pieces:
                            yield delta
                        yield end[1]
                        return
                if not self._budget_spent:
                    raise EngineError("the engine ended this request without an answer; try again.")
                await self._close_thinking(bridge)
        finally:
            self.bridge.cancel()  # a reader that left ends the request early

    def _over_budget(self) -> bool:
        reader, budget = self.reader, self.budget
        self._budget_spent = bool(budget and reader and reader.thinking and reader.thought_deltas >= budget.tokens)
        return self._budget_spent

    async def _close_thinking(self, spent: StreamBridge) -> None:
        """The budget is spent: the answer goes on from its text so far with the thinking closed."""
        assert self.budget is not None and self.reader is not None
        spent.cancel()
        close = "\n" + self.budget.close + "\n\n"
        self.bridge = await self.budget.resubmit("".join(self._raw) + close)
        self._raw.append(close)
        self.reader.feed(close)
        self.budget = None
        self.notes.append("the thinking budget was spent, so the thinking was closed there.")

    def _end(self, done: Done, stats: Stats | None) -> tuple[Delta, End]:
        cut = done.finish_reason == "length"
        delta = self._finish(cut)
        if self.reader is not None and self.reader.broken is not None:
            self.notes.append(f"{self.reader.broken}; its text is in the content.")
        # A reply cut by max_tokens says so (OpenAI's "length"), with the calls that closed before it.
        reason = "tool_calls" if self.calls and not cut else done.finish_reason
        thought = self.reader.thought_deltas if self.reader is not None else 0
        return delta, End(reason, done.stop_sequence, stats, thought)

    def _feed(self, text: str, logprobs: list[TokenLogprob]) -> Delta:
        known = len(self.calls)
        self._raw.append(text)
        pieces = self.reader.feed(text) if self.reader is not None else [text]
        self._keep(pieces)
        self.logprobs += logprobs
        return Delta(pieces, text, logprobs, self.calls[known:])

    def _finish(self, cut: bool) -> Delta:
        known = len(self.calls)
        pieces = self.reader.finish(cut) if self.reader is not None else []
        self._keep(pieces)
        return Delta(pieces, "", [], self.calls[known:])

    def _keep(self, pieces: list[Piece]) -> None:
        self.content += [p for p in pieces if isinstance(p, str)]
        self.reasoning += [p.text for p in pieces if isinstance(p, Thought)]

@dataclass(slots=True)
class ModelInfo:
    """What the protocols say about a model: its names, its size and kind, its context."""

    name: str
    created: int
    kind: str = "chat"  # chat | embedding
    aliases: set[str] = field(default_factory=set)
    path: Path | None = None
    description: str = ""  # "llama, 135M parameters, Q4_1"
    n_ctx: int = 0  # the served context (chat) or the trained one (embedding)
    n_embd: int | None = None
    template: str = ""  # the chat template's source
    gpu_layers: int = 0  # layers offloaded to a GPU (-1: all), as configured
    device_bytes: int = 0  # what its workers hold in GPU memory, as llama.cpp placed them
    placed: str = ""  # where its layers went, in words ("31/31 layers on Vulkan0 (1.2 GB)")
    # Its GPUs' memory, read when called (/api/ps): each device's name, what the model holds there, free, total.
    device_memory: Callable[[], list[dict]] | None = None
    defaults: SamplingParams | None = None  # what a request leaves out
    loaded: bool = True  # False: a model on this machine that a request naming it loads (runners/pool.py)
    expires_at: float = math.inf  # time.time() it unloads at if no request comes (inf: never)


@dataclass(slots=True)
class Embedded:
    """Vectors for a request's inputs, the model's name as asked, and the tokens read."""

    model: str
    vectors: list[list[float]]
    tokens: int


class Service(Protocol):
    """What answers the protocols' routes: a local engine (LocalService). --backend forwards instead
    (api/proxy.py: ProxyService), with no Service behind it."""

    async def generate(self, generation: Generation, request: HTTPRequest) -> Answer: ...
    async def count_tokens(self, generation: Generation, request: HTTPRequest) -> int: ...
    def models(self) -> list[ModelInfo]: ...  # the models offered for chat, the served one first
    def model(self, name: str | None) -> ModelInfo: ...  # any model by name, embedding ones too
    async def load(self, name: str | None, keep_alive_s: float | None) -> ModelInfo: ...  # 0: unload it
    async def embed(self, inputs: list[str] | list[list[int]], model: str | None, dimensions: int | None = None,
                    truncate: bool = False) -> Embedded: ...
    async def aclose(self) -> None: ...



Handler = Callable[[Service, Any, HTTPRequest], Awaitable[Response]]


@dataclass(frozen=True, slots=True)
class Route:
    """One route of a protocol: `handle(service, body, request)`; body: the decoded JSON (None for GET)."""

    method: str
    path: str
    handle: Handler
