"""Speculative decoding benchmark: plain vs prompt lookup vs draft models, side by side, medians.

    python benchmarks/speculative.py [--quick] [--section costs|workloads|exactness|api|drafts ...] [--file TEXT ...]
                                     [--output FILE.md]

With LLAMA_CPP_BIN pointing at a folder holding llama.cpp's own `llama-speculative` (built
from the same sources, flags and threads), its numbers are reported beside ours.

Each measurement runs in its own process (see localchat.bench.isolated). Greedy outputs are
identical across modes, so tokens/s compare the same tokens.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from localchat.bench_report import Report, isolated
from localchat.runtime.engine import Engine, EngineConfig, Request
from localchat.runtime.sampling import SamplingParams
from localchat.runtime.speculation.acceptance import expected_tokens
from localchat.runtime.speculation.speculative import SpecConfig
from localchat.runtime.step_costs import StepCosts
from localchat.runtime.workers.worker import BatchRow, Worker, WorkerConfig, default_threads

REPORT = """In the spring of 1891 the river authority published its rules for the lower harbour.
Rule one: every vessel longer than twelve metres must report to the harbour office before mooring.
Rule two: the northern pier closes at dusk on Fridays, and boats must anchor east of the red buoy.
Rule three: fuel may only be taken on at the western quay, between six in the morning and noon.
Rule four: fishing nets may not be dried on the public walkway, on pain of a fine of two shillings."""
QUOTING = [f"{REPORT}\n\nCopy rule {n} exactly, word for word." for n in ("two", "three", "four")]


_THINGS = ["lanterns", "ropes", "barrels", "sails", "nets", "anchors", "oars", "crates"]
_PLACES = ["north pier", "old bridge", "fish market", "harbour office", "red buoy", "western quay"]
SECTIONS_TEXT = "\n".join(
    f"Section {i}: at {6 + i % 12} o'clock the keeper counted {3 + 7 * i % 40} {_THINGS[i % 8]} by the "
    f"{_PLACES[i % 6]} and wrote it in the blue ledger." for i in range(1, 31))
CODE = '''def summarize(orders, tax_rate):
    """Total, average and largest order, after tax."""
    totals = []
    for order in orders:
        subtotal = sum(item.price * item.quantity for item in order.items)
        totals.append(subtotal * (1 + tax_rate))
    if not totals:
        return {"total": 0.0, "average": 0.0, "largest": 0.0}
    return {"total": sum(totals), "average": sum(totals) / len(totals), "largest": max(totals)}'''
# The workloads the default must not lose on: nothing to copy, copying, editing code, a document question.
WORKLOADS = {
    "plain chat": "Write a short story about a lighthouse keeper.",
    "quoting": f"{SECTIONS_TEXT}\n\nCopy sections 10 to 14 word for word.",
    "code": f"{CODE}\n\nRename `totals` to `amounts` in this function and print the whole function.",
    "document question": f"{REPORT}\n\n{SECTIONS_TEXT}\n\nWhat did the keeper count in section 12, and where?",
}


def _run(model: Path, prompts: list[str], draft: str | None, lookup: bool, fixed_k: int, n: int,
         deterministic: bool = False) -> dict:
    worker = WorkerConfig(n_ctx=4096, n_threads=default_threads(), deterministic=deterministic)
    config = EngineConfig(worker=worker, draft_path=Path(draft) if draft else None, lookup=lookup,
                          spec=SpecConfig(fixed_k=fixed_k))
    rates, drafted, accepted, passes, ks, predicted, tokens = [], 0, 0, 0, [], [], []
    with Engine.load(model, config) as engine:
        for prompt in prompts:
            result = engine.submit(Request(messages=[{"role": "user", "content": prompt}],
                                           sampling=SamplingParams(temperature=0.0, max_tokens=n))).result()
            rates.append(result.stats.tokens_per_s)
            tokens.append(result.token_ids)
            spec = result.stats.spec
            if spec is not None:
                drafted, accepted, passes = drafted + spec.drafted, accepted + spec.accepted, passes + spec.target_passes
                ks.append(spec.mean_k)
                predicted.append(spec.predicted_speedup)
        costs = engine.speculator.costs.table() if engine.speculator else {}
        draft_cost = engine.speculator.drafter.seconds_per_token() if engine.speculator else 0.0
        fixed = engine.speculator.fixed_overhead if engine.speculator else 0.0
    return {"tps": statistics.median(rates), "drafted": drafted, "accepted": accepted, "passes": passes,
            "mean_k": statistics.mean(ks) if ks else 0.0, "tokens": tokens, "costs": costs,
            "draft_cost": draft_cost, "fixed": fixed,
            "predicted": statistics.median(p for p in predicted if p is not None) if any(predicted) else 0.0}


def _verify_costs(model: str, context: int, repeats: int) -> dict:
    """What a verify step costs on this CPU: target steps of k+1 tokens at `context` tokens of KV, with
    the last row's logits only (as a prompt chunk) and with every row's (verifying k drafts), medians of
    `repeats`; then sampling one position and rolling the drafts' KV back."""
    worker = Worker(model, WorkerConfig(n_ctx=4096, n_threads=default_threads()))
    try:
        tokens = worker.tokenize(REPORT * 40)[:context]
        for start in range(0, len(tokens), 256):
            worker.decode([BatchRow(0, tokens[start:start + 256], start, False)])
        pos, top = len(tokens), 9
        sampler = worker.new_sampler(SamplingParams(temperature=0.0))
        steps: dict[str, dict[int, float]] = {"last": {}, "all": {}}
        sample_s, remove_s = [], []
        for _ in range(repeats):
            for width in range(1, top + 1):
                for kind in ("last", "all"):
                    t0 = time.perf_counter()
                    worker.decode([BatchRow(0, tokens[:width], pos, True, all_logits=kind == "all")])
                    steps[kind].setdefault(width, []).append(time.perf_counter() - t0)
                    if kind == "all" and width == top:
                        t0 = time.perf_counter()
                        for i in range(top):
                            worker.sample(sampler, i)
                        sample_s.append((time.perf_counter() - t0) / top)
                    t0 = time.perf_counter()
                    worker.seq_remove(0, pos, -1)
                    remove_s.append(time.perf_counter() - t0)
        sampler.close()
        return {"last": {w: statistics.median(v) for w, v in steps["last"].items()},
                "all": {w: statistics.median(v) for w, v in steps["all"].items()},
                "sample": statistics.median(sample_s), "remove": statistics.median(remove_s),
                "n_vocab": worker.n_vocab}
    finally:
        worker.close()


