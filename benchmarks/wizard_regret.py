"""Wizard regret: the wizard's pick against an exhaustive measured sweep of every file it could pick here.

    python benchmarks/wizard_regret.py [--runs N] [--threads N] [--output FILE.md]

The files are the two ladders of benchmarks/planner_accuracy.py (SmolLM2-135M: Q4_1, Q8_0, F16,
Q4_K_M, Q5_K_M; gemma-3-270m: Q4_K_M, Q8_0, Q4_0, Q5_K_M), offered to the wizard as a catalog of
local files. The wizard runs as `localchat tune --no-download` does (planning, measuring its top
candidates, keeping one by the planner's policy), timed; then every file is measured the same way,
`--runs` times in processes of their own, and the medians compared. Regret: how much decode the pick
gives up against the fastest file of equal or better quality. Goal: at most 10%.
The wizard's profile goes to a home of its own: the person's tuned profile is left alone.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import os
import statistics
import tempfile
import time
from pathlib import Path

import yaml

from localchat import paths
from localchat.bench_report import isolated, machine_facts
from localchat.hardware.probe import probe
from localchat.models.catalog import ModelFacts, facts_from_gguf
from localchat.models.gguf_info import read_gguf
from localchat.planning.cost import DECODE_FILL
from localchat.planning.planner import Wants, quality
from localchat.planning.policy import Speeds, Standing, choose
from localchat.tune.measure import measure
from localchat.tune.wizard import run_wizard
from localchat.workloads import planner_ladders

REGRET_GOAL = 0.10


def _entry(facts: ModelFacts, files: dict[str, Path]) -> dict:
    """A catalog entry (models.yaml's schema) for local files of one model: no sources, so nothing is fetched."""
    return {"name": facts.name, "family": facts.family, "license": facts.license, "draft": None,
            "default_quant": next(iter(files)),
            "architecture": {"arch": facts.arch, "n_layer": facts.n_layer, "n_head": facts.n_head,
                             "n_head_kv": facts.n_head_kv, "head_dim": facts.head_dim, "n_embd": facts.n_embd,
                             "n_vocab": facts.n_vocab, "n_ctx_train": facts.n_ctx_train, "params_b": facts.params_b,
                             "tied_embeddings": facts.tied_embeddings, "sliding_window": facts.sliding_window,
                             "swa_pattern": facts.swa_pattern},
            "files": {q: {"file": p.name, "size": p.stat().st_size, "sources": []} for q, p in files.items()}}


def _measured_decode(path: str, n_ctx: int, n_threads: int) -> float:
    return measure(path, n_ctx=n_ctx, n_threads=n_threads, fill=DECODE_FILL).decode_tps


def run(runs: int = 3, threads: int | None = None) -> str:
    hardware = probe()
    threads = threads or hardware.physical_cores
    if threads != hardware.physical_cores:
        hardware = dataclasses.replace(hardware, physical_cores=threads, logical_cores=threads)
    ladders = planner_ladders()
    facts = {key: facts_from_gguf(read_gguf(files[next(iter(files))]), key,
                                  files[next(iter(files))].stat().st_size, family=family)
             for key, (family, files) in ladders.items()}
    models_dir = paths.models_dir()
    with tempfile.TemporaryDirectory(prefix="localchat-regret-") as home:
        catalog = Path(home) / "catalog.yaml"
        catalog.write_text(yaml.safe_dump({"models": {key: _entry(facts[key], files)
                                                      for key, (_, files) in ladders.items()}}), encoding="utf-8")
        (Path(home) / "cache").mkdir()
        (Path(home) / "cache" / "models").symlink_to(models_dir, target_is_directory=True)
        before = os.environ.get("LOCALCHAT_HOME")
        os.environ["LOCALCHAT_HOME"] = home
        log = io.StringIO()
        started = time.perf_counter()
        try:
            profile = run_wizard(probe_fn=lambda: hardware, catalog=catalog, download=False, out=log)
        finally:
            if before is None:
                os.environ.pop("LOCALCHAT_HOME")
            else:
                os.environ["LOCALCHAT_HOME"] = before
        wizard_s = time.perf_counter() - started
    considered = {(c["model"], c["quant"]): c["status"] for c in profile.candidates}

    # Every file at the context the wizard measured its candidates at, as the wizard measures.
    sweep = []  # (key, quant, quality, median decode, runs)
    for key, (_, files) in ladders.items():
        for quant, path in files.items():
            speeds = [isolated(_measured_decode, str(path), profile.n_ctx, threads) for _ in range(runs)]
            sweep.append((key, quant, quality(facts[key], quant), statistics.median(speeds), speeds))
    pick = next(s for s in sweep if (s[0], s[1]) == (profile.model, profile.quant))
    rivals = [s for s in sweep if s[2] >= pick[2]]
    best = max(rivals, key=lambda s: s[3])
    regret = 1 - pick[3] / best[3]
    oracle = sweep[choose([Standing(f"{s[0]} {s[1]}", s[2], s[3], s[3], "cpu") for s in sweep], Speeds()).chosen]

    rows = ["| file | quality | decode tok/s, median (runs) | the wizard |", "|---|---|---|---|"]
    for key, quant, score, median, speeds in sorted(sweep, key=lambda s: (-s[2], -s[3])):
        role = considered.get((key, quant), "not considered")
        mark = " **picked**" if (key, quant) == (profile.model, profile.quant) else ""
        rows.append(f"| {key} {quant} | {score:.2f} | {median:.1f} ({', '.join(f'{x:.1f}' for x in speeds)}) "
                    f"| {role}{mark} |")
    verdict = "ok" if regret <= REGRET_GOAL else "MISS"
    head = (f"Wizard regret, n_ctx {profile.n_ctx}, {threads} threads, decode at {DECODE_FILL} tokens of KV fill, "
            f"the median of {runs} runs per file.\nMachine: {machine_facts()}.\n\n"
            f"The wizard (`localchat tune --no-download` over these files) took {wizard_s:.0f} s and kept "
            f"{pick[0]} {pick[1]} ({pick[3]:.1f} tok/s in the sweep). The fastest file of equal or better quality: "
            f"{best[0]} {best[1]} ({best[3]:.1f} tok/s). Regret {regret:.1%} (goal at most {REGRET_GOAL:.0%}): "
            f"{verdict}. The policy over the whole sweep would keep {oracle[0]} {oracle[1]} ({oracle[3]:.1f} tok/s): "
            f"the pick gives up {1 - pick[3] / oracle[3]:.1%} against it.\n")
    return head + "\n" + "\n".join(rows) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="measurements per file, the median compared (default 3)")
    parser.add_argument("--threads", type=int, help="threads to measure and plan with (default: physical cores)")
    parser.add_argument("--output", type=Path, help="also write the Markdown here")
    args = parser.parse_args()
    report = run(args.runs, args.threads)
    print(report)
    if args.output:
        args.output.write_text(report, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
