"""Document follow-ups: the prompt each question about one long document sends, in tokens (and how many of
them the KV cache held), and its time to first token, through the window's own chat logic.

    python benchmarks/document_follow_ups.py [--n-ctx 8192] [--follow-ups 3] [--model smollm2-135m]

The document is too long to go in whole, so each question retrieves passages (at most PASSAGE_SHARE of the
context); the numbers show whether a follow-up's prompt grows with the chat's earlier passages.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from localchat.models.resolve import resolve_model
from localchat.runners.embedding import shared_models
from localchat.runtime.engine import Engine, EngineConfig
from localchat.runtime.workers.worker import WorkerConfig
from localchat.ui.chat.core import ChatCore
from localchat.ui.chat.session import Runtime, Sampling
from localchat.ui.chat.store import Store
from localchat.ui.documents.uploads import store_upload

FACTS = ["The keeper's cat is called Pepperpot.", "The schooner Marigold ran aground on the north reef.",
         "The lantern room was painted a deep saffron yellow.", "The relief boat came every second Thursday.",
         "The foghorn was tested each morning at seven."]
QUESTIONS = ["What is the keeper's cat called?", "Which schooner ran aground?", "What colour is the lantern room?",
             "How often did the relief boat come?", "When was the foghorn tested?"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-ctx", type=int, default=8192)
    parser.add_argument("--follow-ups", type=int, default=3, choices=range(1, len(QUESTIONS)))
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="follow-ups-"))
    lines = [f"Day {i}: the keeper logged calm weather and trimmed the wicks." for i in range(2000)]
    for n, fact in enumerate(FACTS):
        lines[200 + n * 350] = fact
    doc = folder / "logbook.txt"
    doc.write_text("\n".join(lines))
    engine = Engine.load(resolve_model(args.model), EngineConfig(worker=WorkerConfig(
        n_ctx=args.n_ctx, n_threads=args.threads, n_seq_max=2)))
    core = ChatCore(Runtime(engine, args.model), Store(folder / "chats.sqlite3"))
    sampling = Sampling(temperature=0.0, top_p=1.0, max_tokens=24)
    conv = None
    try:
        print(f"{'turn':<12} {'prompt':>7} {'reused':>7} {'TTFT ms':>9}  question")
        for turn, question in enumerate(QUESTIONS[: args.follow_ups + 1]):
            conv = core.add_user_turn(conv, question, [str(store_upload(doc))] if conv is None else [], "", sampling)
            list(core.answer(conv, sampling))
            stats = core.store.get(conv).messages[-1].stats
            name = "first" if turn == 0 else f"follow-up {turn}"
            print(f"{name:<12} {stats['prompt_tokens']:>7,} {stats['cached_tokens']:>7,} {stats['ttft_ms']:>9,.0f}  "
                  f"{question}")
    finally:
        engine.close()
        core.store.close()
        shared_models().close()


if __name__ == "__main__":
    main()
