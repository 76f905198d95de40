"""Choose what of the attached documents goes into the prompt: all of it, or the best chunks."""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from .chunking import (DEFAULT_CHUNK_TOKENS, Chunk, CountTokens, chunk_document, describe_anchors,
                       estimate_tokens)
from .document import Document
from .vectors import Embedder, VectorStore

_CONTEXT_HEAD = "Documents:\n\n"
_RETRIEVED_HEAD = "Excerpts from the attached documents (they are too long to show in full):\n\n"
_SUMMARY_ANCHORS = 12  # places named per document in summary(); to_dict() lists them all
_RRF_K = 60  # the usual constant of reciprocal rank fusion; damps the weight of the very top ranks
# BM25's share of the fused rank. A question that shares a common word ("lamp", "water") with dozens
# of passages gets a noisy word ranking; at half weight it still lifts a passage that names the
# question's rare terms (a name, a date), and no longer buries one that says the same in other
# words (docs/benchmarks.md, "Retrieval": both kinds of question, both weights).
BM25_WEIGHT = 0.5
# No tokenizer packs this many characters into one token; longer texts need not be counted.
_MAX_CHARS_PER_TOKEN = 32
_WORD = re.compile(r"\w+")
_STOPWORDS = frozenset("""
a an and are as at be been but by can could did do does for from had has have he her his how i if
in into is it its me my no not of on or our she so than that the their them then there these they
this those to was we were what when where which who whom why will with would you your
""".split())


@dataclass(slots=True)
class DocumentPart:
    """What of one document is in the prompt."""

    name: str
    kind: str
    whole: bool
    num_tokens: int
    num_chunks: int = 0  # chunks the document was cut into (retrieved mode)
    chunks: list[Chunk] = field(default_factory=list)  # those chosen, in reading order


