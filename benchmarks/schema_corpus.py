"""The schema corpus through the OpenAI-compatible API: real tools' parameter schemas (called with
tool_choice required) and real response schemas (response_format json_schema), several seeds each,
on the embedded model. Prints refusals, schema-valid results (checked here with `jsonschema`
itself), the resamples per keyword and the time they cost.

    python benchmarks/schema_corpus.py [--seeds 10] [--output FILE.md]

The corpus is tests/data/schema_corpus.json: MCP reference servers' tools, OpenAI's and
Anthropic's documented examples, pydantic models with Field constraints, and json-schema.org's
examples of the keywords a grammar cannot express.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import jsonschema
import openai

CORPUS = Path(__file__).resolve().parents[1] / "tests" / "data" / "schema_corpus.json"
MODEL = "smollm2-135m"
MAX_TOKENS = 320


def load_corpus() -> list[dict[str, Any]]:
    return json.loads(CORPUS.read_text(encoding="utf-8"))


def _multiple_of(validator, step, instance, schema):
    # jsonschema divides in binary floating point, where 19.99 is no multiple of 0.01.
    if validator.is_type(instance, "number") and Decimal(repr(instance)) % Decimal(repr(step)) != 0:
        yield jsonschema.ValidationError(f"{instance!r} is not a multiple of {step!r}")


def validate(value: Any, schema: dict[str, Any]) -> None:
    """jsonschema's own validation of `value` (its formats included; multipleOf in decimal)."""
    base = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    cls = jsonschema.validators.extend(base, {"multipleOf": _multiple_of})
    cls(schema, format_checker=jsonschema.FormatChecker()).validate(value)


@dataclass
class Outcome:
    name: str
    seed: int
    refused: str = ""  # the 400's message, when the request was refused
    invalid: str = ""  # why the result does not validate (or the error after the attempts)
    cut: bool = False  # max_tokens ended the answer inside its value: no result to validate
    resampled: list[str] = field(default_factory=list)
    seconds: float = 0.0
    resample_ms: float = 0.0


def ask(client: openai.OpenAI, entry: dict[str, Any], seed: int, temperature: float = 0.8,
        max_tokens: int = MAX_TOKENS) -> Outcome:
    """One corpus entry with one seed, as a client would send it."""
    out = Outcome(entry["name"], seed)
    messages = [{"role": "user", "content": entry["prompt"]}]
    common = dict(model=MODEL, messages=messages, temperature=temperature, seed=seed, max_tokens=max_tokens)
    start = time.perf_counter()
    try:
        if entry["kind"] == "tool":
            tool = {"type": "function", "function": {"name": entry["name"], "description": entry["description"],
                                                     "parameters": entry["schema"]}}
            reply = client.chat.completions.create(**common, tools=[tool], tool_choice="required",
                                                   parallel_tool_calls=False)
            calls = reply.choices[0].message.tool_calls or []
            text = calls[0].function.arguments if calls else None
        else:
            reply = client.chat.completions.create(**common, response_format={
                "type": "json_schema", "json_schema": {"name": entry["name"], "schema": entry["schema"]}})
            text = reply.choices[0].message.content
    except openai.APITimeoutError:
        out.seconds = time.perf_counter() - start
        out.invalid = f"no answer within {client.timeout} s"
        return out
    except openai.InternalServerError as exc:
        out.seconds = time.perf_counter() - start
        out.cut = "cut off" in str(exc)  # a tool call that max_tokens ended
        out.invalid = "" if out.cut else str(exc)
        return out
    except openai.BadRequestError as exc:
        out.seconds = time.perf_counter() - start
        message = str(exc.body.get("message", exc) if isinstance(exc.body, dict) else exc)
        if "broke the JSON schema keyword" in message:
            out.invalid = message  # accepted, and the attempts ran out
        else:
            out.refused = message
        return out
    out.seconds = time.perf_counter() - start
    extras = (reply.model_extra or {}).get("x_localchat") or {}
    resampled = extras.get("resampled") or {}
    out.resampled, out.resample_ms = list(resampled.get("keywords", [])), float(resampled.get("ms", 0.0))
    if reply.choices[0].finish_reason == "length":
        out.cut = True
        return out
    if text is None:
        out.invalid = f"no value in the answer ({reply.choices[0].finish_reason})"
        return out
    try:
        validate(json.loads(text), entry["schema"])
    except (json.JSONDecodeError, jsonschema.ValidationError) as exc:
        out.invalid = f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
    return out


