"""The kept model's GPTQ checkpoint against its GGUF file on this machine: both run the same prompt through
the same engine, side by side, and the faster one is kept at equal or better quality.

On a CPU the GGUF file wins by far (llama.cpp's kernels against torch's; docs/benchmarks.md, GPTQ): a
checkpoint that is here is still measured, under a time limit, so the profile says so with numbers.
"""

from __future__ import annotations

import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TextIO

from .. import gptq
from ..errors import LocalchatError
from ..hardware import HardwareInfo
from ..models.catalog import ModelFacts
from ..models.split_files import model_bytes
from ..planning.cost import DEFAULT_EFFICIENCY, devices_of
from ..planning.gptq_options import TORCH_GPTQ_EFFICIENCY, unavailable
from ..planning.planner import Wants, quality
from ..planning.policy import QUALITY_TIE
from ..units import size_text
from ..workloads import document, greedy
from .calibrate import EFFICIENCY_RANGE, predict
from .candidates import Ask, agreed

RACE_TOKENS = (128, 16)   # prompt and answer tokens of the side-by-side run
TIME_LIMIT = 120.0        # seconds a run may take; a run stopped there has lost by far


@dataclass(slots=True)
class FormatRun:
    """One file of the kept model in the side-by-side run."""

    format: str
    quant: str
    path: str
    quality: float
    decode_tps: float = 0.0
    prefill_tps: float = 0.0
    weights: int = 0                # bytes of the weights on disk
    predicted_decode_tps: float = 0.0   # the planner's, where it offers the file here (0: not offered)
    status: str = "measured"

    def to_dict(self) -> dict:
        return asdict(self)


def _weights(path: Path) -> int:
    return sum(p.stat().st_size for p in path.glob("*.safetensors")) if path.is_dir() else model_bytes(path)


