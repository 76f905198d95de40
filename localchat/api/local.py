"""The API served by a local engine: OpenAI responses and SSE chunks built from engine events."""

from __future__ import annotations

import asyncio
import secrets
import time
from pathlib import Path
from typing import Any, AsyncIterator, Callable

from starlette.requests import Request as HTTPRequest
from starlette.responses import JSONResponse, Response, StreamingResponse

from ..errors import ContextOverflowError, EngineError, LocalchatError, ModelNotFoundError, RequestError
from ..runtime.chat_template import check_prompt_size
from ..runtime.template_sandbox import Budget
from ..runtime.engine import Engine, Request
from ..runtime.events import Done, Failed, Stats, TextDelta
from ..runtime.sampling import SamplingParams
from .bridge import StreamBridge, wait_for_disconnect
from .chat_output import ChoiceOutput
from .constraints import constrain, grammar_of, raw_grammar, response_grammar
from .embeddings import embedding_card, embeddings_response
from .schemas import ChatBody, CompletionBody, parse
from .tool_parser import ToolCallParser
from .wire import error_body, sse

# Proxies (nginx) buffer responses unless told not to; a buffered stream arrives all at once.
STREAM_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def served_name(model: str) -> str:
    """The name clients use for a model: the catalog name, or a file's name without .gguf."""
    path = Path(model)
    return path.stem if path.suffix.lower() == ".gguf" else model


def names_of(model_name: str, path: Path | None) -> set[str]:
    """Every name a client may use for the served model: its id, its file's name, its catalog name."""
    names = {model_name}
    if path is not None:
        names |= {path.name, path.stem}
        try:
            from ..models.catalog import load_catalog
            names |= {key for key, facts in load_catalog().items()
                      if any(f.file == path.name for f in facts.files.values())}
        except Exception:  # a broken catalog must not stop the server; the other names still work
            pass
    return names


