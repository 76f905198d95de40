"""The schemas real tools send, through the API with the `openai` client on the embedded model: none
refused, every result valid by `jsonschema` itself. Greedy here, once each; benchmarks/schema_corpus.py
samples ten seeds each and reports the resamples."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Iterator

import openai
import pytest

from localchat.api.app import create_app
from localchat.api.local import LocalService
from localchat.runtime.engine import Engine, EngineConfig
from localchat.runtime.worker import WorkerConfig
from ui_server import serve_in_thread

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from schema_corpus import MODEL, load_corpus, report, run  # noqa: E402


@pytest.fixture(scope="module")
def client(model_path: Path) -> Iterator[openai.OpenAI]:
    config = EngineConfig(worker=WorkerConfig(n_ctx=8192, n_threads=2, n_seq_max=8))
    with Engine.load(model_path, config) as engine:
        url, server, thread = serve_in_thread(create_app(LocalService(engine, MODEL)))
        yield openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=300)
        server.should_exit = True
        thread.join(10)


def test_the_corpus_is_enforced_not_refused(client: openai.OpenAI):
    corpus = load_corpus()
    assert len(corpus) >= 40
    outcomes = run(client, range(1), 0.0, corpus)  # greedy: the answer each schema most likely gets
    summary = report(outcomes)
    print(summary)
    assert not [o for o in outcomes if o.refused], summary
    assert not [o for o in outcomes if o.invalid], summary
