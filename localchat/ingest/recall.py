"""Recall@k of the chunk ranking on a question set: how often the passage that answers a question is
among the k chunks ranked first (benchmarks/retrieval.py prints it; a test holds hybrid above BM25).

A set is a folder of documents and a `questions.json` naming, for each question, its document and a
phrase that only the answering passage contains.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from .chunking import CountTokens, chunk_document, estimate_tokens
from .extract import Document, extract
from .retrieve import BM25_WEIGHT, rank_chunks
from .vectors import Embedder, VectorStore


@dataclass(slots=True)
class Question:
    question: str
    document: str
    answer: str  # a phrase only the answering passage holds
    kind: str = ""  # "paraphrase" (other words than the passage's) or "literal" (its names and terms)


@dataclass(slots=True)
class Recall:
    """Which questions' answers were among the top k chunks."""

    k: int
    hits: list[tuple[Question, bool]]

    def share(self, kind: str | None = None) -> float:
        """The share of questions (of one kind, or all) whose answer was found."""
        mine = [found for q, found in self.hits if kind is None or q.kind == kind]
        return sum(mine) / len(mine) if mine else 0.0

    @property
    def misses(self) -> list[str]:
        return [q.question for q, found in self.hits if not found]


class _Remembered:
    """An embedder that embeds each question once, however many rankings ask for it."""

    def __init__(self, embedder: Embedder) -> None:
        self.inner, self.identity = embedder, embedder.identity
        self.known: dict[str, Sequence[float]] = {}

    def embed(self, texts: Sequence[str]) -> list[Sequence[float]]:
        new = [t for t in dict.fromkeys(texts) if t not in self.known]
        if new:
            self.known |= dict(zip(new, self.inner.embed(new)))
        return [self.known[t] for t in texts]


def load_question_set(folder: Path) -> tuple[list[Document], list[Question]]:
    """The documents (in the order the questions first name them) and the questions of a set."""
    raw = json.loads((folder / "questions.json").read_text(encoding="utf-8"))
    questions = [Question(q["question"], q["document"], q["answer"], q.get("kind", "")) for q in raw["questions"]]
    names = list(dict.fromkeys(q.document for q in questions))
    return [extract(folder / name) for name in names], questions


def recall_at(k: int, documents: list[Document], questions: list[Question], chunk_tokens: int,
              embedder: Embedder | None = None, vectors: VectorStore | None = None,
              count_tokens: CountTokens = estimate_tokens, bm25_weight: float = BM25_WEIGHT) -> Recall:
    """Recall@k over every document's chunks pooled, as select() ranks them with all the documents attached
    (BM25 alone without an embedder; meaning alone with bm25_weight 0)."""
    chunked = [chunk_document(doc, chunk_tokens, count_tokens) for doc in documents]
    pool = [(d, c) for d, chunks in enumerate(chunked) for c in chunks]
    index = {doc.name: d for d, doc in enumerate(documents)}
    if embedder is not None and not isinstance(embedder, _Remembered):
        embedder = _Remembered(embedder)
        embedder.embed([q.question for q in questions])  # one batch
    hits = []
    for q in questions:
        assert any(q.answer in c.text for _, c in pool), f"no chunk holds {q.answer!r}"
        top = rank_chunks(q.question, documents, pool, embedder, vectors, bm25_weight)[:k]
        hits.append((q, any(pool[i][0] == index[q.document] and q.answer in pool[i][1].text for i in top)))
    return Recall(k, hits)


def remembering(embedder: Embedder) -> Embedder:
    """`embedder`, with the vectors of texts it was asked for kept (the questions of many rankings)."""
    return _Remembered(embedder)
