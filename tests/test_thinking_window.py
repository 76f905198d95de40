"""The window's chat logic with a thinking model on the real runtime (SmolLM2 with a thinking template,
tests/thinking_model.py): the thinking is kept apart from the answer in the chat, its earlier turns go back
to the template, a chat's thinking budget closes the thinking when it is spent, and the reply's numbers tell
thinking and answer tokens apart."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Iterator

import pytest
from thinking_model import thinking_copy
from ui_server import DEFAULTS

from localchat.runtime.engine import Engine, EngineConfig
from localchat.runtime.workers.worker import WorkerConfig
from localchat.ui.chat.core import ChatCore
from localchat.ui.chat.session import Runtime
from localchat.ui.chat.store import Store


@pytest.fixture(scope="module")
def core(model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChatCore]:
    folder = tmp_path_factory.mktemp("thinking-chat")
    path = thinking_copy(model_path, folder)
    engine = Engine.load(path, EngineConfig(worker=WorkerConfig(n_ctx=2048, n_threads=1, deterministic=True)))
    store = Store(folder / "conversations.sqlite3")
    try:
        yield ChatCore(Runtime(engine, str(path)), store)
    finally:
        engine.close()
        store.close()


def test_a_budget_closes_the_thinking_and_the_answer_goes_on(core: ChatCore):
    sampling = dataclasses.replace(DEFAULTS, max_tokens=40, thinking_budget=6)
    conv_id = core.add_user_turn(None, "What is the capital of France?", [], "", sampling)
    shown = list(core.answer(conv_id, sampling))
    reply = core.store.get(conv_id).messages[-1]
    assert reply.stats["thinking"] and reply.content.strip(), reply
    assert "</think>" not in reply.content and "<think>" not in reply.stats["thinking"]
    assert "Thought for" in shown[-1] and 'class="thinking"' in shown[-1]
    # Its tokens told apart under it: the budget's 6 thinking (and the close), the rest the answer's.
    thought, total = reply.stats["thinking_tokens"], reply.stats["completion_tokens"]
    assert 6 <= thought <= 7 and total > thought, reply.stats
    assert f"{thought} thinking + {total - thought} answer tokens at " in shown[-1]
    # The next turn's prompt gives the template the earlier thinking; this template leaves it out, as
    # Qwen3's does for turns before the last question.
    messages = core.engine_messages(core.store.get(conv_id))
    assert messages[-1]["reasoning_content"] == reply.stats["thinking"]


def test_switched_off_the_model_answers_without_thinking(core: ChatCore):
    sampling = dataclasses.replace(DEFAULTS, max_tokens=12, thinking="off")
    conv_id = core.add_user_turn(None, "Name a colour.", [], "", sampling)
    list(core.answer(conv_id, sampling))
    reply = core.store.get(conv_id).messages[-1]
    assert "thinking" not in reply.stats and reply.content.strip()
