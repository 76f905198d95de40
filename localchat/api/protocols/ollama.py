"""Ollama's API (/api): chat, generate, embed and the model routes, translated to and from the neutral
request. Answers stream as JSON lines unless `stream: false`; durations are nanoseconds.

What Ollama takes and this server cannot do is refused with a 400 that says so (images, `suffix`,
a client's own template, mirostat); options that only matter when a model loads (num_gpu,
num_thread...) are accepted, and the answer's `x_localchat.notes` says they were not applied, as it
says when `num_ctx` differs from the served context.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, AsyncIterator, Literal

from pydantic import Field
from starlette.requests import Request as HTTPRequest
from starlette.responses import JSONResponse, Response

from ... import __version__
from ...errors import LocalchatError, RequestError
from ...runtime.events import Stats, TokenLogprob
from ..embeddings import check_inputs
from ..model_calls import off_loop
from ..schemas import Body, parse
from ..service import Answer, AskedSampling, Delta, End, Generation, ModelInfo, Route, Service
from ..thinking import check_thinking
from ..tool_parser import ToolCall
from .ollama_models import listed, now, running, shown, untagged

MEDIA_TYPE = "application/x-ndjson"
# The Ollama release whose API this follows: clients turn features (tools, structured output) on by it.
OLLAMA_VERSION = "0.12.0"
# Options that take effect when Ollama loads a model; here the model is loaded once, with localchat's settings.
LOAD_OPTIONS = ("numa", "num_batch", "num_gpu", "main_gpu", "low_vram", "f16_kv", "logits_all", "vocab_only",
                "use_mmap", "use_mlock", "embedding_only", "num_thread", "num_keep")
# What each sampling field is called in Ollama's requests, for the errors that name one: in `options`,
# under the engine's own name but for two.
NAMES = {name: f"options.{name}" for name in AskedSampling.ASKABLE} | {
    "penalty_last_n": "options.repeat_last_n", "max_tokens": "options.num_predict", "logprobs": "top_logprobs"}


class Options(Body):
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    seed: int | None = None
    num_predict: int | None = None  # -1 (or -2): until the context is full
    stop: str | list[str] | None = None
    repeat_penalty: float | None = None
    repeat_last_n: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    num_ctx: int | None = None
    typical_p: float | None = None
    tfs_z: float | None = None
    mirostat: int | None = None


class OllamaMessage(Body):
    role: Literal["system", "user", "assistant", "tool"]
    content: str | None = None
    images: list[Any] | None = None
    tool_calls: list[Any] | None = None  # [{function: {name, arguments: {...}}}]
    tool_name: str | None = None  # the tool whose result a tool turn carries
    thinking: str | None = None  # an earlier answer's thinking


class _Generating(Body):
    model: str | None = None
    format: str | dict[str, Any] | None = None  # "json" or a JSON schema
    options: Options | None = None
    stream: bool | None = True  # Ollama streams unless told not to
    keep_alive: float | str | None = None  # seconds or "5m": for a model loaded by name; the served one stays
    think: bool | str | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = Field(None, ge=0, le=20)


class OllamaChatBody(_Generating):
    messages: list[OllamaMessage] = Field(default_factory=list)
    tools: list[Any] | None = None


class OllamaGenerateBody(_Generating):
    prompt: str | None = None
    system: str | None = None
    suffix: str | None = None
    template: str | None = None
    raw: bool | None = None
    images: list[Any] | None = None
    context: list[int] | None = None


class OllamaEmbedBody(Body):
    model: str | None = None
    input: str | list[str]
    truncate: bool = True
    dimensions: int | None = Field(None, ge=1)
    options: dict[str, Any] | None = None
    keep_alive: float | str | None = None


class OllamaEmbeddingsBody(Body):  # /api/embeddings, the route /api/embed replaced
    model: str | None = None
    prompt: str


class ShowBody(Body):
    model: str | None = None
    name: str | None = None  # what older clients send
    verbose: bool | None = None


# -- requests --------------------------------------------------------------------------------------


_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_SECONDS = re.compile(r"\d+(?:\.\d*)?|\.\d+")  # plain decimals: float() would take "nan" and "inf" too
_UNIT_S = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
MAX_KEEP_ALIVE_S = (2**63 - 1) / 1e9  # Ollama's bound: Go's longest time.Duration, about 292 years


def keep_alive_s(value: float | str | None) -> float | None:
    """Ollama's keep_alive in seconds: a number of seconds or a duration ("5m", "1h30m"); negative keeps
    the model loaded (inf); None: the server's setting. Finite and at most Ollama's own bound, else a
    RequestError (a NaN never unloaded, 1e300 broke /api/ps)."""
    if value is None:
        return None
    if isinstance(value, str):
        text = value.strip()
        sign = -1.0 if text.startswith("-") else 1.0
        text = text.lstrip("+-")
        if _SECONDS.fullmatch(text):
            seconds = float(text)
        else:
            pieces = _DURATION.findall(text)
            if not text or "".join(n + u for n, u in pieces) != text:
                raise RequestError(f"keep_alive {value!r} is not a duration; send seconds or one like \"5m\", "
                                   "\"1h30m\" (negative keeps the model loaded).", "keep_alive") from None
            seconds = sum(float(n) * _UNIT_S[u] for n, u in pieces)
        value = sign * seconds
    if isinstance(value, bool) or not math.isfinite(value):
        raise RequestError(f"keep_alive {value!r} is not a number of seconds; send one like 300 or \"5m\" "
                           "(negative keeps the model loaded).", "keep_alive")
    if value < 0:
        return math.inf
    if value > MAX_KEEP_ALIVE_S:
        raise RequestError(f"keep_alive {value!r} is longer than the {MAX_KEEP_ALIVE_S:.3g} s Ollama allows; send "
                           "a negative value to keep the model loaded.", "keep_alive")
    return float(value)


def _sampling(body: _Generating, notes: list[str], n_ctx: int) -> AskedSampling:
    o = body.options or Options()
    for name, off in (("mirostat", 0), ("typical_p", 1.0), ("tfs_z", 1.0)):
        if getattr(o, name) not in (None, off):
            raise RequestError(f"options.{name} is not supported by this server; leave it out (or {off}).",
                               f"options.{name}")
    if o.num_ctx is not None and o.num_ctx != n_ctx:
        notes.append(f"options.num_ctx {o.num_ctx} was not applied: this server's context is {n_ctx} tokens "
                     "(start it with --n-ctx to change that)")
    loading = [name for name in LOAD_OPTIONS if (o.model_extra or {}).get(name) is not None]
    if loading:
        notes.append(f"options {', '.join(loading)} were not applied: they take effect when a model loads, and "
                     "this server loaded its model with its own settings")
    stops = [o.stop] if isinstance(o.stop, str) else list(o.stop or [])
    limit = o.num_predict if o.num_predict is not None and o.num_predict >= 0 else None
    return AskedSampling.named_alike(o, NAMES, penalty_last_n=o.repeat_last_n, max_tokens=limit, stop=stops,
                                     logprobs=(body.top_logprobs or 0) if body.logprobs else None)


def _format(value: str | dict[str, Any] | None) -> dict[str, Any] | None:
    """Ollama's `format` as the neutral response format."""
    if value in (None, ""):
        return None
    if value == "json":
        return {"type": "json_object"}
    if isinstance(value, dict):
        return {"type": "json_schema", "json_schema": {"name": "format", "schema": value}}
    raise RequestError(f"format {value!r} is not supported; send \"json\" or a JSON schema object.", "format")


