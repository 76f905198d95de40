"""The schemas real tools send, through the API with the `openai` client on the embedded model: none
refused, every result valid by `jsonschema` itself. Here every schema whose grammar leaves keywords to
the check and every fourth of the rest, once each (every schema compiles in test_schema_rules.py);
benchmarks/schema_corpus.py runs them all with ten seeds and reports the resamples."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Iterator

import openai
import pytest
from ui_server import serve_in_thread

from localchat.api.app import create_app
from localchat.api.local import LocalService
from localchat.runtime.constraints.schema_grammar import grammar_from_json_schema
from localchat.runtime.engine import Engine, EngineConfig
from localchat.runtime.workers.worker import WorkerConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from schema_corpus import MODEL, load_corpus, report, run  # noqa: E402


@pytest.fixture(scope="module")
def client(model_path: Path) -> Iterator[openai.OpenAI]:
    config = EngineConfig(worker=WorkerConfig(n_ctx=8192, n_threads=2, n_seq_max=8, deterministic=True))
    with Engine.load(model_path, config) as engine:
        url, server, thread = serve_in_thread(create_app(LocalService(engine, MODEL)))
        yield openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=300)
        server.should_exit = True
        thread.join(10)


def test_the_corpus_is_enforced_not_refused(client: openai.OpenAI):
    corpus = load_corpus()
    checked = [e for i, e in enumerate(corpus) if grammar_from_json_schema(e["schema"]).check.hold or i % 4 == 0]
    outcomes = run(client, range(1), 0.8, checked, max_tokens=192)
    summary = report(outcomes)
    print(summary)
    assert len(corpus) >= 40 and len(checked) >= 20
    assert not [o for o in outcomes if o.refused], summary
    assert not [o for o in outcomes if o.invalid], summary
    assert sum(not o.cut for o in outcomes) >= 0.75 * len(outcomes), summary  # results, not answers cut short
