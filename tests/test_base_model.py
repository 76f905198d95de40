"""A model file without a chat template (a base model, or a conversion that left it out): chats render with the
ChatML fallback, whose markers such a model was never taught, so an answer ends at them instead of writing the
next turns itself; and the window says the model is a base model."""

from __future__ import annotations

from pathlib import Path

import gguf
import pytest
from gguf.scripts.gguf_new_metadata import copy_with_new_metadata

from localchat.runtime.constraints.grammar import Grammar
from localchat.runtime.engine import Engine, EngineConfig, Request
from localchat.runtime.sampling import SamplingParams
from localchat.runtime.templates.chat_template import CHATML_STOPS
from localchat.runtime.workers.worker import WorkerConfig


def without_template(source: Path, target: Path) -> Path:
    """A copy of the GGUF `source` with no tokenizer.chat_template."""
    reader = gguf.GGUFReader(source)
    writer = gguf.GGUFWriter(target, arch=reader.fields["general.architecture"].contents())
    copy_with_new_metadata(reader, writer, {}, [gguf.Keys.Tokenizer.CHAT_TEMPLATE])
    return target


@pytest.fixture(scope="module")
def base_model(model_path: Path, tmp_path_factory) -> Path:
    return without_template(model_path, tmp_path_factory.mktemp("base") / "SmolLM2-no-template.gguf")


@pytest.fixture(scope="module")
def engine(base_model: Path):
    with Engine.load(base_model, EngineConfig(worker=WorkerConfig(n_ctx=1024, n_threads=1))) as engine:
        yield engine


def test_a_file_without_a_template_is_known_as_one(engine: Engine):
    assert engine.template.fallback
    assert set(CHATML_STOPS) <= set(engine.template.stops)


def test_an_answer_that_writes_the_fallbacks_markers_as_text_ends_there(engine: Engine):
    # The grammar makes the model spell the end marker and a next turn out of plain tokens, as a base model
    # does on its own: the end marker is an end-of-generation token, which no grammar lets through mid-text.
    grammar = Grammar('root ::= "Paris." "<|im_end|>" "<|im_start|>user" " And Rome?"')
    done = engine.submit(Request(messages=[{"role": "user", "content": "Capital of France?"}],
                                 sampling=SamplingParams(temperature=0.0, max_tokens=40, grammar=grammar))).result()
    assert done.text == "Paris.", done.text
    assert done.finish_reason == "stop"


def test_the_window_says_it_is_a_base_model(base_model: Path, model_path: Path, tmp_path):
    from localchat.ui.chat.core import ChatCore
    from localchat.ui.chat.session import Runtime
    from localchat.ui.chat.store import Store

    def load(path: str, n_ctx: int | None = None, progress=None) -> Engine:
        return Engine.load(path, EngineConfig(worker=WorkerConfig(n_ctx=n_ctx or 1024, n_threads=1)))

    runtime = Runtime(load(str(base_model)), str(base_model), load)
    core = ChatCore(runtime, Store(tmp_path / "chats.sqlite3"))
    try:
        assert "base model" in core.status()
        runtime.switch(str(model_path))  # an instruct model's own template: no such word
        assert "base model" not in core.status()
    finally:
        runtime.engine.close()
        core.store.close()


def test_a_model_runner_says_the_file_has_no_template_and_the_window_notes_a_base_model(base_model: Path,
                                                                                      tmp_path):
    """The server's engine lives in a runner process: it reported ChatML (the stand-in) as the file's own
    template, so the server took a base model for a chat model (no note, no stop at ChatML's markers)."""
    import functools

    from localchat.assemble import open_engine
    from localchat.config import Settings
    from localchat.runners.supervisor import SupervisedEngine
    from localchat.ui.chat.core import ChatCore
    from localchat.ui.chat.session import Runtime
    from localchat.ui.chat.store import Store

    settings = Settings(model=str(base_model), n_ctx=1024, n_threads=1, speculation=False, kv_disk_mb=0)
    with SupervisedEngine(functools.partial(open_engine, settings)) as engine:
        assert engine.template.fallback
        assert set(CHATML_STOPS) <= set(engine.template.stops)
        core = ChatCore(Runtime(engine, str(base_model)), Store(tmp_path / "chats.sqlite3"))
        try:
            assert "base model" in core.status()
        finally:
            core.store.close()