def measure(model: Path, prompts: list[str], repeats: int, n: int, draft: Path | None = None,
            lookup: bool = False, fixed_k: int = 0) -> dict:
    return _median_rate([isolated(_run, model, prompts, str(draft) if draft else None, lookup, fixed_k, n)
                         for _ in range(repeats)])


def _median_rate(runs: list[dict]) -> dict:
    """The first run's numbers with the median rate and the median predicted gain of all of them (the
    prediction beside the rate it is compared with; of the runs that drafted, the others promised nothing)."""
    return dict(runs[0], tps=statistics.median(r["tps"] for r in runs),
                predicted=statistics.median([r["predicted"] for r in runs if r["drafted"]] or [0.0]))


def paired(model: Path, prompts: list[str], repeats: int, n: int) -> tuple[dict, dict]:
    """--no-spec and the default (prompt lookup) measured alternately, so a noisy machine's drift falls
    on both alike: (plain, default), each with the median rate of `repeats` runs (a run's rate: the
    median of its answers)."""
    runs: dict[bool, list[dict]] = {False: [], True: []}
    for _ in range(repeats):
        for lookup in (False, True):
            runs[lookup].append(isolated(_run, model, prompts, None, lookup, 0, n))
    return _median_rate(runs[False]), _median_rate(runs[True])


ANSWERS = 3  # answers to one workload per run: a 160-token answer of the 135M model lasts ~1.5 s


def _acceptance(m: dict) -> str:
    return f"{m['accepted'] / m['drafted']:.0%}" if m["drafted"] else "-"


def _costs(report: Report, files: dict[str, Path], repeats: int, context: int = 600) -> None:
    """Item one of the cost question: a verify step of k+1 tokens against a single-token step, per file."""
    emit = report.emit
    emit(f"### What a verify step costs: a target step of k+1 tokens at {context} tokens of KV, against one "
         f"token (medians of {repeats}, {default_threads()} threads)")
    emit("")
    emit("| file | 1 token, ms | " + " | ".join(f"k={k}" for k in range(1, 9))
         + " | the same with the last row's logits only, k=4 / k=8 | sampling a position | KV rollback |")
    emit("|---|---|" + "---|" * 8 + "---|---|---|")
    for label, path in files.items():
        c = isolated(_verify_costs, str(path), context, repeats)
        one = c["all"][1]
        ratios = " | ".join(f"{c['all'][k + 1] / one:.2f}x" for k in range(1, 9))
        emit(f"| {label} | {one * 1000:.1f} | {ratios} | {c['last'][5] / one:.2f}x / {c['last'][9] / one:.2f}x "
             f"| {c['sample'] * 1000:.2f} ms ({c['n_vocab']:,} tokens) | {c['remove'] * 1000:.2f} ms |")
    emit("")


