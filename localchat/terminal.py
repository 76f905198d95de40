"""`localchat chat`: one answer (plain or JSON, with documents), or a chat in the terminal (interactive.py)."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any, Callable

from .assemble import open_engine
from .config import Settings
from .errors import RequestError
from .progress_line import ProgressLine, follow
from .runtime.backends.residence import describe_all
from .runtime.engine import Engine, Request
from .runtime.events import Failed, Stats, TextDelta, collect
from .runtime.sampling import SamplingParams

log = logging.getLogger("localchat")


def chat(settings_for: Callable[[str | None], Settings], sampling: SamplingParams, prompt: str | None,
         files: list[str], system: str | None, as_json: bool, progress: bool) -> int:
    """Answer `prompt` (about `files`), or chat without one; `settings_for(model)` gives the settings of the
    configured model (None) or of one `/model` switches to; `progress` draws the status line."""
    # Every refusal before the model loads: a wrong command line costs no wait.
    if prompt is not None and not prompt.strip():
        raise RequestError("the prompt is empty: ask something (localchat chat \"What is 2+2?\"), or leave the "
                           "prompt out to chat in the terminal.")
    if prompt is None and as_json:
        raise RequestError("--json answers one prompt: localchat chat --json \"What is 2+2?\"")
    documents = _read_documents(files)  # a broken file fails fast
    if documents and prompt is None:
        raise RequestError("--file needs a question: localchat chat --file PATH \"What does it say about ...?\"")
    # --verbose prints llama.cpp's log on stderr, which a redrawn line would garble: no progress then.
    if prompt is None:
        from .interactive import Session

        return Session(settings_for, sampling, system, progress).run()
    with ProgressLine(enabled=progress) as line, open_engine(settings_for(None), status=line.set) as engine:
        messages = [{"role": "system", "content": system}] if system else []
        included = None
        content = prompt
        if documents:
            content, included = _fit_documents(engine, messages, prompt, documents, sampling.max_tokens)
            if not as_json:
                line.note(f"Included: {included.summary()}")
        messages.append({"role": "user", "content": content})
        return _answer_once(engine, messages, sampling, as_json, included, line)


def _read_documents(paths: list[str]) -> list:
    from .ingest import extract

    return [extract(Path(p)) for p in paths]


def _fit_documents(engine: Engine, messages: list[dict[str, str]], question: str, documents: list,
                   max_tokens: int | None) -> tuple[str, Any]:
    """The user turn with whole documents or their best chunks, and what was included."""
    from .ingest import VectorStore, build_prompt, select
    from .ingest.fit import document_budget
    from .runners.embedding import shared_models

    history = len(engine.prompt_tokens(Request(messages=messages))) if messages else 0
    budget = document_budget(engine.n_ctx, history, max_tokens)
    vectors = VectorStore()  # the window's store: a document asked about before is not embedded again
    try:
        selection = select(question, documents, budget, engine.count_tokens, embedder=shared_models().default(),
                           vectors=vectors)
    finally:
        vectors.close()
    return build_prompt(question, selection), selection


def _answer_once(engine: Engine, messages: list[dict[str, str]], sampling: SamplingParams, as_json: bool,
                 included: Any, line: ProgressLine) -> int:
    line.set("reading the prompt")
    events = follow(engine.submit(Request(messages=messages, sampling=sampling)), line)
    if as_json:
        result = collect(events)
        answer: dict[str, Any] = {"text": result.text, "finish_reason": result.finish_reason,
                                  "placement": engine.placement, "device": describe_all(engine.residences())}
        if result.stats is not None:
            answer |= result.stats.to_dict()
        if included is not None:
            answer["included"] = included.to_dict()
        print(json.dumps(answer, ensure_ascii=False))
        return 0
    for event in events:
        if isinstance(event, TextDelta):
            sys.stdout.write(event.text)
            sys.stdout.flush()
        elif isinstance(event, Stats):
            log.info("%d prompt + %d tokens, TTFT %.0f ms, %.1f tokens/s", event.prompt_tokens,
                     event.completion_tokens, event.ttft_ms, event.tokens_per_s)
        elif isinstance(event, Failed):
            raise event.error
    sys.stdout.write("\n")
    return 0