def _messages(body: OllamaChatBody) -> list[dict[str, Any]]:
    """Ollama's messages as neutral ones; a tool result answers the pending call of its tool (or the next)."""
    out: list[dict[str, Any]] = []
    pending: list[tuple[str, str]] = []  # (call id, tool name) of the last assistant turn's calls
    for i, message in enumerate(body.messages):
        if message.images:
            raise RequestError(f"messages.{i} has images; this model reads text only.", f"messages.{i}.images")
        text = message.content or ""
        if message.role == "assistant" and message.tool_calls:
            calls = [_past_call(call, i, j) for j, call in enumerate(message.tool_calls)]
            pending = [(c["id"], c["function"]["name"]) for c in calls]
            out.append({"role": "assistant", "content": text, "tool_calls": calls})
        elif message.role == "tool":
            match = next((p for p in pending if p[1] == message.tool_name), pending[0] if pending else None)
            if match is not None:
                pending.remove(match)
            out.append({"role": "tool", "content": text, "tool_call_id": match[0] if match else ""})
        else:
            out.append({"role": message.role, "content": text})
        if message.role == "assistant" and message.thinking:
            out[-1]["reasoning"] = message.thinking
    return out


def _past_call(call: Any, i: int, j: int) -> dict[str, Any]:
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise RequestError(f"messages.{i}.tool_calls.{j} must be {{'function': {{'name': ..., 'arguments': "
                           "{...}}}}.", f"messages.{i}.tool_calls.{j}")
    arguments = function.get("arguments")
    return {"id": f"call_{i}_{j}", "type": "function",
            "function": {"name": function["name"], "arguments": {} if arguments is None else arguments}}


