"""The Service of a local engine: every protocol's requests drive the engine here, and only here.

What a request goes through, whatever its protocol: the model's name checked, the server's system
prompt added to a chat that brings none, the prompt's size bounded before any tokenizing, tools and
schemas made into grammars, the template rendered and the prompt tokenized off the event loop within
a time budget, and the request stopped when its client leaves.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import math
import time
from pathlib import Path
from typing import Any, AsyncIterator, Callable, TypeVar

from starlette.requests import Request as HTTPRequest

from ..errors import ContextOverflowError, ModelNotFoundError, RequestError
from ..models.servable_index import ServableIndex
from ..runners.pool import Runners
from ..runtime.backends import residence
from ..runtime.engine import Engine, Request
from ..runtime.overflow import fit
from ..runtime.sampling import SamplingParams
from ..runtime.templates.chat_template import check_prompt_size
from ..runtime.templates.template_sandbox import Budget
from ..runtime.templates.thinking import thinking_style
from .bridge import StreamBridge, wait_for_disconnect
from .constraints import constrain, grammar_of, raw_grammar, response_grammar
from .embeddings import embed, embedding_info
from .model_calls import off_loop
from .reader import OutputReader, reader_for
from .service import Answer, Embedded, Generation, ModelInfo, ThinkingBudget
from .thinking import after_thinking, switches_for

log = logging.getLogger(__name__)
# Said (in the notes: OpenAI's x_localchat, every protocol's X-Localchat-Notes header) when a request asks a model
# that does not think to think, and its protocol's servers answer such a request rather than refuse it.
IGNORED_THINKING = "this model does not think, so the request's thinking setting was ignored"

T = TypeVar("T")


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
    """Answers the API's protocols with a local Engine (and, given `runners`, other models on this machine
    by name, each loaded in a runner of its own when a request names it)."""

    def __init__(self, engine: Engine, model_name: str, defaults: SamplingParams | None = None,
                 system_prompt: str = "", runners: Runners | None = None, thinking_budget: int = 0) -> None:
        self.engine = engine
        self.model_name = model_name
        self.defaults = defaults or SamplingParams()  # what a request leaves out
        self.system_prompt = system_prompt  # the system turn of a chat request that has none
        self.runners = runners
        self.thinking_budget = thinking_budget  # a request's own comes first; 0: no limit
        self.created = int(time.time())
        self._budgets: set[Budget] = set()  # requests being rendered and tokenized right now
        self._names: tuple[Any, set[str]] = (None, set())
        # Models by name: looked up in an index walked off the event loop, never per request.
        self._servable = ServableIndex()
        if runners is not None:
            self._servable.refresh()
        # Models the window served before its switch to this one (by name): a file the server started with may
        # lie outside every folder the index scans, and must stay a model a request can name.
        self._earlier: dict[str, Path] = {}

    def served_before(self, name: str, path: Path) -> None:
        """`name` (its file at `path`) was the served model until a switch: it stays listed and loadable."""
        self._earlier[name] = Path(path)

    def forget(self, path: Path) -> None:
        """The model file at `path` was deleted or taken off the window's list: no longer a model by name."""
        self._earlier = {name: known for name, known in self._earlier.items() if known.resolve() != path.resolve()}
        self._servable.refresh()

    def _path(self) -> Path | None:
        return _path_of(self.engine)

    @property
    def aliases(self) -> set[str]:
        """The served model's names; the window's model switch replaces `engine` and `model_name`."""
        key = (self.model_name, self._path())
        if self._names[0] != key:
            self._names = (key, names_of(*key))
        return self._names[1]

    def _info(self, name: str | None = None, engine: Any = None, expires_at: float = math.inf) -> ModelInfo:
        """A loaded model's facts: the served one, or (`name`, `engine`) one loaded by name."""
        engine = engine or self.engine
        aliases = self.aliases if name is None else {name}
        placed = engine.residences() if hasattr(engine, "residences") else {}
        return ModelInfo(name or self.model_name, self.created, aliases=aliases, path=_path_of(engine),
                         description=engine.worker.describe(), n_ctx=engine.n_ctx,
                         template=engine.template.source, defaults=self.defaults,
                         gpu_layers=getattr(getattr(engine.worker, "config", None), "n_gpu_layers", 0),
                         device_bytes=residence.device_bytes(placed), placed=residence.describe_all(placed),
                         device_memory=lambda: [m.to_dict() for m in residence.live_memory(engine)],
                         expires_at=expires_at)

    def models(self) -> list[ModelInfo]:
        """The served model first, then every other chat model here a request may name, loaded or not."""
        served = [self._info()]
        if self.runners is None:
            return served
        loaded = self.runners.loaded()
        primary = self._path().resolve() if self._path() else None
        seen = {primary}
        for name, path in self._others().items():
            real = path.resolve()
            if real in seen:
                continue
            seen.add(real)
            held = self.runners.engine_of(name)
            served.append(self._info(name, held, loaded[name]) if held is not None else
                          ModelInfo(name, self.created, aliases={name}, path=path, loaded=False, expires_at=0.0))
        return served

    def model(self, name: str | None) -> ModelInfo:
        embedding = embedding_info(name, self.created) if name else None
        if embedding is not None:
            return embedding
        if not self._elsewhere(name):
            self._check_model(name)
            return self._info()
        held = self.runners.engine_of(name)
        if held is not None:
            return self._info(name, held, self.runners.loaded().get(name, math.inf))
        return ModelInfo(name, self.created, aliases={name}, path=self._file_of(name), loaded=False, expires_at=0.0)

    async def load(self, name: str | None, keep_alive_s: float | None) -> ModelInfo:
        """Load a model by name now (Ollama's request with nothing to generate); a keep-alive of 0 unloads it."""
        if self._elsewhere(name) and keep_alive_s == 0:
            self.runners.unload(name)
            return ModelInfo(name, self.created, aliases={name}, path=self._file_of(name), loaded=False)
        async with self._engine_for(name, keep_alive_s):
            return self.model(name)

    async def embed(self, inputs: list[str] | list[list[int]], model: str | None, dimensions: int | None = None,
                    truncate: bool = False) -> Embedded:
        """The embedding model's vectors (or, named in `model`, the served model's in embedding mode)."""
        return await embed(inputs, model, self.aliases, self._path(), dimensions, truncate)

    async def generate(self, generation: Generation, request: HTTPRequest) -> Answer:
        """Start the answer: everything checked and the prompt read into the engine's queue."""
        async with self._engine_for(generation.model, generation.keep_alive_s) as (engine, name):
            build, read = self._prepare(generation, engine)
            notes: list[str] = []
            built: list[Request] = []

            def submit() -> Any:
                built.append(build(notes))
                return engine.submit(built[-1])
            try:
                stream = await self._bounded(submit, request, _cancel_stream)
            except ContextOverflowError as exc:
                exc.param = "messages" if generation.messages is not None else "prompt"
                raise
            reader = read(built[-1].prompt or "")
            budget = None
            style = thinking_style(engine.template.source) if generation.messages is not None else None
            tokens = generation.thinking_budget or self.thinking_budget
            if tokens and reader is not None and style is not None:
                async def resubmit(forced: str) -> StreamBridge:
                    again = dataclasses.replace(built[-1], forced=forced)
                    return StreamBridge(await self._bounded(lambda: engine.submit(again), request, _cancel_stream))
                budget = ThinkingBudget(tokens, style.close, resubmit)
        return Answer(StreamBridge(stream), name, reader, notes, budget)

    async def count_tokens(self, generation: Generation, request: HTTPRequest) -> int:
        """The tokens the request's prompt takes, the template, the tools and the system prompt included."""
        async with self._engine_for(generation.model, generation.keep_alive_s) as (engine, _):
            build, _ = self._prepare(generation, engine)
            return len(await self._bounded(lambda: engine.prompt_tokens(build([])), request))

    async def aclose(self) -> None:
        """Stop prompts still being prepared (shutdown must not wait on them); the engine is not ours."""
        for budget in list(self._budgets):
            budget.cancel()

    # -- models by name -----------------------------------------------------------------------

    def _others(self) -> dict[str, Path]:
        """The chat model files here a request may name besides the served model."""
        return {name: path for name, path in (self._earlier | self._servable.names()).items()
                if name not in self.aliases}

    def _elsewhere(self, name: str | None) -> bool:
        """Whether `name` asks for a model other than the served one, which this server loads by name."""
        return bool(self.runners is not None and name and name not in self.aliases)

    def _file_of(self, name: str) -> Path:
        path = self._others().get(name)
        if path is None:
            self._check_model(name)
        return path

    @contextlib.asynccontextmanager
    async def _engine_for(self, name: str | None, keep_alive_s: float | None) -> AsyncIterator[tuple[Any, str]]:
        """The engine a request's `model` names, and the name to answer with; one loaded by name is held
        (not unloaded) until the request is in its queue."""
        if not self._elsewhere(name):
            self._check_model(name)
            yield self.engine, self.model_name
            return
        path = self._file_of(name)
        if self._path() is not None and path.resolve() == self._path().resolve():  # another name of the served file
            yield self.engine, name
            return
        held = contextlib.ExitStack()
        # Loading takes seconds: off the event loop. A client that leaves meanwhile gives the lease back
        # when the load ends, so the runner is not held forever.
        entering = asyncio.ensure_future(off_loop(held.enter_context, self.runners.lease(name, path, keep_alive_s)))
        try:
            engine = await asyncio.shield(entering)
        except asyncio.CancelledError:
            entering.add_done_callback(lambda _: held.close())
            raise
        try:
            yield engine, name
        finally:
            held.close()

    # -- generation ----------------------------------------------------------------------------

    def _check_model(self, name: str | None) -> None:
        # A missing (or empty) model is accepted: it means the served model, and some clients leave it out.
        if name and name not in self.aliases:
            others = " or another model GET /v1/models lists" if self.runners is not None else ""
            raise ModelNotFoundError(f"the model '{name}' is not served here; use '{self.model_name}'{others} "
                                     "(GET /v1/models, or /api/tags, lists them).")

    def _prepare(self, generation: Generation, engine: Any
                 ) -> tuple[Callable[[list[str]], Request], Callable[[str], OutputReader | None]]:
        """The engine request to build (within the budget; it adds what it did to the notes it is given) and
        how to read its answer once the prompt is known, after every check that needs no tokenizing."""
        sampling = generation.sampling.over(self.defaults)
        if generation.messages is None:
            return self._prepare_prompt(generation, engine, sampling), lambda prompt: None
        messages = generation.messages
        if self.system_prompt and not any(m["role"] == "system" for m in messages):
            messages = [{"role": "system", "content": self.system_prompt}, *messages]
        check_prompt_size([m["content"] for m in messages], engine.n_ctx)  # before any work on them
        plan = constrain(messages, engine.template.source, generation.tools, generation.tool_choice,
                         generation.parallel_tool_calls, generation.response_format, generation.format_param)
        # A client's own grammar (llama.cpp's `grammar`) takes the place of the one from its tools or
        # format, as it is: the parser still reads the calls it makes.
        own = raw_grammar(generation.grammar)
        style = thinking_style(engine.template.source)
        unheard = generation.thinking not in (None, False) and style is None
        if unheard and generation.thinking_param:
            raise RequestError(f"{generation.thinking_param}: this model does not think (its chat template writes "
                               f"no thinking); leave {generation.thinking_param} out.", generation.thinking_param)
        switches = switches_for(style, generation.thinking, generation.template_kwargs)
        # Rendered here, the chat reaches the engine as a prompt: the fallback template's markers end it.
        sampling.stop = list(dict.fromkeys([*sampling.stop, *engine.template.stops]))
        schemas = {t["function"]["name"]: t["function"].get("parameters") or {} for t in generation.tools or []}

        # The template renders here, within the request's time budget: tools go in beside messages.
        def render(kept: list[dict[str, Any]]) -> str:
            return engine.template.render(kept, tools=plan.tools, switches=switches)

        def build(notes: list[str]) -> Request:
            kept = plan.messages
            if generation.context_overflow != "refuse":
                room = engine.n_ctx - (sampling.max_tokens or engine.n_ctx // 4)
                fitted = fit(kept, lambda m: len(engine.prompt_tokens(Request(prompt=render(m)))), room,
                             generation.context_overflow)
                kept, notes[:] = fitted.messages, [fitted.note()] if fitted.left_out else []
            prompt = render(kept)
            if unheard:  # asked of a model that does not think (coding agents ask always): answered without
                log.info("a request asked %s to think, which it does not do (its chat template writes no "
                         "thinking); it is answered without", getattr(_path_of(engine), "name", "the model"))
                notes.append(IGNORED_THINKING)
            # A thinking model's grammar starts where its thinking ends (known once the prompt is).
            sampling.grammar = own or after_thinking(grammar_of(plan), style, prompt)
            return Request(prompt=prompt, sampling=sampling)

        def read(prompt: str) -> OutputReader | None:
            return reader_for(style, prompt, plan.fmt, plan.names, schemas)
        return build, read

    def _prepare_prompt(self, generation: Generation, engine: Any, sampling: Any) -> Callable[[list[str]], Request]:
        prompt = generation.prompt or ""
        if generation.grammar and generation.response_format:
            raise RequestError("send grammar or response_format, not both.", "grammar")
        sampling.grammar = raw_grammar(generation.grammar) or response_grammar(generation.response_format,
                                                                               generation.format_param)
        check_prompt_size([prompt], engine.n_ctx)
        return lambda notes: Request(prompt=prompt, sampling=sampling)

    async def _bounded(self, work: Callable[[], T], request: HTTPRequest,
                       abandoned: Callable[["asyncio.Future[Any]"], None] | None = None) -> T:
        """work() off the event loop, within a time budget, stopped when the client leaves; `abandoned`
        gets the work's future when the client left before it ended."""
        budget = Budget()
        self._budgets.add(budget)
        # Rendering and tokenizing a long prompt take a while; the event loop stays free meanwhile.
        working = asyncio.ensure_future(off_loop(budget.run, work))
        leaving = asyncio.ensure_future(wait_for_disconnect(request))
        try:
            await asyncio.wait({working, leaving}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            leaving.cancel()
            if not working.done():
                budget.cancel()
            self._budgets.discard(budget)
        if not working.done():  # the client left: the thread stops at its next check
            if abandoned is not None:
                working.add_done_callback(abandoned)
            raise RequestError("the client went away before its prompt was read.")
        return working.result()


def _path_of(engine: Any) -> Path | None:
    return getattr(engine.worker, "model_path", None)


def _cancel_stream(done: "asyncio.Future[Any]") -> None:
    if not done.cancelled() and done.exception() is None:
        done.result().cancel()  # submitted after all, for nobody