def _workloads(report: Report, files: dict[str, Path], repeats: int, n: int) -> None:
    """The default (prompt lookup where it pays) against --no-spec, per file and workload."""
    emit = report.emit
    emit(f"### The default against --no-spec (medians of {repeats} runs in processes of their own, alternating, "
         f"each run the median of {ANSWERS} answers; greedy, {n} tokens max; drafted / accepted per answer)")
    emit("")
    emit("| file | workload | --no-spec tok/s | default tok/s | ratio | drafted / accepted | predicted gain "
         "| identical output |")
    emit("|---|---|---|---|---|---|---|---|")
    for label, path in files.items():
        for name, prompt in WORKLOADS.items():
            plain, default = paired(path, [prompt] * ANSWERS, repeats, n)
            predicted = f"{default['predicted']:.2f}x" if default["drafted"] else "-"
            emit(f"| {label} | {name} | {plain['tps']:.1f} | {default['tps']:.1f} | "
                 f"**{default['tps'] / plain['tps']:.2f}x** | {default['drafted'] / ANSWERS:.0f} / "
                 f"{default['accepted'] / ANSWERS:.0f} | {predicted} | {default['tokens'] == plain['tokens']} |")
    emit("")


def _exactness(report: Report, files: dict[str, Path], n: int) -> None:
    """Greedy tokens with prompt lookup and without, in --deterministic mode, per file and workload."""
    emit = report.emit
    emit(f"### Greedy output with and without speculation in --deterministic mode ({n} tokens max)")
    emit("")
    emit("| file | " + " | ".join(WORKLOADS) + " |")
    emit("|---|" + "---|" * len(WORKLOADS))
    for label, path in files.items():
        cells = []
        for prompt in WORKLOADS.values():
            plain, default = (isolated(_run, path, [prompt], None, lookup, 0, n, True) for lookup in (False, True))
            same = plain["tokens"] == default["tokens"]
            cells.append(f"identical ({default['drafted']} drafted)" if same else "**differs**")
        emit(f"| {label} | {' | '.join(cells)} |")
    emit("")


def _api_rate(client, prompt: str, n: int, streaming: threading.Event | None = None) -> tuple[float, str]:
    """Decode tokens/s of one streamed answer as the client sees it, and its text."""
    from api import stream_timing  # this script's own folder
    from serve_peer import MODEL

    _, rate, text = stream_timing(client, [{"role": "user", "content": prompt}], n, MODEL[0], streaming)
    return rate, text


def _api(report: Report, files: dict[str, tuple[Path, tuple[str, ...]]], repeats: int, n: int) -> None:
    """The default against --no-spec through `localchat serve` (its runner process, the official client),
    alone and beside two other streaming chats (one batched step carries all three); `files`: label -> (file,
    the workloads asked of it)."""
    from serve_peer import Server  # this script's own folder

    emit = report.emit
    emit(f"### The same through the API: `localchat serve` with and without `--no-spec`, streamed (medians of "
         f"{repeats}, servers started alternately; beside: two other chats streaming in the same steps)")
    emit("")
    emit("| file | workload | alone: --no-spec / default tok/s | ratio | beside two streams: --no-spec / "
         "default tok/s | ratio | identical output |")
    emit("|---|---|---|---|---|---|---|")
    home = tempfile.mkdtemp(prefix="localchat-spec-")
    for label, (path, workloads) in files.items():
        rates: dict[tuple[bool, str, bool], list[float]] = {}
        texts: dict[bool, dict[str, str]] = {False: {}, True: {}}
        for _ in range(repeats):
            for spec in (False, True):
                server = Server("localchat serve", [sys.executable, "-m", "localchat", "serve", "--model", str(path),
                                                    "--port", "{port}", "--n-ctx", "8192",
                                                    "--threads", str(default_threads())] + ([] if spec else ["--no-spec"]),
                                env={"LOCALCHAT_HOME": home})
                client = server.start()
                try:
                    for name in workloads:
                        rate, texts[spec][name] = _api_rate(client, WORKLOADS[name], n)
                        rates.setdefault((spec, name, False), []).append(rate)
                        streaming = [threading.Event(), threading.Event()]
                        others = [threading.Thread(target=_api_rate, args=(client, WORKLOADS["plain chat"], 4 * n, e))
                                  for e in streaming]
                        for other in others:
                            other.start()
                        for event in streaming:
                            event.wait()
                        rates.setdefault((spec, name, True), []).append(_api_rate(client, WORKLOADS[name], n)[0])
                        for other in others:
                            other.join()
                finally:
                    server.stop()
        for name in workloads:
            cells = []
            for beside in (False, True):
                plain, default = (statistics.median(rates[(spec, name, beside)]) for spec in (False, True))
                cells.append(f"{plain:.1f} / {default:.1f} | **{default / plain:.2f}x**")
            emit(f"| {label} | {name} | {' | '.join(cells)} | {texts[False][name] == texts[True][name]} |")
    emit("")