# -- replies ---------------------------------------------------------------------------------------


def _ns(ms: float) -> int:
    return int(ms * 1_000_000)


def _final(end: End, notes: list[str]) -> dict[str, Any]:
    """The last object's fields: why it ended, the counts and durations (nanoseconds), localchat's numbers."""
    stats: Stats | None = end.stats
    out: dict[str, Any] = {"done": True, "done_reason": "length" if end.finish_reason == "length" else "stop"}
    if stats is not None:
        out |= {"total_duration": _ns(stats.total_ms), "load_duration": 0, "prompt_eval_count": stats.prompt_tokens,
                "prompt_eval_duration": _ns(stats.ttft_ms), "eval_count": stats.completion_tokens,
                "eval_duration": _ns(max(stats.total_ms - stats.ttft_ms, 0.0))}
    own = stats.to_dict() if stats is not None else {}
    out["x_localchat"] = {**own, "notes": notes} if notes else own
    return out


def _call(call: ToolCall) -> dict[str, Any]:
    return {"function": {"name": call.name, "arguments": json.loads(call.arguments)}}


def _logprobs(tokens: list[TokenLogprob]) -> list[dict[str, Any]]:
    return [{"token": t.token, "logprob": t.logprob, "bytes": list(t.bytes),
             "top_logprobs": [{"token": s, "logprob": lp, "bytes": list(b)} for s, b, lp in t.top]} for t in tokens]


class Reply:
    """One answer as Ollama's objects: chat (`message`) or generate (`response`)."""

    def __init__(self, chat: bool, model: str, notes: list[str]) -> None:
        self.chat, self.model, self.notes = chat, model, notes

    def shaped(self, content: str, calls: list[ToolCall], logprobs: list[TokenLogprob],
               thinking: str = "") -> dict[str, Any]:
        out: dict[str, Any] = {"model": self.model, "created_at": now()}
        if self.chat:
            message: dict[str, Any] = {"role": "assistant", "content": content}
            if thinking:
                message["thinking"] = thinking
            if calls:
                message["tool_calls"] = [_call(c) for c in calls]
            out["message"] = message
        else:
            out["response"] = content
            if thinking:
                out["thinking"] = thinking
        if logprobs:
            out["logprobs"] = _logprobs(logprobs)
        return out

    async def whole(self, answer: Answer) -> dict[str, Any]:
        async for event in answer.events():
            if isinstance(event, End):
                return {**self.shaped("".join(answer.content), answer.calls, answer.logprobs,
                                      "".join(answer.reasoning)), **_final(event, self.notes)}
        raise AssertionError("an answer's events end with End")

    async def lines(self, answer: Answer) -> AsyncIterator[bytes]:
        try:
            async for event in answer.events():
                if isinstance(event, Delta) and (event.content or event.reasoning or event.calls or event.logprobs):
                    yield _line({**self.shaped(event.content, event.calls, event.logprobs, event.reasoning),
                                 "done": False})
                elif isinstance(event, End):
                    yield _line({**self.shaped("", [], []), **_final(event, self.notes)})
        except LocalchatError as exc:
            yield _line({"error": str(exc)})  # the status line is gone: Ollama's clients read the error here