def run_once(path: Path, n_ctx: int, n_threads: int, n_gpu_layers: int, tokens: tuple[int, int],
             limit: float = TIME_LIMIT) -> tuple[float, float, str]:
    """(prefill tok/s, decode tok/s, status) of one prompt of about tokens[0] tokens answered with
    tokens[1], greedy, on a fresh engine; a run still going after `limit` seconds is stopped."""
    from ..runtime.engine import Engine, EngineConfig, Request
    from ..runtime.workers.worker import WorkerConfig

    config = EngineConfig(worker=WorkerConfig(n_ctx=n_ctx, n_batch=512, n_seq_max=1, n_threads=n_threads,
                                              n_gpu_layers=n_gpu_layers))
    with Engine.load(path, config) as engine:
        text = document(23 * max(1, tokens[0] // 20))
        words = text.split(" ")
        # Cut by words to about tokens[0] tokens of this model's tokenizer (files of one model share it).
        prompt = " ".join(words[:max(1, int(len(words) * tokens[0] / max(1, len(engine.worker.tokenize(text)))))])
        stream = engine.submit(Request(prompt=prompt, sampling=greedy(tokens[1]), speculate=False))
        timer = threading.Timer(limit, stream.cancel)
        timer.daemon = True
        timer.start()
        try:
            result = stream.result()
        finally:
            timer.cancel()
    stats = result.stats
    stopped = result.finish_reason == "cancelled"
    status = f"stopped after {limit:.0f} s (far slower)" if stopped else "measured"
    return round(stats.prefill_tokens_per_s, 1), round(stats.tokens_per_s, 1), status


def _checkpoints(model: ModelFacts, entries: dict[str, ModelFacts], bar: float) -> list[tuple[str, Path]]:
    """The model's GPTQ checkpoints that are here and score at least `bar`, best first."""
    from ..models.download import cached_file

    found = []
    for quant, f in entries[model.key].formats("gptq").items():
        local = cached_file(f)
        if local is not None and quality(model, quant) >= bar:
            found.append((quant, local))
    return sorted(found, key=lambda qp: -quality(model, qp[0]))


def _fetch_offered(model: ModelFacts, entries: dict[str, ModelFacts], hardware: HardwareInfo,
                   facts: dict[str, ModelFacts], wants: Wants, n_ctx: int, bar: float,
                   out: TextIO, ask: Ask | None) -> list[tuple[str, Path]]:
    """The smallest checkpoint of the model the planner fits here at quality `bar` or better, fetched;
    [] when none fits or the download fails (noted, never raised)."""
    from ..models.download import fetch_model_file

    fitting = [(f.size, quant) for quant, f in entries[model.key].formats("gptq").items()
               if quality(model, quant) >= bar and predict(hardware, facts, model.key, quant, n_ctx, wants.efficiency)]
    if not fitting:
        return []
    quant = min(fitting)[1]
    model_file = entries[model.key].files[quant]
    if not agreed(ask, f"{model.key}:{quant}", model_file.size):
        print(f"  {model.key}:{quant}: not downloaded (declined)", file=out)
        return []
    print(f"fetching {model.key}:{quant} ({size_text(model_file.size)}) to measure it ...", file=out, flush=True)
    try:
        return [(quant, fetch_model_file(model_file))]
    except LocalchatError as exc:
        print(f"  {model.key}:{quant}: cannot download: {exc}", file=out)
        return []


def race(hardware: HardwareInfo, facts: dict[str, ModelFacts], entries: dict[str, ModelFacts], key: str,
         gguf_quant: str, gguf_path: Path, n_ctx: int, n_threads: int, n_gpu_layers: int, wants: Wants,
         out: TextIO, tokens: tuple[int, int] = RACE_TOKENS,
         download: bool = False, ask: Ask | None = None) -> tuple[list[FormatRun], str, dict[str, float]]:
    """Measure the kept GGUF file and the model's best GPTQ checkpoint side by side (one that is here, or
    with `download`, one the planner offers on this machine, fetched): (both runs, why the winner won or
    why nothing was raced, a `torch_gptq` correction for the planner or {})."""
    model = facts[key]
    gguf_quality = quality(model, gguf_quant)
    if not model.formats("gptq"):
        return [], f"{key} has no GPTQ checkpoint in the catalog", {}
    if not gptq.extra_installed():
        return [], f"{key}'s GPTQ checkpoints: {gptq.NEEDS_EXTRA}: {gptq.INSTALL_HINT}", {}
    here = _checkpoints(model, entries, gguf_quality - QUALITY_TIE)
    devices, _ = devices_of(hardware, {**DEFAULT_EFFICIENCY, **wants.efficiency})
    offered = unavailable(devices, True)
    if not here and offered is None and download:
        here = _fetch_offered(model, entries, hardware, facts, wants, n_ctx, gguf_quality - QUALITY_TIE, out,
                              ask)
    if not here:
        return [], (f"no GPTQ checkpoint of {key} at equal or better quality is here (`localchat pull "
                    f"{key}:{next(iter(model.formats('gptq')))}` fetches one)"
                    + (f"; on this machine they are {offered}" if offered else "")), {}
    quant, folder = here[0]
    runs = [FormatRun("gguf", gguf_quant, str(gguf_path), round(gguf_quality, 3)),
            FormatRun("gptq", quant, str(folder), round(quality(model, quant), 3))]
    for run in runs:
        path = Path(run.path)
        print(f"measuring {key} {run.quant} ({run.format}) side by side ...", file=out, flush=True)
        started = time.perf_counter()
        try:
            run.prefill_tps, run.decode_tps, run.status = run_once(path, n_ctx, n_threads, n_gpu_layers, tokens)
        except LocalchatError as exc:
            run.status = f"failed to load: {exc}"
        run.weights = _weights(path)
        predicted = predict(hardware, facts, key, run.quant, n_ctx, wants.efficiency, None, wants.decode_fill)
        run.predicted_decode_tps = round(predicted.decode_tps, 1) if predicted else 0.0
        print(f"  {run.quant}: decode {run.decode_tps} tok/s, prefill {run.prefill_tps} tok/s, "
              f"{time.perf_counter() - started:.0f} s ({run.status})", file=out)
    gguf_run, gptq_run = runs
    ratio = gptq_run.decode_tps / gguf_run.decode_tps if gguf_run.decode_tps else 0.0
    side = f"{gptq_run.decode_tps:g} vs {gguf_run.decode_tps:g} tok/s decode, the same prompt side by side"
    if gptq_run.status == "measured" and gptq_run.decode_tps > gguf_run.decode_tps:
        gptq_run.status = "kept"
        why = (f"GPTQ {quant} on torch kept: faster ({side}) at equal or better quality"
               + (f"; measured here, though the planner does not offer GPTQ on this machine: {offered}"
                  if offered else ""))
    else:
        gguf_run.status = "kept"
        why = (f"GGUF {gguf_quant} on llama.cpp kept: GPTQ {quant} on torch runs at {ratio:.2f}x its speed ({side})"
               + (f"; the planner does not offer GPTQ here: {offered}" if offered else ""))
    correction = {}
    if not offered and gptq_run.predicted_decode_tps > 0 and gptq_run.decode_tps > 0:
        # Measured on a GPU the planner offers GPTQ on: its torch-kernel share, from this run.
        correction["torch_gptq"] = torch_share(wants.efficiency, gptq_run.decode_tps, gptq_run.predicted_decode_tps)
    return runs, why, correction


def torch_share(efficiency: dict[str, float], measured_tps: float, predicted_tps: float) -> float:
    """The torch kernels' share of llama.cpp's roofline under which the planner predicts the measured decode
    speed of a checkpoint on a GPU (`predicted_tps` was priced at the share in `efficiency`, else the prior)."""
    rate = efficiency.get("torch_gptq", TORCH_GPTQ_EFFICIENCY)
    low, high = EFFICIENCY_RANGE
    return round(min(high, max(low, rate * measured_tps / predicted_tps)), 4)
