"""canitoolcall's conformance corpus through localchat's own readers: every recorded raw output of nine
tool-calling families, whole and streamed in many chunkings, judged by canitoolcall's own checks.

    python benchmarks/toolcall_corpus.py [--family NAME] [--show-failures] [--output FILE.md]

What is replayed: each family's real chat template (tests/data/templates/, copied from the llama.cpp
source llama-cpp-python vendors) picks the thinking style and the tool-call format, exactly as a served
GGUF's template would; the fixture's generation prompt says whether the prompt opened or closed the
thinking; the raw output then goes through api/reader.py (thinking split, then the family's call parser).
The whole reply is what the API returns whole (content, reasoning, the calls that closed); each stream
is what an OpenAI client puts back together from the deltas. A fixture cut by max_tokens (`truncated`)
ends as the engine ends it then (finish_reason "length").

Chunkings: the fixtures' token ids need each model's Hugging Face tokenizer, which this machine cannot
fetch, so the units are the family's markers whole (special tokens are never split) and every other
character alone: finer than any tokenizer's pieces. `one` (all at once), `special` (each marker alone,
the text between as one delta), `token` (one unit a delta), `rand:1..5:8` (seeded groups of 1-8 units).
"""

from __future__ import annotations

import argparse
import random
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from canitoolcall import checks
from canitoolcall.fixtures import Family, Fixture, load_families, load_fixtures
from canitoolcall.results import Observation, ParsedToolCall, ParseResult, Status

from localchat.api.reader import reader_for
from localchat.api.tool_formats import detect_format
from localchat.api.tool_parser import ArgsDelta, CallStart
from localchat.runtime.templates.thinking import Thought, thinking_style

TEMPLATES = Path(__file__).resolve().parents[1] / "tests" / "data" / "templates"
# Each corpus family and the real template of one of its reference models (or the nearest one vendored).
FAMILY_TEMPLATES = {
    "qwen3-hermes": "Qwen-Qwen3-0.6B.jinja",
    "qwen3-xml": "Qwen3.5-4B.jinja",
    "glm": "GLM-4.6.jinja",
    "kimi": "Kimi-K2-Thinking.jinja",
    "deepseek": "deepseek-ai-DeepSeek-V3.1.jinja",
    "gpt-oss": "openai-gpt-oss-120b.jinja",
    "mistral": "mistralai-Ministral-3-14B-Reasoning-2512.jinja",
    "llama": "meta-llama-Llama-3.3-70B-Instruct.jinja",
    "gemma4": "google-gemma-4-31B-it.jinja",
}
# A reference model whose own template is vendored (or is nearer than its family's).
MODEL_TEMPLATES = {
    "Qwen/Qwen3-Coder-30B-A3B-Instruct": "Qwen3-Coder.jinja",
    "Qwen/Qwen3-Coder-Next": "Qwen3-Coder.jinja",
    "deepseek-ai/DeepSeek-V3.2": "deepseek-ai-DeepSeek-V3.2.jinja",
    "deepseek-ai/DeepSeek-V4-Flash": "deepseek-ai-DeepSeek-V4.jinja",
    "deepseek-ai/DeepSeek-V4.1-Flash": "deepseek-ai-DeepSeek-V4-Flash-0731.jinja",
    "moonshotai/Kimi-K2-Instruct-0905": "Kimi-K2-Instruct.jinja",
    "moonshotai/Kimi-K3": "Kimi-K3.jinja",
    "meta-llama/Llama-4-Scout-17B-16E-Instruct": "llama-4-pythonic.jinja",
    "zai-org/GLM-4.7": "GLM-4.7-Flash.jinja",
    "mistralai/Mistral-7B-Instruct-v0.3": "mistralai-Mistral-Nemo-Instruct-2407.jinja",
    "mistralai/Mistral-Small-3.2-24B-Instruct-2506": "Mistral-Small-3.2-24B-Instruct-2506.jinja",
    "mistralai/Devstral-Small-2507": "unsloth-mistral-Devstral-Small-2507.jinja",
}
STRATEGIES = ("one", "special", "token", *(f"rand:{seed}:8" for seed in range(1, 6)))


def units(text: str, markers: list[str]) -> list[tuple[str, bool]]:
    """The text as (unit, is_marker): each marker whole, every other character alone."""
    ordered = sorted(markers, key=len, reverse=True)
    out, pos = [], 0
    while pos < len(text):
        marker = next((m for m in ordered if text.startswith(m, pos)), None)
        if marker:
            out.append((marker, True))
            pos += len(marker)
        else:
            out.append((text[pos], False))
            pos += 1
    return out