class LocalService:
    """Answers /v1 requests with a local Engine."""

    def __init__(self, engine: Engine, model_name: str, defaults: SamplingParams | None = None,
                 system_prompt: str = "") -> None:
        self.engine = engine
        self.model_name = model_name
        self.defaults = defaults or SamplingParams()  # what a request leaves out
        self.system_prompt = system_prompt  # the system turn of a chat request that has none
        self.created = int(time.time())
        self._budgets: set[Budget] = set()  # requests being rendered and tokenized right now
        self.aliases = names_of(model_name, getattr(engine.worker, "model_path", None))

    def _card(self) -> dict[str, Any]:
        return {"id": self.model_name, "object": "model", "created": self.created, "owned_by": "localchat",
                "x_localchat": {"description": self.engine.worker.describe(), "n_ctx": self.engine.n_ctx,
                                "aliases": sorted(self.aliases - {self.model_name})}}

    async def models(self, request: HTTPRequest) -> Response:
        # The chat model only: clients offer every listed model for chat. An embedding model is found by name.
        return JSONResponse({"object": "list", "data": [self._card()]})

    async def model(self, model_id: str, request: HTTPRequest) -> Response:
        card = embedding_card(model_id, self.created)
        if card is not None:
            return JSONResponse(card)
        self._check_model(model_id)
        return JSONResponse(self._card())

    async def chat(self, data: Any, request: HTTPRequest) -> Response:
        return await self._generate(parse(ChatBody, data), "chat", request)

    async def completions(self, data: Any, request: HTTPRequest) -> Response:
        return await self._generate(parse(CompletionBody, data), "text", request)

    async def embeddings(self, data: Any, request: HTTPRequest) -> Response:
        """The embedding model's vectors (or, named in `model`, the served model's in embedding mode)."""
        return await embeddings_response(data, self.aliases, getattr(self.engine.worker, "model_path", None))

    async def aclose(self) -> None:
        """Stop prompts still being prepared (shutdown must not wait on them); the engine is not ours."""
        for budget in list(self._budgets):
            budget.cancel()

    # -- generation ----------------------------------------------------------------------------

    def _check_model(self, name: str | None) -> None:
        # A missing (or empty) model is accepted: there is one model, and some clients leave it out.
        if name and name not in self.aliases:
            raise ModelNotFoundError(f"the model '{name}' is not served here; use '{self.model_name}' "
                                     "(GET /v1/models lists it).")

    async def _generate(self, body: ChatBody | CompletionBody, kind: str, request: HTTPRequest) -> Response:
        self._check_model(body.model)
        engine_request = body.to_request(self.defaults)
        sampling, output = engine_request.sampling, ChoiceOutput(kind == "chat")
        sampling.logprobs = body.top()
        if isinstance(body, ChatBody):
            if self.system_prompt and not any(m["role"] == "system" for m in engine_request.messages or []):
                engine_request.messages = [{"role": "system", "content": self.system_prompt},
                                           *(engine_request.messages or [])]
            texts = [m["content"] for m in engine_request.messages or []]
            check_prompt_size(texts, self.engine.n_ctx)  # before any work on the messages
            plan = constrain(engine_request.messages or [], self.engine.template.source, body.tools,
                             body.tool_choice, body.parallel_tool_calls, body.response_format)
            sampling.grammar = grammar_of(plan)
            if plan.names:
                output.parser = ToolCallParser(plan.fmt, plan.names)
            # The template renders here, within the request's time budget: tools go in beside messages.
            build = lambda: Request(prompt=self.engine.template.render(plan.messages, tools=plan.tools),  # noqa: E731
                                    sampling=sampling)
        else:
            if body.grammar and body.response_format:
                raise RequestError("send grammar or response_format, not both.", "grammar")
            sampling.grammar = raw_grammar(body.grammar) or response_grammar(body.response_format)
            check_prompt_size([engine_request.prompt or ""], self.engine.n_ctx)
            build = lambda: engine_request  # noqa: E731
        try:
            stream = await self._submit(build, request)
        except ContextOverflowError as exc:
            exc.param = "messages" if kind == "chat" else "prompt"
            raise
        reply = _Reply(kind, self.model_name, output)
        bridge = StreamBridge(stream)
        if body.stream:
            return StreamingResponse(reply.chunks(bridge, body.include_usage), media_type="text/event-stream",
                                     headers=STREAM_HEADERS)
        collecting = asyncio.ensure_future(reply.collect(bridge))
        leaving = asyncio.ensure_future(wait_for_disconnect(request))
        try:
            await asyncio.wait({collecting, leaving}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            leaving.cancel()
        if not collecting.done():  # the client left: nobody will read the answer
            bridge.cancel()
            collecting.cancel()
            return Response(status_code=499)
        return JSONResponse(collecting.result())

    async def _submit(self, build: Callable[[], Request], request: HTTPRequest) -> Any:
        """engine.submit(build()) off the event loop, within a time budget, stopped when the client leaves."""
        budget = Budget()
        self._budgets.add(budget)
        # Rendering and tokenizing a long prompt take a while; the event loop stays free meanwhile.
        submitting = asyncio.ensure_future(asyncio.to_thread(budget.run, lambda: self.engine.submit(build())))
        leaving = asyncio.ensure_future(wait_for_disconnect(request))
        try:
            await asyncio.wait({submitting, leaving}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            leaving.cancel()
            if not submitting.done():
                budget.cancel()
            self._budgets.discard(budget)
        if not submitting.done():  # the client left: the thread stops at its next check
            submitting.add_done_callback(_cancel_stream)
            raise RequestError("the client went away before its prompt was read.")
        return submitting.result()


def _cancel_stream(done: "asyncio.Future[Any]") -> None:
    if not done.cancelled() and done.exception() is None:
        done.result().cancel()  # submitted after all, for nobody


class _Reply:
    """One response's identity (id, created, model) and its shape for chat or text completions."""

    def __init__(self, kind: str, model: str, output: ChoiceOutput) -> None:
        self.chat = kind == "chat"
        self.id = ("chatcmpl-" if self.chat else "cmpl-") + secrets.token_hex(12)
        self.created = int(time.time())
        self.model = model
        self.output = output

    def _envelope(self, obj: str, choices: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model,
                "system_fingerprint": "localchat", "choices": choices, **extra}

    async def collect(self, bridge: StreamBridge) -> dict[str, Any]:
        """The whole answer as one OpenAI response object."""
        try:
            return await self._collect(bridge)
        finally:
            bridge.cancel()  # a broken tool call ends the request early

    async def _collect(self, bridge: StreamBridge) -> dict[str, Any]:
        out = self.output
        stats: Stats | None = None
        async for event in bridge.events():
            if isinstance(event, TextDelta):
                out.feed(event.text)
                out.add_logprobs(event.logprobs, event.text)
            elif isinstance(event, Stats):
                stats = event
            elif isinstance(event, Failed):
                raise event.error
            elif isinstance(event, Done):
                out.finish()
                choice: dict[str, Any] = {"index": 0, "finish_reason": out.finish_reason(event.finish_reason),
                                          "logprobs": out.all_logprobs()}
                if self.chat:
                    choice["message"] = out.message()
                else:
                    choice["text"] = "".join(out.text)
                obj = "chat.completion" if self.chat else "text_completion"
                return self._envelope(obj, [choice], usage=_usage(stats), x_localchat=_extras(stats))
        raise EngineError("the engine ended this request without an answer; try again.")

    async def chunks(self, bridge: StreamBridge, include_usage: bool) -> AsyncIterator[bytes]:
        """The answer as server-sent events, ending with [DONE]."""
        obj = "chat.completion.chunk" if self.chat else "text_completion"
        extra: dict[str, Any] = {"usage": None} if include_usage else {}
        out = self.output

        def chunk(pieces: list[Any], finish: str | None = None, logprobs: Any = None, **more: Any) -> bytes:
            if self.chat:
                choice = {"index": 0, "delta": out.delta(pieces), "finish_reason": finish, "logprobs": logprobs}
            else:
                text = "".join(p for p in pieces if isinstance(p, str))
                choice = {"index": 0, "text": text, "finish_reason": finish, "logprobs": logprobs}
            return sse(self._envelope(obj, [choice], **{**extra, **more}))

        stats: Stats | None = None
        if self.chat:  # OpenAI opens with the role, so clients can start the message at once
            yield sse(self._envelope(obj, [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                            "finish_reason": None, "logprobs": None}], **extra))
        try:
            async for event in bridge.events():
                if isinstance(event, TextDelta):
                    pieces = out.feed(event.text)
                    logprobs = out.add_logprobs(event.logprobs, event.text)
                    if pieces or logprobs:
                        yield chunk(pieces, logprobs=logprobs)
                elif isinstance(event, Stats):
                    stats = event
                elif isinstance(event, Failed):
                    raise event.error
                elif isinstance(event, Done):
                    pieces = out.finish()
                    if pieces:
                        yield chunk(pieces)
                    yield chunk([], out.finish_reason(event.finish_reason), x_localchat=_extras(stats))
                    if include_usage:
                        yield sse(self._envelope(obj, [], usage=_usage(stats)))
        except LocalchatError as exc:
            bridge.cancel()
            # Headers are gone already: the error travels in the stream, as OpenAI's does.
            yield sse(error_body(str(exc), "server_error", None, "engine_error"))
            return
        yield b"data: [DONE]\n\n"


def _usage(stats: Stats | None) -> dict[str, Any]:
    prompt = stats.prompt_tokens if stats else 0
    completion = stats.completion_tokens if stats else 0
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": stats.cached_tokens if stats else 0}}


def _extras(stats: Stats | None) -> dict[str, Any] | None:
    """localchat's own numbers, in a field OpenAI clients ignore."""
    return stats.to_dict() if stats is not None else None