@dataclass(slots=True)
class Selection:
    """The documents' share of a prompt: "whole" documents, or "retrieved" chunks in reading order."""

    mode: str
    parts: list[DocumentPart]
    documents: list[Document]
    num_tokens: int  # of build_context(self), by the count_tokens given to select()
    budget_tokens: int
    ranking: str = ""  # how retrieved chunks were ranked: "hybrid" (meaning and words) or "bm25" (words)

    def summary(self) -> str:
        """One line saying what was included, e.g. "report.pdf: p. 3, p. 7 (4 of 52 chunks)"."""
        items = []
        nothing = self.mode == "retrieved" and not any(p.chunks for p in self.parts)
        for part in self.parts:
            if part.whole:
                items.append(f"{part.name} whole ({part.num_tokens:,} tokens)")
            elif part.chunks:
                anchors = [a for c in part.chunks for a in c.anchors]
                items.append(f"{part.name}: {describe_anchors(anchors, _SUMMARY_ANCHORS)} "
                             f"({len(part.chunks)} of {part.num_chunks} chunks)")
            elif nothing:
                items.append(f"{part.name}: not included, no room left in the context "
                             f"(0 of {part.num_chunks} chunks)")
            else:
                items.append(f"{part.name}: no part among the best matches (0 of {part.num_chunks} chunks)")
        return "; ".join(items)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready account of what was included."""
        return {
            "mode": self.mode,
            **({"ranking": self.ranking} if self.ranking else {}),
            "num_tokens": self.num_tokens,
            "budget_tokens": self.budget_tokens,
            "documents": [
                {"name": p.name, "kind": p.kind, "whole": p.whole, "num_tokens": p.num_tokens}
                | ({} if p.whole else {
                    "num_chunks": p.num_chunks,
                    "chunks": [{"index": c.index, "anchors": c.anchors, "label": c.label,
                                "num_tokens": c.num_tokens} for c in p.chunks]})
                for p in self.parts],
        }


def marker(name: str, anchor: str) -> str:
    """The citation marker the model sees and is asked to repeat: "[report.pdf p. 3]"."""
    return f"[{name} {anchor}]"


def select(question: str, documents: Sequence[Document], budget_tokens: int,
           count_tokens: CountTokens = estimate_tokens, *, embedder: Embedder | None = None,
           vectors: VectorStore | None = None, chunk_tokens: int | None = None) -> Selection:
    """Fit build_prompt(question, ...) into budget_tokens: whole documents if all fit, else the best chunks.

    With an `embedder`, chunks are ranked by meaning and words together (hybrid), else by words (BM25);
    `vectors` keeps the chunks' vectors, so each chunk is embedded once, not on every question."""
    docs = list(documents)
    # The instructions name one marker as an example; reserve room for the longest one it can be.
    longest = max((d.name for d in docs), key=len, default="")
    overhead = count_tokens(_instructions(marker(longest, "§ " + "x" * 60), question))
    budget = budget_tokens - overhead
    costs = [document_tokens(doc, count_tokens, budget) for doc in docs]
    total = count_tokens(_CONTEXT_HEAD) + sum(costs)
    if total <= budget:
        parts = [DocumentPart(d.name, d.kind, True, c) for d, c in zip(docs, costs)]
        return Selection("whole", parts, docs, total, budget_tokens)

    # Small budgets get small chunks, so that several places in the documents can be shown.
    size = chunk_tokens or max(32, min(DEFAULT_CHUNK_TOKENS, budget // 6))
    chunked = [chunk_document(doc, size, count_tokens) for doc in docs]
    pool = [(d, c) for d, chunks in enumerate(chunked) for c in chunks]
    blocks = [_chunk_block(c) for _, c in pool]
    ranking = rank_chunks(question, docs, pool, embedder, vectors)
    spent = count_tokens(_RETRIEVED_HEAD)
    chosen: list[int] = []
    for i in ranking:
        chunk = pool[i][1]
        if spent + chunk.num_tokens + 1 > budget:
            continue  # cannot fit even without its marker; spare the tokenizer
        # The block as it will appear, marker included; +1: the separator between blocks.
        cost = count_tokens(blocks[i]) + 1
        if spent + cost <= budget:
            chosen.append(i)
            spent += cost
    chosen.sort()  # pool order is reading order: documents as given, chunks within each
    parts = []
    for d, (doc, chunks) in enumerate(zip(docs, chunked)):
        mine = [pool[i][1] for i in chosen if pool[i][0] == d]
        parts.append(DocumentPart(doc.name, doc.kind, False, sum(c.num_tokens for c in mine),
                                  len(chunks), mine))
    return Selection("retrieved", parts, docs, spent, budget_tokens, "hybrid" if embedder else "bm25")


def document_tokens(doc: Document, count_tokens: CountTokens, budget: int | None = None) -> int:
    """The tokens a document takes in the prompt when it goes in whole: its text with the source
    markers before each section and the separator after it. The attachment chip, the meter and the
    reply's "whole (N tokens)" all count it so. Past `budget`, a count that cannot fit it is enough."""
    block = _whole_block(doc)
    # Tokenizing a 50 MB document only to learn that it does not fit is wasted seconds.
    if budget is not None and len(block) > budget * _MAX_CHARS_PER_TOKEN:
        return max(budget, 0) + 2
    return count_tokens(block) + 1  # +1: the separator between documents


def build_context(selection: Selection) -> str:
    """The documents' text with a source marker before each passage; a stable prompt prefix."""
    if selection.mode == "whole":
        return _CONTEXT_HEAD + "\n\n".join(_whole_block(doc) for doc in selection.documents)
    blocks = [_chunk_block(c) for part in selection.parts for c in part.chunks]
    return _RETRIEVED_HEAD + "\n\n".join(blocks)


def build_prompt(question: str, selection: Selection) -> str:
    """The user turn: documents, how to cite them, then the question."""
    return build_context(selection) + _instructions(_first_marker(selection), question)


def _instructions(example: str, question: str) -> str:
    return ("\n\nAnswer from the documents above. After each fact you use, cite the source marker "
            f"that comes before it, like {example}. If the documents do not say, answer that "
            f"they do not.\n\nQuestion: {question}")


def bm25_scores(query: str, texts: Sequence[str], k1: float = 1.5, b: float = 0.75) -> list[float]:
    """Okapi BM25 score of every text for the query (0.0 where no query term occurs)."""
    query_terms = set(_terms(query))
    docs = [Counter(_terms(t)) for t in texts]
    if not docs or not query_terms:
        return [0.0] * len(docs)
    lengths = [sum(c.values()) for c in docs]
    avg = sum(lengths) / len(docs) or 1.0
    df = Counter(t for c in docs for t in query_terms if t in c)
    n = len(docs)
    idf = {t: math.log((n - df[t] + 0.5) / (df[t] + 0.5) + 1.0) for t in query_terms}
    scores = []
    for counts, length in zip(docs, lengths):
        score = 0.0
        for term in query_terms:
            tf = counts.get(term, 0)
            if tf:
                score += idf[term] * tf * (k1 + 1) / (tf + k1 * (1 - b + b * length / avg))
        scores.append(score)
    return scores


def _terms(text: str) -> list[str]:
    terms = []
    for word in _WORD.findall(text.lower()):
        if word in _STOPWORDS:
            continue
        # A plural and its singular should match; a full stemmer is not worth a dependency.
        if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
            word = word[:-1]
        terms.append(word)
    return terms


def rank_chunks(question: str, docs: Sequence[Document], pool: Sequence[tuple[int, Chunk]],
                embedder: Embedder | None = None, vectors: VectorStore | None = None,
                bm25_weight: float = BM25_WEIGHT) -> list[int]:
    """Indices into `pool` ((document index, chunk) pairs), best first: BM25 over each chunk as the
    prompt shows it, fused with the cosine of the question's and the chunks' vectors when there is an
    embedder (weighted reciprocal rank fusion: ranks, not scores, so neither scale dominates)."""
    # Ties (all zeros, say) go to the first chunk of each document, then the second...
    spread = [(c.index, d) for d, c in pool]
    scores = bm25_scores(question, [_chunk_block(c) for _, c in pool])
    by_bm25 = sorted(range(len(pool)), key=lambda i: (-scores[i], spread[i]))
    if embedder is None:
        matched = [i for i in by_bm25 if scores[i] > 0]
        # With no word in common there is nothing to rank by; show the beginnings.
        return matched or by_bm25
    cosines = _cosines(question, docs, pool, embedder, vectors)
    by_cosine = sorted(range(len(pool)), key=lambda i: (-cosines[i], spread[i]))
    fused = [0.0] * len(pool)
    # BM25's result list holds only the chunks that share a word with the question; a chunk
    # it did not find must not gain from its place among the zero scores.
    for weight, ranking in ((bm25_weight, [i for i in by_bm25 if scores[i] > 0]), (1.0, by_cosine)):
        for rank, i in enumerate(ranking):
            fused[i] += weight / (_RRF_K + rank + 1)
    return sorted(range(len(pool)), key=lambda i: (-fused[i], spread[i]))


def _cosines(question: str, docs: Sequence[Document], pool: Sequence[tuple[int, Chunk]], embedder: Embedder,
             vectors: VectorStore | None) -> list[float]:
    """The cosine of the question's vector with each chunk's, the chunks' from `vectors` when given."""
    rows: list[Any] = [None] * len(pool)
    for d, doc in enumerate(docs):
        mine = [i for i, (owner, _) in enumerate(pool) if owner == d]
        texts = [pool[i][1].text for i in mine]
        found = vectors.vectors(embedder, doc, texts) if vectors is not None else embedder.embed(texts)
        for i, vector in zip(mine, found):
            rows[i] = vector
    if not rows:
        return []
    matrix = np.asarray(rows, dtype=np.float32)
    query = np.asarray(embedder.embed([question])[0], dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=1) * (np.linalg.norm(query) or 1.0)
    return (matrix @ query / np.where(norms > 0, norms, 1.0)).tolist()


def _whole_block(doc: Document) -> str:
    return "\n\n".join(f"{marker(doc.name, s.anchor)}\n{s.text}" for s in doc.sections)


def _chunk_block(chunk: Chunk) -> str:
    return f"{marker(chunk.document, chunk.label)}\n{chunk.text}"


def _first_marker(selection: Selection) -> str:
    if selection.mode == "retrieved":
        for part in selection.parts:
            if part.chunks:
                return marker(part.name, part.chunks[0].anchors[0])
    for doc in selection.documents:
        if doc.sections:
            return marker(doc.name, doc.sections[0].anchor)
    return "[name p. 1]"