def main() -> int:
    from localchat.models.derive import requantize
    from localchat.models.resolve import resolve_model
    from localchat.workloads import gemma_270m, synthetic_1b

    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--section", action="append", choices=("costs", "workloads", "exactness", "api", "drafts"),
                        help="run only these sections (default: all)")
    parser.add_argument("--file", action="append", help="only the files whose label holds this text (not the drafts section)")
    parser.add_argument("--output")
    args = parser.parse_args()
    sections = args.section or ["costs", "workloads", "exactness", "api", "drafts"]
    repeats, n = (2, 64) if args.quick else (3, 96)
    q4 = resolve_model("smollm2-135m")
    report = Report()
    # gemma in F32: real weights that read 1.08 GB per token, as a 1B-class Q8_0 file does, so a step
    # waits on memory more than on arithmetic: the bandwidth-bound case where drafts come cheapest.
    makers = {"SmolLM2-135M Q4_1": lambda: q4, "gemma-3-270m Q4_K_M": gemma_270m,
              "gemma-3-270m F32 (1.08 GB a token)": lambda: requantize(gemma_270m(), "F32"),
              "Llama 1B-class Q4_K_M (random weights)": lambda: synthetic_1b(q4)}
    files = {label: make() for label, make in makers.items()
             if not args.file or any(f.lower() in label.lower() for f in args.file)}
    if "costs" in sections:
        _costs(report, files, 5 if args.quick else 15)
    if "workloads" in sections:
        _workloads(report, files, repeats, 160)
    if "exactness" in sections:
        _exactness(report, files, 160)
    if "api" in sections:  # not the 1B-class file, and F32 on its copying workloads: beside two other
        # streams (each 4x the answer's length) those would take long
        copying = ("quoting", "code")
        every = copying if args.quick else tuple(WORKLOADS)
        _api(report, {label: (path, copying if "F32" in label else every)
                      for label, path in files.items() if "1B" not in label}, repeats, 160)
    if "drafts" in sections:
        _drafts(report, q4, repeats, n, args.quick)
    report.save(args.output)
    return 0


