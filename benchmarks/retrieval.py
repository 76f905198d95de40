"""Retrieval benchmark: recall@k of the chunk ranking on a question set, BM25 alone against hybrid
(BM25 fused with the embedding model's cosine), by kind of question and chunk size.

    python benchmarks/retrieval.py [--set tests/data/retrieval] [--k 5] [--chunks 100 200 300]

The embedding model is the catalog's (fetched and converted on first use). Chunks are cut as the
window cuts them (token counts estimated at four characters a token) and pooled over every document
of the set, as when all of them are attached to one chat. Also printed: meaning alone (BM25 weight
0) and BM25 at full weight, to show what the fusion's weight does.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from localchat.ingest.chunking import chunk_document
from localchat.ingest.recall import load_question_set, recall_at, remembering
from localchat.ingest.retrieve import BM25_WEIGHT
from localchat.ingest.vectors import VectorStore
from localchat.models.embedding import DEFAULT_EMBEDDING_MODEL
from localchat.models.resolve import resolve_model
from localchat.runtime.backends import kernels
from localchat.runtime.workers.embedder import Embedder

SET = Path(__file__).resolve().parent.parent / "tests" / "data" / "retrieval"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", type=Path, default=SET, help="a folder with documents and questions.json")
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--chunks", type=int, nargs="+", default=[100, 200, 300], help="chunk sizes in tokens")
    parser.add_argument("--model", default=DEFAULT_EMBEDDING_MODEL, help="an embedding model name or GGUF path")
    args = parser.parse_args()
    documents, questions = load_question_set(args.set)
    kinds = sorted({q.kind for q in questions})
    kernels.activate(False, resolve_model("smollm2-135m"))  # kernels proven on a quantized model, as in the window
    embedder = Embedder(resolve_model(args.model))
    print(f"{len(documents)} documents ({sum(len(d.text.split()) for d in documents):,} words), "
          f"{len(questions)} questions ({', '.join(f'{sum(q.kind == k for q in questions)} {k}' for k in kinds)}); "
          f"embedding model {embedder.model_path.name}, {embedder.pooling} pooling")
    rankings = {"bm25": None, f"hybrid (BM25 weight {BM25_WEIGHT})": BM25_WEIGHT, "hybrid (BM25 weight 1)": 1.0,
                "meaning alone": 0.0}
    misses: dict[int, list[str]] = {}
    questions_once = remembering(embedder)
    with tempfile.TemporaryDirectory() as tmp:
        vectors = VectorStore(Path(tmp) / "vectors.sqlite3")
        print("\n| chunk tokens | chunks | ranking | " + " | ".join(f"recall@{args.k} {k}" for k in kinds)
              + f" | recall@{args.k} all |")
        print("|---|---|---|" + "---|" * (len(kinds) + 1))
        for size in args.chunks:
            n_chunks = sum(len(chunk_document(d, size)) for d in documents)
            for label, weight in rankings.items():
                every = recall_at(args.k, documents, questions, size, questions_once if weight is not None else None,
                                  vectors, bm25_weight=weight or 0.0)
                print(f"| {size} | {n_chunks} | {label} | " + " | ".join(f"{every.share(k):.3f}" for k in kinds)
                      + f" | {every.share():.3f} |", flush=True)
                if weight == BM25_WEIGHT:
                    misses[size] = every.misses
        vectors.close()
    for size, missed in misses.items():
        print(f"\nhybrid missed at {size} tokens: " + ("; ".join(missed) or "none"))
    embedder.close()


if __name__ == "__main__":
    main()
