"""Every placement on llama.cpp's Vulkan backend, in one process (the backend and its shaders start once):
run by tests/test_gpu.py with GGML_VK_VISIBLE_DEVICES=0,0, which shows Mesa's software GPU (llvmpipe) to
ggml as two devices. Prints one JSON object: each scenario's greedy tokens, where llama.cpp put the
layers, and what it measured. `python tests/gpu_scenarios.py MODEL DRAFT WORKDIR`."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from localchat.hardware import HardwareInfo
from localchat.planning.fit import ModelSize
from localchat.planning.placements import arrange
from localchat.runtime import engine as engine_module
from localchat.runtime.backends.devices import usable_here
from localchat.runtime.engine import Engine, EngineConfig, Request
from localchat.runtime.kv.kv_disk import KVDiskCache
from localchat.runtime.sampling import SamplingParams, logits_at
from localchat.runtime.speculation.speculative import SpecConfig
from localchat.runtime.worker_types import BatchRow, WorkerConfig
from localchat.runtime.workers.worker import Worker

N_CTX = 512
QUESTION = [{"role": "system", "content": "Answer briefly."},
            {"role": "user", "content": "Name the capital city of France."}]
# A second question, asked twice: the second time its prefix is reused (from the KV cache, or from disk).
COPY = [{"role": "user", "content": "Repeat exactly: the red fox jumps over the lazy dog and the red fox runs."}]
ANSWER = 6  # tokens per answer: llvmpipe decodes about one token a second
# Drafts every step (paying or not: on llvmpipe they do not), so the device verifies drafted tokens; the step
# costs seeded so the engine does not time every draft width first (a minute on llvmpipe).
DRAFTING = {"spec": SpecConfig(fixed_k=3), "step_costs": {1: 1000.0, 4: 1500.0}}
# A saved state is restored when it spares RESTORE_MIN_GAIN prompt tokens (256): a prompt that long takes
# minutes to read on llvmpipe, so the rule is lowered here; the path it takes is the same.
engine_module.RESTORE_MIN_GAIN = 16


def greedy(n: int = ANSWER) -> SamplingParams:
    return SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True)


def worker(**knobs) -> WorkerConfig:
    return WorkerConfig(n_ctx=N_CTX, n_seq_max=2, n_threads=2, **knobs)


def answer(engine: Engine, messages: list[dict], n: int = ANSWER) -> dict:
    started = time.perf_counter()
    result = engine.submit(Request(messages=messages, sampling=greedy(n))).result()
    stats = result.stats.to_dict() if result.stats else {}
    return {"tokens": result.token_ids, "text": result.text, "seconds": time.perf_counter() - started, **stats}


def placed(engine: Engine) -> dict:
    return {role: r.to_dict() for role, r in engine.residences().items() if r is not None}


def run(name: str, model: Path, config: EngineConfig, out: dict, messages: list[dict] = QUESTION) -> None:
    with Engine.load(model, config) as engine:
        out[name] = {"placed": placed(engine), "placement": engine.placement, **answer(engine, messages)}


def teacher_forced_top1(model: Path, tokens: list[int], prompt: list[int]) -> float:
    """Share of positions where the CPU's and Vulkan0's most likely next token agree, both reading the same tokens."""
    picks = []
    for config in (worker(), worker(n_gpu_layers=-1)):
        each = Worker(model, config)
        sequence = prompt + tokens
        each.decode([BatchRow(0, sequence, 0, want_logits=True, all_logits=True)])
        picks.append([int(logits_at(each.ctx, i, each.n_vocab).argmax())
                      for i in range(len(prompt) - 1, len(sequence) - 1)])
        each.close()
    return sum(a == b for a, b in zip(*picks)) / len(picks[0])


def main(model: Path, draft: Path, workdir: Path) -> dict:
    out: dict = {}
    hardware = usable_here(HardwareInfo(physical_cores=2, ram_total=16 << 30))
    out["devices"] = [{"index": g.index, "device": g.device, "name": g.name, "free": g.memory_free,
                       "total": g.memory_total} for g in hardware.gpus]
    size = ModelSize.of(model)
    base = worker()
    run("cpu", model, EngineConfig(worker=base), out)
    single = arrange("single", hardware, worker(n_gpu_layers=-1))
    run("single", model, EngineConfig.placed(single), out)
    out["single"]["predicted_device_bytes"] = size.bytes_for(N_CTX)
    run("partial", model, EngineConfig.placed(arrange("single", hardware, worker(n_gpu_layers=10))), out)
    split = arrange("layer-split", hardware, base, size, devices="0,1")
    run("layer_split", model, EngineConfig.placed(split), out)
    pd = arrange("pd-split", hardware, base, size, devices="0,1")
    run("pd_split", model, EngineConfig.placed(pd, handover_min_tokens=8), out)
    draft_gpu = arrange("draft-gpu", hardware, base, size, devices="0,1", draft_size=ModelSize.of(draft))
    draft_gpu.step_costs = DRAFTING["step_costs"]
    run("draft_gpu", model, EngineConfig.placed(draft_gpu, draft_path=draft, spec=DRAFTING["spec"]), out)
    with Engine.load(model, EngineConfig.placed(single)) as engine:  # the same prompt twice: its prefix reused
        first, second = answer(engine, COPY), answer(engine, COPY)
        out["prefix_reuse"] = {"first": first, "second": second, "placed": placed(engine)}
    saved = []
    for _ in range(2):  # a state saved to disk by one engine, restored by the next, both on the device
        loaded = Worker(model, single.worker)
        disk = KVDiskCache(workdir / "kv", loaded.state_identity, 64 << 20, min_tokens=16)
        engine = Engine(loaded, EngineConfig.placed(single), kv_disk=disk)
        saved.append(answer(engine, COPY))
        engine.close()
    out["kv_disk"] = {"first": saved[0], "second": saved[1], "files": len(list((workdir / "kv").rglob("*.kv")))}
    cpu = out["cpu"]
    with Engine.load(model, EngineConfig(worker=base)) as engine:
        prompt = engine.prompt_tokens(Request(messages=QUESTION, sampling=greedy()))
    out["top1_agreement"] = teacher_forced_top1(model, cpu["tokens"], prompt)
    return out


if __name__ == "__main__":
    print(json.dumps(main(Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]))), flush=True)