def _line(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n"


async def _answer(service: Service, generation: Generation, request: HTTPRequest, shape: Reply) -> Response:
    answer = await service.generate(generation, request)
    if generation.stream:
        return answer.streamed(shape.lines(answer), MEDIA_TYPE)
    return await answer.whole(request, shape.whole)


def _loaded(model: str, chat: bool, info: ModelInfo) -> Response:
    """The answer to a request with nothing to generate: Ollama's way to load a model (or, with a keep_alive
    of 0, to unload it)."""
    out: dict[str, Any] = {"model": model, "created_at": now()}
    out |= {"message": {"role": "assistant", "content": ""}} if chat else {"response": ""}
    return JSONResponse({**out, "done_reason": "load" if info.loaded else "unload", "done": True})


# -- routes ----------------------------------------------------------------------------------------


async def chat(service: Service, data: Any, request: HTTPRequest) -> Response:
    body = parse(OllamaChatBody, data)
    keep = keep_alive_s(body.keep_alive)
    info = await service.load(untagged(body.model), keep)  # its context is known once it is loaded
    notes: list[str] = []
    generation = Generation(messages=_messages(body), model=untagged(body.model),
                            sampling=_sampling(body, notes, info.n_ctx), tools=body.tools or None,
                            response_format=_format(body.format), format_param="format", stream=body.stream is not False,
                            keep_alive_s=keep, thinking=check_thinking(body.think, "think"),
                            thinking_param="think")
    if not generation.messages:
        return _loaded(body.model or info.name, True, info)
    return await _answer(service, generation, request, Reply(True, body.model or info.name, notes))


async def generate(service: Service, data: Any, request: HTTPRequest) -> Response:
    body = parse(OllamaGenerateBody, data)
    keep = keep_alive_s(body.keep_alive)
    for name in ("suffix", "template", "images", "context"):
        if getattr(body, name):
            raise RequestError(f"{name} is not supported by this server; leave it out (a conversation goes to "
                               "/api/chat as messages).", name)
    if body.raw and body.system:
        raise RequestError("system has no place in a raw prompt; write it into the prompt, or drop raw.", "system")
    info = await service.load(untagged(body.model), keep)
    notes: list[str] = []
    sampling = _sampling(body, notes, info.n_ctx)
    if not body.prompt:
        return _loaded(body.model or info.name, False, info)
    turns = [{"role": "system", "content": body.system}] if body.system else []
    generation = Generation(model=untagged(body.model), sampling=sampling, response_format=_format(body.format),
                            format_param="format", stream=body.stream is not False, keep_alive_s=keep,
                            thinking=check_thinking(body.think, "think"), thinking_param="think")
    if body.raw:
        generation.prompt = body.prompt
    else:  # the chat template around the prompt, as Ollama does
        generation.messages = [*turns, {"role": "user", "content": body.prompt}]
    return await _answer(service, generation, request, Reply(False, body.model or info.name, notes))


async def embed(service: Service, data: Any, request: HTTPRequest) -> Response:
    body = parse(OllamaEmbedBody, data)
    done = await service.embed(check_inputs(body.input), untagged(body.model), body.dimensions, body.truncate)
    return JSONResponse({"model": body.model or done.model, "embeddings": done.vectors, "prompt_eval_count": done.tokens})


async def embeddings(service: Service, data: Any, request: HTTPRequest) -> Response:
    body = parse(OllamaEmbeddingsBody, data)
    done = await service.embed(check_inputs(body.prompt), untagged(body.model), truncate=True)
    return JSONResponse({"embedding": done.vectors[0]})


async def tags(service: Service, data: Any, request: HTTPRequest) -> Response:
    return JSONResponse({"models": [listed(m) for m in service.models()]})


async def ps(service: Service, data: Any, request: HTTPRequest) -> Response:
    # Off the loop: each loaded model's runner is asked for its GPUs' memory.
    return JSONResponse({"models": await off_loop(lambda: [running(m) for m in service.models() if m.loaded])})


async def show(service: Service, data: Any, request: HTTPRequest) -> Response:
    body = parse(ShowBody, data)
    name = body.model or body.name
    if not name:
        raise RequestError("model is required: send the name of the model to show.", "model")
    return JSONResponse(shown(service.model(untagged(name))))


async def version(service: Service, data: Any, request: HTTPRequest) -> Response:
    return JSONResponse({"version": OLLAMA_VERSION, "x_localchat": {"version": __version__}})


ROUTES = [
    Route("GET", "/api/version", version),
    Route("GET", "/api/tags", tags),
    Route("GET", "/api/ps", ps),
    Route("POST", "/api/show", show),
    Route("POST", "/api/chat", chat),
    Route("POST", "/api/generate", generate),
    Route("POST", "/api/embed", embed),
    Route("POST", "/api/embeddings", embeddings),
]