def chunks(text: str, markers: list[str], strategy: str) -> list[str]:
    pieces = units(text, markers)
    if strategy == "one":
        return [text] if text else []
    if strategy == "token":
        return [u for u, _ in pieces]
    out: list[str] = []
    if strategy == "special":
        for unit, is_marker in pieces:
            if is_marker or not out or out[-1] in markers:
                out.append(unit)
            else:
                out[-1] += unit
        return out
    _, seed, most = strategy.split(":")
    rng, pos = random.Random(int(seed)), 0
    while pos < len(pieces):
        k = rng.randint(1, int(most))
        out.append("".join(u for u, _ in pieces[pos:pos + k]))
        pos += k
    return out


def replay(fixture: Fixture, family: Family, deltas: list[str], whole: bool) -> ParseResult:
    """The parse localchat gives `deltas`: as the whole reply (`whole`) or as a client reads the stream."""
    name = MODEL_TEMPLATES.get(fixture.models[0], FAMILY_TEMPLATES[fixture.family])
    source = (TEMPLATES / name).read_text(encoding="utf-8")
    tools = [t for t in fixture.tools if isinstance(t, dict) and "function" in t]
    names = {t["function"]["name"] for t in tools}
    schemas = {t["function"]["name"]: t["function"].get("parameters") or {} for t in tools}
    prompt = fixture.generation_prompt
    if prompt is None:
        reference = family.reference_for(fixture.models[0]) or family.reference_models[0]
        prompt = reference.default_generation_prompt or ""
    reader = reader_for(thinking_style(source), prompt, detect_format(source), names, schemas)
    pieces: list[Any] = []
    for delta in deltas:
        pieces += reader.feed(delta) if reader else [delta]
    pieces += reader.finish(cut=fixture.truncated) if reader else []
    content = "".join(p for p in pieces if isinstance(p, str)) or None
    reasoning = "".join(p.text for p in pieces if isinstance(p, Thought)) or None
    if whole:
        calls = tuple(ParsedToolCall(c.name, c.arguments) for c in (reader.calls if reader else []))
    else:
        streamed: dict[int, list[str]] = defaultdict(lambda: ["", ""])
        for p in pieces:
            if isinstance(p, CallStart):
                streamed[p.index][0] = p.name
            elif isinstance(p, ArgsDelta):
                streamed[p.index][1] += p.text
        calls = tuple(ParsedToolCall(name, args) for name, args in (streamed[i] for i in sorted(streamed)))
    return ParseResult(content, reasoning, calls)


def judge(fixture: Fixture, family: Family) -> tuple[Status, list[str]]:
    """The case's status by canitoolcall's checks, and the failing checks' details."""
    markers = list(family.markers)
    nonstream = replay(fixture, family, [fixture.raw_output], whole=True)
    streams = {s: replay(fixture, family, chunks(fixture.raw_output, markers, s), whole=False) for s in STRATEGIES}
    rows = checks.run_checks(fixture, family, Observation(nonstream, streams))
    status = checks.case_status(rows)
    return status, [f"{r.check}[{r.strategy}]: {r.detail}" for r in rows if r.status not in (Status.PASS,
                                                                                                   Status.SOFT_PASS)]


def run(only: str | None = None) -> dict[str, Counter]:
    families = load_families()
    table: dict[str, Counter] = defaultdict(Counter)
    for fixture in load_fixtures(families=[only] if only else None):
        status, _ = judge(fixture, families[fixture.family])
        table[fixture.family][status.value] += 1
    return table


def report(table: dict[str, Counter]) -> str:
    lines = ["| family | fixtures | pass | soft pass | fail | pass + soft |", "|---|---:|---:|---:|---:|---:|"]
    total: Counter = Counter()
    for family in sorted(table):
        row = table[family]
        total.update(row)
        n = sum(row.values())
        lines.append(f"| {family} | {n} | {row['pass']} | {row['soft_pass']} | {row['fail'] + row['error']} | "
                     f"{(row['pass'] + row['soft_pass']) / n:.0%} |")
    n = sum(total.values())
    lines.append(f"| **all** | {n} | {total['pass']} | {total['soft_pass']} | {total['fail'] + total['error']} | "
                 f"{(total['pass'] + total['soft_pass']) / n:.0%} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family")
    parser.add_argument("--show-failures", action="store_true")
    parser.add_argument("--output")
    args = parser.parse_args()
    if args.show_failures:
        families = load_families()
        for fixture in load_fixtures(families=[args.family] if args.family else None):
            status, why = judge(fixture, families[fixture.family])
            if status in (Status.FAIL, Status.ERROR):
                print(f"{fixture.id}: {why[0][:300]}")
    text = report(run(args.family))
    print(text)
    if args.output:
        Path(args.output).write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