def run(client: openai.OpenAI, seeds: range, temperature: float = 0.8, entries: list[dict[str, Any]] | None = None,
        max_tokens: int = MAX_TOKENS, progress: bool = False) -> list[Outcome]:
    """Every entry with every seed, eight at a time (the engine batches them)."""
    jobs = [(entry, seed) for entry in (entries or load_corpus()) for seed in seeds]

    def one(job: tuple[dict[str, Any], int]) -> Outcome:
        outcome = ask(client, *job, temperature, max_tokens)
        if progress:
            print(f"{outcome.name} seed {outcome.seed}: {outcome.seconds:.1f} s, resampled {outcome.resampled}"
                  f"{' CUT' if outcome.cut else ''}{' REFUSED ' + outcome.refused if outcome.refused else ''}"
                  f"{' INVALID ' + outcome.invalid if outcome.invalid else ''}", file=sys.stderr, flush=True)
        return outcome
    with ThreadPoolExecutor(8) as pool:
        return list(pool.map(one, jobs))


def report(outcomes: list[Outcome]) -> str:
    finished = [o for o in outcomes if not o.refused and not o.cut]
    valid = sum(not o.invalid for o in finished)
    keywords = Counter(k for o in outcomes for k in o.resampled)
    with_resamples = [o for o in outcomes if o.resampled]
    lines = [f"{len({o.name for o in outcomes})} schemas x {len({o.seed for o in outcomes})} seeds = "
             f"{len(outcomes)} requests",
             f"refused: {sum(bool(o.refused) for o in outcomes)}",
             f"cut by max_tokens inside the value, so not results: {sum(o.cut for o in outcomes)}",
             f"schema-valid results: {valid}/{len(finished)} ({100 * valid / max(1, len(finished)):.1f}%)",
             f"answers resampled: {len(with_resamples)} ({sum(map(len, (o.resampled for o in outcomes)))} resamples)",
             f"time per request: {sum(o.seconds for o in outcomes) / max(1, len(outcomes)):.2f} s; resampling: "
             f"{sum(o.resample_ms for o in outcomes) / 1000:.1f} s in all, "
             f"{sum(o.resample_ms for o in with_resamples) / max(1, len(with_resamples)):.0f} ms per resampled answer",
             "", "| keyword | resamples |", "|---|---:|"]
    lines += [f"| `{k}` | {n} |" for k, n in keywords.most_common()]
    problems = [o for o in outcomes if o.refused or o.invalid]
    if problems:
        lines += ["", "| schema | seed | problem |", "|---|---:|---|"]
        lines += [f"| {o.name} | {o.seed} | {(o.refused or o.invalid)[:160]} |" for o in problems]
    return "\n".join(lines)


def main() -> int:
    from localchat.models.resolve import resolve_model
    from localchat.runtime.engine import Engine, EngineConfig
    from localchat.runtime.workers.worker import WorkerConfig, default_threads

    sys.path.insert(0, str(Path(__file__).parent))
    from api import start_server  # the API benchmark's in-process server

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--temperature", type=float, default=0.8)
    parser.add_argument("--max-tokens", type=int, default=MAX_TOKENS)
    parser.add_argument("--output", help="also write the report to this file")
    args = parser.parse_args()
    config = EngineConfig(worker=WorkerConfig(n_ctx=8192, n_threads=default_threads()))
    with Engine.load(resolve_model(MODEL), config) as engine:
        url, server = start_server(engine)
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=600)
        started = time.perf_counter()
        outcomes = run(client, range(args.seeds), args.temperature, max_tokens=args.max_tokens, progress=True)
        text = (f"temperature {args.temperature}, max_tokens {args.max_tokens}\n" + report(outcomes)
                + f"\n\nwall time: {time.perf_counter() - started:.0f} s")
        server.should_exit = True
    print(text)
    if args.output:
        Path(args.output).write_text(text + "\n", encoding="utf-8")
    return 0 if all(not o.refused and not o.invalid for o in outcomes) else 1


if __name__ == "__main__":
    raise SystemExit(main())
