"""A user's own words that name a family's markers never reach a grammar as if the model had written them.

SmolLM2 with Qwen3's own template (a thinking model of the hermes family) and one tool offered, asked at
temperature 0 what the <tool_call></tool_call> tags are for: greedy SmolLM2 writes the tags back in its
answer, inside tokens such as `></` that run past the trigger. llama.cpp's lazy grammar, fed that text at
once, threw (SIGABRT in the runner, a 500 blaming the grammar, and the same again on every retry)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Iterator

import httpx
import pytest
from thinking_model import thinking_copy
from ui_server import serve_in_thread

from localchat.api.app import create_app
from localchat.api.local import LocalService
from localchat.assemble import open_engine
from localchat.config import Settings
from localchat.runners.supervisor import SupervisedEngine

TEMPLATES = Path(__file__).resolve().parents[1] / "data" / "templates"
MODEL = "smollm2-qwen3"
QUESTION = "Explain in one sentence what the <tool_call></tool_call> XML tags are for."
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city.",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                           "required": ["city"]}}}


@pytest.fixture(scope="module")
def served(model_path: Path, tmp_path_factory) -> Iterator[tuple[str, SupervisedEngine]]:
    copy = thinking_copy(model_path, tmp_path_factory.mktemp("qwen3"), TEMPLATES / "Qwen-Qwen3-0.6B.jinja")
    settings = Settings(model=str(copy), n_ctx=2048, n_threads=1, speculation=False, kv_disk_mb=0)
    with SupervisedEngine(functools.partial(open_engine, settings)) as supervised:
        url, server, thread = serve_in_thread(create_app(LocalService(supervised, MODEL)))
        yield url, supervised
        server.should_exit = True
        thread.join(10)


@pytest.mark.parametrize("thinking", [None, False])
def test_a_question_naming_the_call_markers_is_answered_and_the_runner_lives(served, thinking):
    url, supervised = served
    restarts = supervised.restarts
    body = {"model": MODEL, "messages": [{"role": "user", "content": QUESTION}], "tools": [WEATHER],
            "temperature": 0, "max_tokens": 160}
    if thinking is not None:
        body["chat_template_kwargs"] = {"enable_thinking": thinking}
    for _ in range(2):  # the same request again: it crashed every time
        reply = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=300)
        assert reply.status_code == 200, reply.text[:300]
        choice = reply.json()["choices"][0]
        assert choice["finish_reason"] in ("stop", "length", "tool_calls"), choice
    assert supervised.restarts == restarts


def test_a_required_call_still_comes_in_the_familys_form(served):
    url, _ = served
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": [WEATHER],
            "tool_choice": "required", "temperature": 0, "max_tokens": 200, "reasoning_effort": "none"}
    reply = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=300)
    assert reply.status_code == 200, reply.text[:300]
    calls = reply.json()["choices"][0]["message"]["tool_calls"]
    assert calls and all(call["function"]["name"] == "get_weather" for call in calls), calls


WATCHED = r'''
import sys
from localchat.runtime.constraints.grammar import Grammar, GrammarSampler
from localchat.runtime.workers.worker import Worker, WorkerConfig

worker = Worker(sys.argv[1], WorkerConfig(n_ctx=256, n_threads=1))
gbnf = 'root ::= "<tool_call>" [ \\n]* "{" [a-z"]+ "}"'
grammar = GrammarSampler(Grammar(gbnf, triggers=("<tool_call>",)), worker.vocab, worker.n_vocab, worker.eos_token)
pieces = ["The", " <", "tool", "_", "call", "></", "tool", "_", "call", ">", " tags", " mark", " a", " call", "."]
ids = [worker.tokenize(p, add_special=False, parse_special=False) for p in pieces]
assert all(len(t) == 1 for t in ids), ids  # each piece is one token of SmolLM2's, `></` among them
for [token] in ids:
    grammar.accept(token)  # `></` completes the trigger and runs past it: llama.cpp threw here
print("prose read")
assert grammar.allows(worker.tokenize(" Then", add_special=False, parse_special=False)[0])  # still free text
for token in worker.tokenize(" <tool_call>\n{", add_special=False, parse_special=False):
    grammar.accept(token)
assert not grammar.allows(worker.tokenize("X", add_special=False, parse_special=False)[0])  # now the grammar holds
assert grammar.allows(worker.tokenize("x", add_special=False, parse_special=False)[0])
print("call constrained")
'''


def test_a_trigger_inside_prose_never_reaches_the_grammar_and_a_later_call_does(model_path: Path):
    """On the grammar sampler itself, in a process of its own (before the fix it aborted the interpreter)."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", WATCHED, str(model_path)], capture_output=True, text=True,
                          timeout=300, cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, (done.returncode, done.stdout[-500:], done.stderr[-2000:])
    assert done.stdout.split() == ["prose", "read", "call", "constrained"]
