"""GPTQ checkpoints on the torch worker, made here from the embedded SmolLM2 (see localchat/gptq/derive.py)."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="the gptq extra is not installed")
pytest.importorskip("safetensors")
pytest.importorskip("tokenizers")

from safetensors.torch import load_file, save_file  # noqa: E402

from localchat.errors import ModelLoadError  # noqa: E402
from localchat.gptq import derive  # noqa: E402
from localchat.gptq.format import PARTS, dequantize  # noqa: E402
from localchat.gptq.tokenizer import CheckpointTokenizer  # noqa: E402
from localchat.paths import models_dir  # noqa: E402
from localchat.runtime.engine import Engine, EngineConfig, Request  # noqa: E402
from localchat.runtime.events import Done, PrefillProgress, TextDelta  # noqa: E402
from localchat.runtime.sampling import SamplingParams  # noqa: E402
from localchat.runtime.worker import BatchRow, WorkerConfig  # noqa: E402

DATA = Path(__file__).parent / "data"
PROMPTS = ["Name the capital city of France.", "Write a haiku about the sea.", "List three colors.",
           "Explain what a CPU does in one sentence.", "What is two plus two?"]


def greedy(n: int) -> SamplingParams:
    return SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True)


def chat(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


@pytest.fixture(scope="session")
def dense_folder(model_path: Path) -> Path:
    from localchat.models.derive import requantize

    return derive.hf_from_gguf(requantize(model_path, "F16"), models_dir() / "SmolLM2-135M-Instruct-hf")


@pytest.fixture(scope="session")
def calibration(dense_folder: Path) -> list[list[int]]:
    tok = CheckpointTokenizer(dense_folder, json.loads((dense_folder / "config.json").read_text()))
    ids = tok.encode((DATA / "gptq-calibration.txt").read_text(), False, False)
    return [ids[i:i + 256] for i in range(0, len(ids), 256)]


@pytest.fixture(scope="session")
def gptq4(dense_folder: Path, calibration) -> Path:
    return derive.quantize_folder(dense_folder, models_dir() / "SmolLM2-135M-Instruct-GPTQ-4bit-g128",
                                  calibration, bits=4, group=128, sym=True)


def engine(folder: Path, n_batch: int = 512, step_budget: int = 0) -> Engine:
    config = EngineConfig(worker=WorkerConfig(n_ctx=2048, n_batch=n_batch, n_seq_max=4, n_threads=2),
                          step_budget=step_budget, adapt_threads=False)
    return Engine.load(folder, config)


# -- a plain reference: the dequantized weights, the whole sequence again for every token --------------

def reference_weights(folder: Path) -> tuple[dict, dict[str, torch.Tensor]]:
    config = json.loads((folder / "config.json").read_text())
    tensors = load_file(folder / "model.safetensors")
    bits = config["quantization_config"]["bits"]
    weights = {k: v.float() for k, v in tensors.items() if k.endswith("norm.weight") or "embed" in k}
    for key in {k.rsplit(".", 1)[0] for k in tensors if k.endswith(".qweight")}:
        weights[f"{key}.weight"] = dequantize(*(tensors[f"{key}.{p}"] for p in PARTS), bits)
    return config, weights


def reference_logits(config: dict, w: dict[str, torch.Tensor], ids: list[int]) -> torch.Tensor:
    """Logits of every position: a textbook Llama forward with no cache and no batching."""
    n_head, n_kv, eps = config["num_attention_heads"], config["num_key_value_heads"], config["rms_norm_eps"]
    dim = config["hidden_size"] // n_head
    norm = lambda x, g: x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * g  # noqa: E731
    pos = torch.arange(len(ids), dtype=torch.float64)
    freq = pos[:, None] / config["rope_theta"] ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    cos, sin = torch.cos(freq).float(), torch.sin(freq).float()

    def rope(x):  # [heads, n, dim]: first half rotates with the second
        a, b = x[..., : dim // 2], x[..., dim // 2:]
        return torch.cat([a * cos - b * sin, b * cos + a * sin], -1)

    x = w["model.embed_tokens.weight"][ids]
    causal = torch.ones(len(ids), len(ids)).tril().bool()
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = norm(x, w[p + "input_layernorm.weight"])
        q = rope((h @ w[p + "self_attn.q_proj.weight"].T).view(len(ids), n_head, dim).transpose(0, 1))
        k = rope((h @ w[p + "self_attn.k_proj.weight"].T).view(len(ids), n_kv, dim).transpose(0, 1))
        v = (h @ w[p + "self_attn.v_proj.weight"].T).view(len(ids), n_kv, dim).transpose(0, 1)
        k, v = k.repeat_interleave(n_head // n_kv, 0), v.repeat_interleave(n_head // n_kv, 0)
        scores = (q @ k.transpose(1, 2) / math.sqrt(dim)).masked_fill(~causal, float("-inf"))
        att = (scores.softmax(-1) @ v).transpose(0, 1).reshape(len(ids), -1)
        x = x + att @ w[p + "self_attn.o_proj.weight"].T
        h = norm(x, w[p + "post_attention_layernorm.weight"])
        gate, up = h @ w[p + "mlp.gate_proj.weight"].T, h @ w[p + "mlp.up_proj.weight"].T
        x = x + (torch.nn.functional.silu(gate) * up) @ w[p + "mlp.down_proj.weight"].T
    return norm(x, w["model.norm.weight"]) @ w["model.embed_tokens.weight"].T


def reference_greedy(config: dict, w: dict[str, torch.Tensor], ids: list[int], n: int) -> list[int]:
    ids = list(ids)
    with torch.no_grad():
        for _ in range(n):
            ids.append(int(reference_logits(config, w, ids)[-1].argmax()))
    return ids[-n:]


def test_tokenizer_matches_the_gguf_vocabulary(dense_folder: Path, model_path: Path):
    from localchat.runtime.worker import Worker

    tok = CheckpointTokenizer(dense_folder, json.loads((dense_folder / "config.json").read_text()))
    gguf = Worker(model_path, WorkerConfig(n_ctx=256, n_seq_max=1))
    try:
        for text in ["<|im_start|>user\nHi 12345!<|im_end|>", "  tabs\tand ünïcödé 日本語 🎉", (DATA / "gptq-eval.txt").read_text()]:
            for special in (True, False):
                assert tok.encode(text, False, special) == gguf.tokenize(text, add_special=False, parse_special=special)
            assert b"".join(tok.token_bytes(t) for t in tok.encode(text, False, False)) == text.encode()
    finally:
        gguf.close()


def test_greedy_tokens_equal_a_plain_reference_forward(gptq4: Path):
    config, weights = reference_weights(gptq4)
    with engine(gptq4) as eng:
        assert eng.worker.decoder.kernel_counts.get("int4")  # torch's int4 matmul, not only dequantized
        for prompt in PROMPTS:
            request = Request(messages=chat(prompt), sampling=greedy(8))
            ids = eng.prompt_tokens(request)
            assert eng.submit(request).result().token_ids == reference_greedy(config, weights, ids, 8), prompt


def test_concurrent_equals_alone_and_chunked_equals_one_shot(gptq4: Path):
    requests = lambda: [Request(messages=chat(p), sampling=greedy(12)) for p in PROMPTS[:3]]  # noqa: E731
    with engine(gptq4) as eng:
        alone = [eng.submit(r).result().token_ids for r in requests()]
        streams = [eng.submit(r) for r in requests()]
        assert [s.result().token_ids for s in streams] == alone
    with engine(gptq4, n_batch=16) as eng:  # prompts of ~40 tokens go in chunks of at most 16
        streams = [eng.submit(r) for r in requests()]
        assert [s.result().token_ids for s in streams] == alone


def test_cancel_mid_prefill(gptq4: Path):
    document = " ".join(["The quick brown fox jumps over the lazy dog."] * 40)
    with engine(gptq4, n_batch=32) as eng:
        stream = eng.submit(Request(messages=chat(document), sampling=greedy(8)))
        for event in stream:
            if isinstance(event, PrefillProgress) and 0 < event.done < event.total:
                stream.cancel()
                break
        events = list(stream)
        assert isinstance(events[-1], Done) and events[-1].finish_reason == "cancelled"
        assert not any(isinstance(e, TextDelta) for e in events)
        assert all(cache.length == 0 for cache in eng.worker.caches)
        assert eng.submit(Request(messages=chat(PROMPTS[2]), sampling=greedy(4))).result().finish_reason == "length"


def test_the_4bit_model_knows_the_capital_of_france(gptq4: Path):
    with engine(gptq4) as eng:
        answer = eng.submit(Request(messages=chat(PROMPTS[0]), sampling=SamplingParams(temperature=0.0, max_tokens=24)))
        assert "Paris" in answer.result().text


def truncated(dense: Path, n_layer: int, target: Path) -> Path:
    """The first layers of the dense checkpoint alone: a small model for checking every format variant."""
    if (target / "config.json").is_file():
        return target
    target.mkdir(parents=True, exist_ok=True)
    config = {**json.loads((dense / "config.json").read_text()), "num_hidden_layers": n_layer}
    keep = {k: v for k, v in load_file(dense / "model.safetensors").items()
            if not k.startswith("model.layers.") or int(k.split(".")[2]) < n_layer}
    save_file(keep, target / "model.safetensors")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(dense / name, target / name)
    (target / "config.json").write_text(json.dumps(config))
    return target


VARIANTS = [dict(bits=8, group=128, sym=True, desc_act=True), dict(bits=4, group=128, sym=False, desc_act=True),
            dict(bits=4, group=-1, sym=False), dict(bits=4, group=32, sym=True), dict(bits=8, group=64, sym=False)]


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: "-".join(f"{k}{v[k]}" for k in v))
def test_every_format_variant_runs_like_the_reference(dense_folder: Path, calibration, variant: dict):
    small = truncated(dense_folder, 2, models_dir() / "SmolLM2-2-layers-hf")
    name = "-".join(f"{k}{v}" for k, v in variant.items())
    folder = derive.quantize_folder(small, models_dir() / f"SmolLM2-2-layers-gptq-{name}", calibration, **variant)
    config, weights = reference_weights(folder)
    with engine(folder) as eng:
        request = Request(messages=chat(PROMPTS[1]), sampling=greedy(1))
        ids = eng.prompt_tokens(request)
        eng.worker.decode([BatchRow(0, ids, 0, True, all_logits=True)])
        got = torch.stack([torch.from_numpy(eng.worker.logits(i)) for i in range(len(ids))])
    want = reference_logits(config, weights, ids)
    assert torch.allclose(got, want, atol=2e-3 * want.abs().max().item()), (got - want).abs().max()


def broken(source: Path, tmp_path: Path, config_change: dict | None = None, drop: str | None = None,
           drop_tensor: str | None = None) -> Path:
    folder = tmp_path / "broken"
    shutil.copytree(source, folder)
    if config_change is not None:
        config = json.loads((folder / "config.json").read_text())
        for key, value in config_change.items():
            if key in config["quantization_config"]:
                config["quantization_config"][key] = value
            else:
                config[key] = value
        (folder / "config.json").write_text(json.dumps(config))
    if drop:
        (folder / drop).unlink()
    if drop_tensor:
        tensors = load_file(folder / "model.safetensors")
        del tensors[drop_tensor]
        save_file(tensors, folder / "model.safetensors")
    return folder


@pytest.mark.parametrize("damage, message", [
    (dict(config_change={"bits": 3}), "3 bits"),
    (dict(config_change={"architectures": ["GPT2LMHeadModel"]}), "architecture GPT2LMHeadModel"),
    (dict(config_change={"group_size": 48}), "group size 48"),
    (dict(config_change={"checkpoint_format": "marlin"}), "checkpoint format 'marlin'"),
    (dict(drop="tokenizer.json"), "lacks tokenizer.json"),
    (dict(drop="model.safetensors"), "lacks *.safetensors"),
    (dict(drop_tensor="model.layers.1.mlp.up_proj.qzeros"), "model.layers.1.mlp.up_proj.qzeros"),
], ids=["bits", "architecture", "group", "format", "tokenizer", "weights", "tensor"])
def test_a_checkpoint_we_cannot_run_is_refused_naming_the_part(dense_folder: Path, calibration, tmp_path: Path,
                                                                damage: dict, message: str):
    small = truncated(dense_folder, 2, models_dir() / "SmolLM2-2-layers-hf")
    good = derive.quantize_folder(small, models_dir() / "SmolLM2-2-layers-gptq-bits4-group128-symTrue", calibration,
                                  bits=4, group=128, sym=True)
    with pytest.raises(ModelLoadError, match=message.replace("*", r"\*").replace("(", r"\(")):
        Engine.load(broken(good, tmp_path, **damage))


def test_without_the_extra_the_error_says_to_install_it(monkeypatch, tmp_path: Path, dense_folder: Path):
    import importlib.util

    from localchat import gptq

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    assert not gptq.extra_installed()
    folder = tmp_path / "gptq"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"quantization_config": {"quant_method": "gptq", "bits": 4}}))
    with pytest.raises(ModelLoadError, match=gptq.NEEDS_EXTRA):
        Engine.load(folder)


def test_localchat_chat_answers_from_a_gptq_folder(gptq4: Path):
    import os
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "localchat", "chat", "--temperature", "0", "--max-tokens", "24",
                           "--model", str(gptq4), PROMPTS[0]], capture_output=True, text=True, timeout=600,
                          env=dict(os.environ))
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Paris" in done.stdout
