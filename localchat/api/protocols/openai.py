"""OpenAI's API (/v1): models, chat completions, text completions, embeddings, translated to and from
the neutral request; the replies' shapes are in openai_reply.py."""

from __future__ import annotations

import base64
import dataclasses
from typing import Any

import numpy as np
from starlette.requests import Request as HTTPRequest
from starlette.responses import JSONResponse, Response

from ...runtime.templates.chat_template import check_switches
from ..embeddings import check_inputs
from ..schemas import ChatBody, CompletionBody, EmbeddingsBody, parse
from ..service import Answer, AskedSampling, Generation, ModelInfo, Route, Service
from ..thinking import check_thinking
from .openai_reply import Reply

MEDIA_TYPE = "text/event-stream"


def card(info: ModelInfo) -> dict[str, Any]:
    """A model as /v1/models lists it; localchat's own facts in a field OpenAI's clients ignore."""
    if info.kind == "embedding":
        own: dict[str, Any] = {"kind": "embedding", "n_embd": info.n_embd, "n_ctx": info.n_ctx, "loaded": info.loaded}
    else:
        own = {"description": info.description, "n_ctx": info.n_ctx, "aliases": sorted(info.aliases - {info.name}),
               "loaded": info.loaded}
    return {"id": info.name, "object": "model", "created": info.created, "owned_by": "localchat", "x_localchat": own}


async def list_models(service: Service, data: Any, request: HTTPRequest) -> Response:
    # The chat model only: clients offer every listed model for chat. An embedding model is found by name.
    return JSONResponse({"object": "list", "data": [card(m) for m in service.models()]})


async def get_model(service: Service, data: Any, request: HTTPRequest) -> Response:
    return JSONResponse(card(service.model(request.path_params["model_id"])))


async def chat(service: Service, data: Any, request: HTTPRequest) -> Response:
    body = parse(ChatBody, data)
    body.check()
    generation = Generation(messages=body.turns(), model=body.model, sampling=body.asked(), tools=body.tools,
                            tool_choice=body.tool_choice, parallel_tool_calls=body.parallel_tool_calls,
                            response_format=body.response_format, stream=bool(body.stream),
                            context_overflow=body.x_localchat.context_overflow, grammar=body.grammar,
                            thinking=check_thinking(body.reasoning_effort, "reasoning_effort"),
                            template_kwargs=check_switches(body.chat_template_kwargs))
    return await _reply(service, generation, request, body.include_usage, body.n or 1, chat=True)


async def completions(service: Service, data: Any, request: HTTPRequest) -> Response:
    body = parse(CompletionBody, data)
    generation = Generation(prompt=body.text(), model=body.model, sampling=body.asked(), grammar=body.grammar,
                            response_format=body.response_format, stream=bool(body.stream))
    return await _reply(service, generation, request, body.include_usage, body.n or 1, chat=False)


async def _reply(service: Service, generation: Generation, request: HTTPRequest, include_usage: bool, n: int,
                 chat: bool) -> Response:
    """The answer, or `n` answers to the same request (each its own sequence in the engine) as its choices."""
    answers: list[Answer] = []
    try:
        for choice in _choices(generation, n):
            answers.append(await service.generate(choice, request))
    except BaseException:  # the choices started already have nobody to read them
        for answer in answers:
            answer.cancel()
        raise
    first, reply = answers[0], Reply(chat, answers[0].model)
    if generation.stream:
        return first.streamed(reply.chunks(answers, include_usage), MEDIA_TYPE)
    # Answer.whole ends the reading when the client leaves; reading all the choices, it ends them all.
    return await first.whole(request, lambda _: reply.whole(answers))


def _choices(generation: Generation, n: int) -> list[Generation]:
    """`n` copies of a request; with a seed, each its own (seed, seed + 1, ...), so sampled choices differ and
    each is reproducible (greedy choices are the same answer n times, as other servers give them)."""
    if n == 1:
        return [generation]
    asked = generation.sampling.asked
    seed = asked.get("seed")
    seeds = [seed + i if seed is not None and seed != -1 else seed for i in range(n)]
    return [dataclasses.replace(generation, sampling=AskedSampling(generation.sampling.names,
                                                                   **{**asked, "seed": s})) for s in seeds]


async def embeddings(service: Service, data: Any, request: HTTPRequest) -> Response:
    """The embedding model's vectors (or, named in `model`, the served model's in embedding mode)."""
    body = parse(EmbeddingsBody, data)
    done = await service.embed(check_inputs(body.input), body.model, body.dimensions)
    base64_out = body.encoding_format == "base64"
    data_out = [{"object": "embedding", "index": i,
                 "embedding": base64.b64encode(np.asarray(v, dtype="<f4").tobytes()).decode("ascii") if base64_out
                 else v} for i, v in enumerate(done.vectors)]
    return JSONResponse({"object": "list", "data": data_out, "model": done.model,
                         "usage": {"prompt_tokens": done.tokens, "total_tokens": done.tokens}})


ROUTES = [
    Route("GET", "/v1/models", list_models),
    Route("GET", "/v1/models/{model_id:path}", get_model),
    Route("POST", "/v1/chat/completions", chat),
    Route("POST", "/v1/completions", completions),
    Route("POST", "/v1/embeddings", embeddings),
]
