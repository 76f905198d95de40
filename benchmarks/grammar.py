"""Constrained decoding benchmark: tokens/s with a JSON-schema grammar vs without, same prompt,
same engine, runs alternated, medians.

    python benchmarks/grammar.py [--model PATH] [--repeats 5] [--tokens 128] [--threads N]

Greedy checks the grammar on the argmax alone and masks the whole vocabulary only when the grammar
refuses it; sampling masks the whole vocabulary every token (so the chain draws from the allowed
tokens only). Both are measured.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from localchat.runtime.constraints.grammar import grammar_from_json_schema
from localchat.runtime.engine import Engine, EngineConfig, Request
from localchat.runtime.sampling import SamplingParams
from localchat.runtime.workers.worker import WorkerConfig, default_threads

PROMPT = "List forty fruits as a JSON object with one key, \"items\", holding an array of their names."
SCHEMA = {"type": "object", "properties": {"items": {"type": "array", "items": {"type": "string"}, "minItems": 60}},
          "required": ["items"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, help="a GGUF file (default: the embedded model)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=default_threads())
    parser.add_argument("--deterministic", action="store_true", help="the deterministic mode's kernels")
    args = parser.parse_args()
    if args.model is None:
        from localchat.models.resolve import resolve_model

        args.model = resolve_model("smollm2-135m")
    grammar = grammar_from_json_schema(SCHEMA)  # long enough that every run gives `--tokens` tokens
    modes = {
        "greedy, free": SamplingParams(temperature=0.0, max_tokens=args.tokens, ignore_eos=True),
        "greedy, grammar": SamplingParams(temperature=0.0, max_tokens=args.tokens, grammar=grammar),
        "sampled, free": SamplingParams(temperature=0.8, seed=1, max_tokens=args.tokens, ignore_eos=True),
        "sampled, grammar": SamplingParams(temperature=0.8, seed=1, max_tokens=args.tokens, grammar=grammar),
    }
    rates: dict[str, list[float]] = {name: [] for name in modes}
    config = EngineConfig(worker=WorkerConfig(n_ctx=2048, n_threads=args.threads, deterministic=args.deterministic))
    with Engine.load(args.model, config) as engine:
        request = lambda params: Request(messages=[{"role": "user", "content": PROMPT}], sampling=params)  # noqa: E731
        engine.submit(request(modes["greedy, free"])).result()  # warm up
        for _ in range(args.repeats):
            for name, params in modes.items():
                result = engine.submit(request(params)).result()
                assert result.stats.completion_tokens == args.tokens, (name, result.text)
                rates[name].append(result.stats.tokens_per_s)
    mode = "deterministic" if args.deterministic else "default"
    print(f"{args.model.name}, {mode} mode, {args.threads} threads, {args.tokens} tokens, median of {args.repeats}\n")
    print("| mode | tokens/s | vs free |")
    print("|---|---:|---:|")
    for name, values in rates.items():
        free = statistics.median(rates[name.split(",")[0] + ", free"])
        rate = statistics.median(values)
        print(f"| {name} | {rate:.1f} | {rate / free:.2f}x |")


if __name__ == "__main__":
    main()
