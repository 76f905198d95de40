"""POST /v1/embeddings on the real embedding model and the served model, through the official `openai`
client and LangChain's OpenAI embeddings, as RAG tools call it."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Iterator

import httpx
import openai
import pytest
from ui_server import serve_in_thread, stop_servers

from localchat.api.app import create_app
from localchat.api.local import LocalService
from localchat.api.proxy import ProxyService
from localchat.models.embedding import DEFAULT_EMBEDDING_MODEL
from localchat.runners.embedding import shared_models
from localchat.runtime.engine import Engine, EngineConfig
from localchat.runtime.workers.worker import WorkerConfig

MODEL = "smollm2-135m"
KEY = "embed-key-7c1d"
TEXTS = ["how much fuel did the lamp use", "The lamp burned 31 litres of oil in one night.",
         "The keeper painted the cottage door red."]


@pytest.fixture(scope="module")
def servers(model_path: Path, embedding_model_path: Path) -> Iterator[dict[str, str]]:
    config = EngineConfig(worker=WorkerConfig(n_ctx=512, n_threads=1, n_seq_max=2))
    with Engine.load(model_path, config) as engine:
        running = [serve_in_thread(create_app(LocalService(engine, MODEL))),
                   serve_in_thread(create_app(LocalService(engine, MODEL), KEY))]
        running.append(serve_in_thread(create_app(ProxyService(running[0][0]))))
        yield {"open": running[0][0], "keyed": running[1][0], "proxy": running[2][0]}
        stop_servers(running)


def client_for(url: str, key: str = "unused") -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=120)


def dot(a, b) -> float:
    return sum(x * y for x, y in zip(a, b))


def test_the_openai_client_gets_the_embedding_models_vectors(servers: dict[str, str]):
    client = client_for(servers["open"])
    got = client.embeddings.create(model=DEFAULT_EMBEDDING_MODEL, input=TEXTS)  # the client asks for base64
    floats = client.embeddings.create(model=DEFAULT_EMBEDDING_MODEL, input=TEXTS, encoding_format="float")
    assert got.model == DEFAULT_EMBEDDING_MODEL and [d.index for d in got.data] == [0, 1, 2]
    direct = shared_models().default().embed(TEXTS)
    for a, b, c in zip(got.data, floats.data, direct):
        assert len(a.embedding) == len(b.embedding) == 384
        assert abs(math.sqrt(dot(a.embedding, a.embedding)) - 1.0) < 1e-3
        assert dot(a.embedding, c) > 0.9999 and dot(b.embedding, c) > 0.9999
    question, answer, other = (d.embedding for d in got.data)
    assert dot(question, answer) > dot(question, other) + 0.3
    tokens = [len(shared_models().default().tokenize(t)) for t in TEXTS]
    assert got.usage.prompt_tokens == got.usage.total_tokens == sum(tokens)
    # One string, and token arrays (as some clients send), give the same vectors as the texts.
    one = client.embeddings.create(model=DEFAULT_EMBEDDING_MODEL, input=TEXTS[1], encoding_format="float")
    assert dot(one.data[0].embedding, floats.data[1].embedding) > 0.9999
    ids = [shared_models().default().tokenize(t) for t in TEXTS[:2]]
    arrays = client.embeddings.create(model=DEFAULT_EMBEDDING_MODEL, input=ids, encoding_format="float")
    assert dot(arrays.data[1].embedding, floats.data[1].embedding) > 0.9999
    assert client.embeddings.create(model=DEFAULT_EMBEDDING_MODEL, input="x", dimensions=384).data
    assert client.models.retrieve(DEFAULT_EMBEDDING_MODEL).x_localchat["n_embd"] == 384


def test_langchain_embeds_documents_and_queries(servers: dict[str, str]):
    from langchain_openai import OpenAIEmbeddings

    # Without check_embedding_ctx_length LangChain would send tiktoken's token ids, which only OpenAI's models read.
    embeddings = OpenAIEmbeddings(model=DEFAULT_EMBEDDING_MODEL, base_url=servers["open"] + "/v1", api_key="unused",
                                  check_embedding_ctx_length=False, max_retries=0)
    documents = embeddings.embed_documents(TEXTS[1:])
    query = embeddings.embed_query(TEXTS[0])
    assert len(documents) == 2 and len(query) == 384
    assert dot(query, documents[0]) > dot(query, documents[1]) + 0.3


def test_the_served_chat_model_embeds_when_named(servers: dict[str, str]):
    got = client_for(servers["open"]).embeddings.create(model=MODEL, input=TEXTS[:2], encoding_format="float")
    assert got.model == MODEL and len(got.data[0].embedding) == 576  # SmolLM2's width, mean-pooled
    assert abs(dot(got.data[0].embedding, got.data[0].embedding) - 1.0) < 1e-3


def test_bad_embedding_requests_are_clear_400s(servers: dict[str, str]):
    client = client_for(servers["open"])
    cases = [
        ({"input": "x", "dimensions": 128}, "makes 384-dimensional vectors"),
        ({"input": ["x"] * 257}, "at most 256"),
        ({"input": "word " * 600}, "over this embedding model's 512"),
        ({"input": []}, "input is empty"),
        ({"input": [""]}, "input 0 is empty"),
        ({"input": [[50_000]]}, "outside this model's vocabulary"),
        ({"input": "x", "encoding_format": "int8"}, "encoding_format"),
    ]
    for extra, words in cases:
        with pytest.raises(openai.BadRequestError) as err:
            client.embeddings.create(**{"model": DEFAULT_EMBEDDING_MODEL} | extra)
        assert words in err.value.message, (extra, err.value.message)
    for name in ("no-such-model", "/etc/passwd", "../models/x.gguf"):
        with pytest.raises(openai.NotFoundError):
            client.embeddings.create(model=name, input="x")


def test_embeddings_need_the_key_and_pass_through_a_proxy(servers: dict[str, str]):
    body = {"model": DEFAULT_EMBEDDING_MODEL, "input": "hello"}
    assert httpx.post(servers["keyed"] + "/v1/embeddings", json=body, timeout=60).status_code == 401
    keyed = client_for(servers["keyed"], KEY).embeddings.create(**body, encoding_format="float")
    proxied = client_for(servers["proxy"]).embeddings.create(**body, encoding_format="float")
    assert dot(keyed.data[0].embedding, proxied.data[0].embedding) > 0.9999
