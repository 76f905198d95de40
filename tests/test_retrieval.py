"""The embedding model (made by llama.cpp's converter, run in its embedding mode) and hybrid retrieval."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from localchat.errors import RequestError
from localchat.ingest import Document, Section, VectorStore, select
from localchat.ingest.recall import load_question_set, recall_at, remembering
from localchat.models.embedding import DEFAULT_EMBEDDING_MODEL, load_embedding_catalog
from localchat.models.wheels import sha256_of
from localchat.runners.embedding import EmbeddingModels
from localchat.runtime.backends import kernels
from localchat.runtime.workers.embedder import Embedder

SET = Path(__file__).parent / "data" / "retrieval"


@pytest.fixture(scope="module")
def embedder(model_path: Path, embedding_model_path: Path):
    kernels.activate(False, model_path)  # kernels proven on a quantized model, as the chat model does
    e = Embedder(embedding_model_path)
    yield e
    e.close()


def test_the_converted_file_is_the_catalogs_and_is_cached(embedding_model_path: Path):
    facts = load_embedding_catalog()[DEFAULT_EMBEDDING_MODEL]
    assert embedding_model_path.name == facts.file.file
    assert sha256_of(embedding_model_path) == facts.file.sha256  # the conversion made the catalog's bytes
    from localchat.models.resolve import resolve_model

    before = embedding_model_path.stat().st_mtime_ns
    assert resolve_model(DEFAULT_EMBEDDING_MODEL) == embedding_model_path
    assert embedding_model_path.stat().st_mtime_ns == before  # found, not made again


def test_the_model_pools_from_its_file_and_places_paraphrases_together(embedder: Embedder):
    facts = load_embedding_catalog()[DEFAULT_EMBEDDING_MODEL]
    assert (embedder.pooling, embedder.n_embd, embedder.max_tokens) == (facts.pooling, facts.n_embd, facts.n_ctx_train)
    question, answer, other = embedder.embed(["how much fuel did the lamp use",
                                              "The lamp burned 31 litres of oil in a single night.",
                                              "The keeper painted the cottage door red."])
    dot = lambda a, b: sum(x * y for x, y in zip(a, b))  # noqa: E731
    assert abs(dot(question, question) - 1.0) < 1e-4  # unit length
    assert dot(question, answer) > dot(question, other) + 0.3
    # Batched or alone, a text gets the same vector.
    alone = embedder.embed(["The keeper painted the cottage door red."])[0]
    assert dot(alone, other) > 0.9999


def test_embedding_refuses_what_it_cannot_read(embedder: Embedder):
    too_long = [embedder.tokenize("word")[1]] * (embedder.max_tokens + 1)
    with pytest.raises(RequestError, match=f"over this embedding model's {embedder.max_tokens}"):
        embedder.embed_tokens([too_long])
    with pytest.raises(RequestError, match="empty"):
        embedder.embed_tokens([[]])
    with pytest.raises(RequestError, match="outside this model's vocabulary"):
        embedder.embed_tokens([[10 ** 9]])
    assert len(embedder.embed(["word " * 5000])) == 1  # documents' chunks are cut to fit instead


def test_hybrid_retrieval_finds_paraphrased_answers_that_bm25_misses(embedder: Embedder, tmp_path: Path):
    documents, questions = load_question_set(SET)
    vectors = VectorStore(tmp_path / "vectors.sqlite3")
    bm25 = recall_at(5, documents, questions, 200)
    hybrid = recall_at(5, documents, questions, 200, remembering(embedder), vectors)
    # Paraphrases are where words fail and meaning helps; on names and dates words stay strong.
    assert hybrid.share("paraphrase") >= bm25.share("paraphrase") + 0.1, (bm25.misses, hybrid.misses)
    assert hybrid.share("literal") >= bm25.share("literal") - 0.1, (bm25.misses, hybrid.misses)
    assert hybrid.share() > bm25.share()


def _long_document(name: str) -> Document:
    sections = [Section(f"Entry {i}. The keeper wound the clockwork {i} times and logged {i * 7} gallons of "
                        f"oil for the lamp in week {i}. " * 3, f"§ Week {i}") for i in range(16)]
    return Document(name, "text", sections)


def test_chunk_vectors_are_made_once_per_document_and_kept(embedder: Embedder, tmp_path: Path):
    doc = _long_document("log.txt")
    store = VectorStore(tmp_path / "vectors.sqlite3")
    first = select("How much oil in week 12?", [doc], 600, embedder=embedder, vectors=store)
    assert first.mode == "retrieved" and first.ranking == "hybrid"
    made = store.num_embedded
    assert made == first.parts[0].num_chunks
    select("What was wound?", [doc], 600, embedder=embedder, vectors=store)
    assert store.num_embedded == made  # the second question embedded only itself
    store.close()
    again = VectorStore(tmp_path / "vectors.sqlite3")  # after a restart
    assert select("Week 30?", [doc], 600, embedder=embedder, vectors=again).ranking == "hybrid"
    assert again.num_embedded == 0
    # Vectors belong to the content, not the file name: the same text attached again is not embedded again.
    select("Week 30?", [_long_document("copy of log.txt")], 600, embedder=embedder, vectors=again)
    assert again.num_embedded == 0


def test_without_the_embedding_model_retrieval_uses_words_and_says_so_once(tmp_path: Path, monkeypatch, caplog):
    monkeypatch.setenv("LOCALCHAT_HOME", str(tmp_path / "empty-home"))
    models = EmbeddingModels()
    with caplog.at_level(logging.WARNING, logger="localchat.models.embedding"):
        assert models.default() is None
        assert models.default() is None
    said = [r for r in caplog.records if "BM25" in r.getMessage()]
    assert len(said) == 1 and f"localchat pull {DEFAULT_EMBEDDING_MODEL}" in said[0].getMessage()
    selection = select("How much oil?", [_long_document("log.txt")], 600, embedder=models.default())
    assert selection.ranking == "bm25" and selection.to_dict()["ranking"] == "bm25"