def _drafts(report: Report, q4: Path, repeats: int, n: int, quick: bool) -> None:
    """Prompt lookup on quoting answers, draft models on an F16 target, and the cost model's predictions."""
    from localchat.models.derive import random_weights_like, requantize

    f16 = requantize(q4, "F16")
    hostile = random_weights_like(q4)
    emit = report.emit

    emit(f"### Prompt lookup on answers that quote the prompt (medians of {repeats}, greedy, {n} tokens max)")
    emit("")
    emit("| target | plain tok/s | lookup tok/s | speedup | acceptance | mean k | identical output |")
    emit("|---|---|---|---|---|---|---|")
    for name, target in (("Q4_1", q4), ("F16", f16)):
        plain = measure(target, QUOTING, repeats, n)
        lookup = measure(target, QUOTING, repeats, n, lookup=True)
        emit(f"| {name} | {plain['tps']:.1f} | {lookup['tps']:.1f} | **{lookup['tps'] / plain['tps']:.2f}x** | "
             f"{_acceptance(lookup)} | {lookup['mean_k']:.1f} | {lookup['tokens'] == plain['tokens']} |")
    emit("")
    chat = ["Write a short story about a lighthouse keeper.", "Explain how rain forms."]
    emit(f"### Draft models on an F16 target, free-form answers (medians of {repeats})")
    emit("")
    emit("| draft | mode | tok/s | vs plain | acceptance | tokens per target pass | identical output |")
    emit("|---|---|---|---|---|---|---|")
    plain = measure(f16, chat, repeats, n)
    emit(f"| none | plain | {plain['tps']:.1f} | 1.00x | - | 1.00 | - |")
    forced_by_k = {}
    for label, draft in (("Q4_1 sibling", q4), ("random weights (hostile)", hostile)):
        adaptive = measure(f16, chat, repeats, n, draft=draft)
        forced = measure(f16, chat, repeats, n, draft=draft, fixed_k=4)
        for mode, m in (("adaptive", adaptive), ("forced k=4", forced)):
            per_pass = (m["accepted"] + m["passes"]) / m["passes"] if m["passes"] else 1.0
            emit(f"| {label} | {mode} | {m['tps']:.1f} | {m['tps'] / plain['tps']:.2f}x | {_acceptance(m)} | "
                 f"{per_pass:.2f} | {m['tokens'] == plain['tokens']} |")
        if draft == q4:
            forced_by_k = {k: measure(f16, chat, 1 if quick else 2, n, draft=draft, fixed_k=k) for k in (1, 2, 3, 4, 6)}
    emit("")
    emit("### Cost model: predicted vs measured speedup by draft length (F16 target, Q4_1 draft)")
    emit("")
    reference = forced_by_k[4]
    r = reference["accepted"] / reference["drafted"] if reference["drafted"] else 0.0
    costs, draft_cost, fixed = reference["costs"], reference["draft_cost"], reference["fixed"]

    step_costs = StepCosts()  # the engine's own interpolation over the measured widths
    for width, seconds in costs.items():
        step_costs.record(width, seconds)
    cost = step_costs.cost

    emit(f"Measured: acceptance {r:.0%}, target step {', '.join(f'w{w}={s * 1000:.1f} ms' for w, s in costs.items())}, "
         f"draft {draft_cost * 1000:.1f} ms per token, {fixed * 1000:.1f} ms per drafting step besides.")
    emit("")
    emit("| k | predicted speedup | measured speedup |")
    emit("|---|---|---|")
    for k, m in forced_by_k.items():
        predicted = expected_tokens(r, k) * cost(1) / (cost(1 + k) + fixed + k * draft_cost)
        emit(f"| {k} | {predicted:.2f}x | {m['tps'] / plain['tps']:.2f}x |")
    native = os.environ.get("LLAMA_CPP_BIN")
    if native:
        emit("")
        emit("### Ours vs llama.cpp's own `llama-speculative` (F16 target, Q4_1 draft, k=4, raw prompt, 96 tokens)")
        emit("")
        emit("| runner | tok/s | acceptance |")
        emit("|---|---|---|")
        theirs = [_llama_speculative(Path(native), f16, q4) for _ in range(repeats)]
        emit(f"| llama-speculative | {statistics.median(t[0] for t in theirs):.1f} | {theirs[0][1]:.0%} |")
        ours = [isolated(_raw_forced, f16, q4) for _ in range(repeats)]
        emit(f"| localchat (forced k=4) | {statistics.median(o[0] for o in ours):.1f} | {ours[0][1]:.0%} |")


RAW_PROMPT = "Once upon a time, a lighthouse keeper"


def _llama_speculative(bin_dir: Path, target: Path, draft: Path) -> tuple[float, float]:
    """Decode speed and acceptance that llama.cpp's own speculative example reports."""
    out = subprocess.run([str(bin_dir / "llama-speculative"), "-m", str(target), "-md", str(draft),
                          "-p", RAW_PROMPT, "-n", "96", "--ignore-eos", "--spec-type", "draft-simple",
                          "--spec-draft-n-max", "4", "-t", str(default_threads()), "--temp", "0", "-fa", "on"],
                         capture_output=True, text=True, timeout=600).stderr
    speed = float(re.search(r"decoded\s+\d+ tokens in .*speed:\s+([\d.]+)", out).group(1))
    accept = float(re.search(r"accept\s+=\s+([\d.]+)%", out).group(1)) / 100
    return speed, accept


def _raw_forced(target: Path, draft: Path) -> tuple[float, float]:
    worker = WorkerConfig(n_ctx=4096, n_threads=default_threads())
    with Engine.load(target, EngineConfig(worker=worker, draft_path=draft, spec=SpecConfig(fixed_k=4))) as engine:
        result = engine.submit(Request(prompt=RAW_PROMPT, sampling=SamplingParams(
            temperature=0.0, max_tokens=96, ignore_eos=True))).result()
    spec = result.stats.spec
    return result.stats.tokens_per_s, spec.acceptance


if __name__ == "__main__":
    sys.exit(main())
