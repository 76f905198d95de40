"""Today's model shapes in the fit and cost model: a mixture of experts with MXFP4 experts (gpt-oss) and Gemma 3n's
per-layer embeddings, read from GGUF headers of those shapes (tests/gguf_shapes.py) and from the catalog."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from described_machines import DESCRIBED
from gguf_shapes import EMBD, EXPERTS, FF, LAYERS, PER_LAYER, USED, VOCAB, gemma3n_gguf, gpt_oss_gguf

from localchat.models.catalog import facts_from_gguf, load_catalog
from localchat.models.gguf_info import read_gguf
from localchat.planning import fit
from localchat.planning.cost import DEFAULT_EFFICIENCY, devices_of, options_for, step_time
from localchat.planning.planner import Wants
from localchat.runtime.gguf_types import GGML_TYPE_ID

gguf = pytest.importorskip("gguf")


@pytest.fixture(scope="module")
def oss(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return gpt_oss_gguf(tmp_path_factory.mktemp("oss") / "tiny-gpt-oss.gguf")


@pytest.fixture(scope="module")
def gemma3n(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return gemma3n_gguf(tmp_path_factory.mktemp("g3n") / "tiny-gemma3n.gguf")


def _facts(path: Path):
    info = read_gguf(path)
    return info, facts_from_gguf(info, path.stem, path.stat().st_size)


def test_mxfp4_tensors_have_ggmls_block_size_and_bytes(oss: Path):
    info = read_gguf(oss)
    reference = {t.name: t for t in gguf.GGUFReader(oss).tensors}
    experts = [t for t in info.tensors if t.name.endswith("_exps.weight")]
    assert len(experts) == 3 * LAYERS and all(t.ggml_type == GGML_TYPE_ID["MXFP4"] for t in experts)
    for tensor in experts:  # 32 weights in 17 bytes: 16 of 4-bit values and one shared e8m0 scale
        assert tensor.n_bytes == reference[tensor.name].n_bytes == math.prod(tensor.shape) // 32 * 17
    assert info.quant == "MXFP4_MOE"


def test_an_expert_layer_holds_every_expert_and_a_token_reads_its_chosen_ones(oss: Path):
    info, model = _facts(oss)
    assert (model.n_expert, model.n_expert_used) == (EXPERTS, USED)
    quant = model.default_quant
    experts = sum(t.n_bytes for t in info.tensors if t.name.startswith("blk.0.") and "_exps." in t.name)
    whole = sum(t.n_bytes for t in info.tensors if t.name.startswith("blk.0."))
    assert model.expert_bytes(quant) == experts and model.layer_bytes(quant) == whole
    # One token: the layer's dense part and USED of EXPERTS experts; a 512-token chunk: all of them.
    assert model.read_layer_bytes(quant, 1) == whole - experts + experts * USED // EXPERTS
    assert model.read_layer_bytes(quant, 512) == whole
    # FLOPs follow the weights a token runs: the expert weights count at USED / EXPERTS.
    params = sum(math.prod(t.shape) for t in info.tensors)
    expert_params = LAYERS * 3 * EMBD * FF * EXPERTS + LAYERS * 2 * FF * EXPERTS
    assert model.params_b == pytest.approx(params / 1e9)
    assert model.active_params() == pytest.approx((params - expert_params * (1 - USED / EXPERTS)) / 1e9)


def test_memory_counts_every_expert_and_decode_time_only_the_active_ones(oss: Path):
    info, model = _facts(oss)
    quant = model.default_quant
    held = fit.usage(model, quant, 4096, "f16", model.n_layer, True)["weights"]
    assert held == LAYERS * model.layer_bytes(quant) + model.output_bytes(quant)
    devices, _ = devices_of(DESCRIBED["rtx4080-desktop"](), DEFAULT_EFFICIENCY)
    gpu = devices[1]
    parts = [(gpu, model.n_layer, True)]
    dense = type(model)(**{**{f: getattr(model, f) for f in model.__slots__}, "n_expert": 0, "n_expert_used": 0})
    read = LAYERS * model.read_layer_bytes(quant, 1) + model.output_bytes(quant)
    # On a GPU a decode step is bandwidth-bound: the MoE's step is shorter by exactly the bytes it skips.
    saved = step_time(dense, quant, parts, 1, "f16", DEFAULT_EFFICIENCY) - step_time(model, quant, parts, 1, "f16",
                                                                                      DEFAULT_EFFICIENCY)
    assert saved == pytest.approx((held - read) / gpu.bandwidth, rel=1e-6)


def test_gemma3n_per_layer_embeddings_are_counted_in_ram_not_on_the_gpu(gemma3n: Path):
    info, model = _facts(gemma3n)
    quant = model.default_quant
    table = next(t for t in info.tensors if t.name == "per_layer_token_embd.weight")
    embedding = next(t for t in info.tensors if t.name == "token_embd.weight")
    assert table.shape == [PER_LAYER * LAYERS, VOCAB] and model.per_layer_embd == PER_LAYER
    assert model.host_bytes(quant) == table.n_bytes + embedding.n_bytes
    assert model.layer_bytes(quant) * LAYERS + model.host_bytes(quant) <= info.tensor_bytes
    # The table is looked up, not multiplied: it is neither compute nor quality.
    assert model.table_params_b() == pytest.approx(PER_LAYER * LAYERS * VOCAB / 1e9)
    assert model.active_params() == pytest.approx(model.params_b - model.table_params_b())
    devices, _ = devices_of(DESCRIBED["rtx4080-desktop"](), DEFAULT_EFFICIENCY)
    whole = next(o for o in options_for(model, quant, 4096, "f16", devices, {model.key: model}, Wants())
                 if o.layout == "gpu")
    on = {u["device"]: u for u in whole.usage}
    assert on["cpu"]["weights"] == model.host_bytes(quant)  # the RAM holds both tables
    assert on["cuda:0"]["weights"] == LAYERS * model.layer_bytes(quant) + model.output_bytes(quant)


def test_the_catalogs_gemma3n_keeps_its_tables_off_the_gpu_and_counts_them_in_the_file():
    catalog = load_catalog()
    for key, layers in (("gemma-3n-e2b", 30), ("gemma-3n-e4b", 35)):
        model = catalog[key]
        assert model.arch == "gemma3n" and model.n_layer == layers and model.per_layer_embd == 256
        for quant, entry in model.files.items():
            table = model.host_bytes(quant) - model.embedding_bytes(quant)
            assert 0.3 * entry.size < table < 0.6 * entry.size  # over 2B parameters of per-layer tables
            # The GPU holds the layers and the tied head's copy of the token embedding, never the tables.
            gpu = fit.usage(model, quant, 4096, "f16", layers, True)["weights"]
            assert gpu <= entry.size - table + model.output_bytes(quant)


def test_the_catalogs_gpt_oss_reads_its_active_experts_per_token():
    catalog = load_catalog()
    for key, experts, active in (("gpt-oss-20b", 32, 3.6), ("gpt-oss-120b", 128, 5.1)):
        model = catalog[key]
        quant = model.default_quant
        assert (model.n_expert, model.n_expert_used, model.active_params()) == (experts, 4, active)
        read = model.n_layer * model.read_layer_bytes(quant, 1) + model.output_bytes(quant)
        # Roughly what active_params_b at the file's bits per weight comes to: 2-3 GB a token, not the file.
        per_weight = model.files[quant].size / (model.params_b * 1e9)
        assert 0.6 < read / (active * 1e9 * per_weight) < 1.6, (key, read)
        assert read < model.files[quant].size / 4


def test_gemma3n_keeps_a_kv_cache_for_its_first_20_layers_only(tmp_path: Path):
    """Its later layers reuse an earlier layer's cache (llama.cpp's loader: n_layer_kv_from_start = 20)."""
    info, model = _facts(gemma3n_gguf(tmp_path / "tall-gemma3n.gguf", layers=24))
    assert (model.n_layer, model.kv_layers) == (24, 20)
    one_layer = 2 * model.n_head_kv * model.head_dim * 2 * 4096  # K and V in f16
    assert model.kv_bytes(4096) == 20 * one_layer
    assert fit.usage(model, model.default_quant, 4096, "f16", 24, True)["kv"] == 20 * one_layer
    assert model.kv_bytes(4096, n_layers=6) == 6 * one_layer  # a device with a few layers: at most theirs
    e4b = load_catalog()["gemma-3n-e4b"]
    assert e4b.kv_layers == 20 and e4b.kv_bytes(8192) == e4b.kv_bytes(8192, n_layers=20) < \
        e4b.n_layer * e4b.kv_bytes(8192, n_layers=1)
