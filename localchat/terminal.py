"""`localchat chat`: one answer (plain or JSON, with documents), or an interactive chat in the terminal."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any

from .assemble import open_engine
from .config import Settings
from .errors import LocalchatError, RequestError
from .progress_line import ProgressLine, follow
from .runtime.engine import Engine, Request
from .runtime.events import Done, Failed, Stats, TextDelta, collect
from .runtime.sampling import SamplingParams

log = logging.getLogger("localchat")


def chat(settings: Settings, sampling: SamplingParams, prompt: str | None, files: list[str], system: str | None,
         as_json: bool, progress: bool) -> int:
    """Answer `prompt` (about `files`), or chat interactively without one; `progress` draws the status line."""
    documents = _read_documents(files)  # before the model loads: a broken file fails fast
    if documents and prompt is None:
        raise RequestError("--file needs a question: localchat chat --file PATH \"What does it say about ...?\"")
    # --verbose prints llama.cpp's log on stderr, which a redrawn line would garble: no progress then.
    with ProgressLine(enabled=progress) as line, open_engine(settings, status=line.set) as engine:
        if prompt is None:
            line.clear()
            return _interactive(engine, system, sampling, progress)
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
    from .models.embedding import shared_models

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
        answer: dict[str, Any] = {"text": result.text, "finish_reason": result.finish_reason}
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


def _interactive(engine: Engine, system: str | None, sampling: SamplingParams, progress: bool) -> int:
    history: list[dict[str, str]] = [{"role": "system", "content": system}] if system else []
    print(f"localchat: {engine.worker.describe()} - type a message; /reset clears, /exit or Ctrl-D quits, "
          "Ctrl-C stops an answer.", file=sys.stderr)
    while True:
        try:
            line = input("> ").strip()
        except EOFError:
            print(file=sys.stderr)
            return 0
        if not line:
            continue
        if line in ("/exit", "/quit"):
            return 0
        if line == "/reset":
            history = history[:1] if system else []
            continue
        history.append({"role": "user", "content": line})
        try:
            stream = engine.submit(Request(messages=history, sampling=sampling))
        except LocalchatError as exc:
            history.pop()
            print(f"localchat: {exc}", file=sys.stderr)
            continue
        parts: list[str] = []
        try:
            with ProgressLine(enabled=progress) as status:
                status.set("reading the prompt")
                for event in follow(stream, status):
                    if isinstance(event, TextDelta):
                        parts.append(event.text)
                        sys.stdout.write(event.text)
                        sys.stdout.flush()
                    elif isinstance(event, Stats):
                        stats = f"[{event.completion_tokens} tokens, {event.tokens_per_s:.1f} tok/s, TTFT {event.ttft_ms:.0f} ms]"
                    elif isinstance(event, Failed):
                        print(f"\nlocalchat: {event.message}", file=sys.stderr)
                    elif isinstance(event, Done):
                        print(f"\n{stats}", file=sys.stderr)
        except KeyboardInterrupt:
            stream.cancel()
            for _ in stream:
                pass
            print("\n[stopped]", file=sys.stderr)
        history.append({"role": "assistant", "content": "".join(parts)})
