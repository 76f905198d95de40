"""The catalog's schema and its internal consistency."""

from __future__ import annotations

import pytest
import yaml

from localchat.errors import ConfigError
from localchat.models.catalog import ModelFacts, ModelFile, catalog_path, load_catalog

QUANTS = {"Q2_K", "Q3_K_M", "Q4_0", "Q4_1", "Q4_K_M", "Q4_K_S", "Q5_K_M", "Q6_K", "Q8_0", "F16", "BF16",
          "IQ4_XS", "Q5_K_S", "Q3_K_L", "Q3_K_S", "IQ3_M", "MXFP4"}
ARCH_KEYS = {"arch", "n_layer", "n_head", "n_head_kv", "head_dim", "n_embd", "n_vocab", "n_ctx_train"}


def test_every_entry_is_complete_and_consistent():
    catalog = load_catalog()
    raw = yaml.safe_load(catalog_path().read_text())["models"]
    families = {"qwen2.5", "qwen3", "llama3", "gemma3", "smollm2", "gpt-oss", "gemma3n"}
    assert {e.family for e in catalog.values()} >= families
    for key, entry in catalog.items():
        assert ARCH_KEYS <= raw[key]["architecture"].keys(), key  # written down, not estimated
        assert entry.n_head % entry.n_head_kv == 0, key
        assert entry.default_quant in entry.files, key
        assert entry.license and raw[key]["license"], key
        cited = bool(raw[key].get("cite"))
        for quant, model_file in entry.files.items():
            if model_file.is_checkpoint:
                check_checkpoint(entry, model_file)
            else:
                assert quant in QUANTS, (key, quant)
                assert model_file.file.endswith(".gguf") and model_file.format == "gguf", (key, quant)
            assert model_file.size > 10_000_000, (key, quant)
            assert model_file.sources, (key, quant)
            for source in model_file.sources:
                kind = next(iter(source))
                assert kind in ("hub", "wheel"), (key, kind)
                assert "verified" in source[kind], f"{key} {quant}: say whether the source was verified"
                assert cited or source[kind]["verified"] is False, f"{key}: uncited facts cannot be verified"
            if model_file.sha256 is not None:
                assert len(model_file.sha256) == 64
        if entry.draft is not None:
            draft = catalog[entry.draft]
            assert draft.family == entry.family, key
            assert draft.n_vocab == entry.n_vocab or abs(draft.n_vocab - entry.n_vocab) <= 128, key
            smallest = min(draft.files.values(), key=lambda f: f.size).size
            assert smallest < min(f.size for f in entry.files.values()), f"{key}: the draft is smaller"


def check_checkpoint(entry: ModelFacts, model_file: ModelFile) -> None:
    """A GPTQ entry: named by its bits, a folder (not a .gguf), fetched from a hub repo, an architecture the
    GPTQ worker runs, and as big as its quantized linears plus float16 embeddings make it."""
    where = (entry.key, model_file.quant)
    assert model_file.quant == f"gptq-int{model_file.bits}" and model_file.bits in (4, 8), where
    assert not model_file.file.endswith(".gguf") and model_file.sha256 is None, where
    assert [next(iter(s)) for s in model_file.sources] == ["hub"] and model_file.repo, where
    assert model_file.repo_file is None and model_file.quant != entry.default_quant, where
    assert entry.arch in ("llama", "qwen2"), where  # the torch worker's decoders
    embeddings = entry.n_vocab * entry.n_embd * (1 if entry.tied_embeddings else 2)
    linears = entry.params_b * 1e9 - embeddings
    expected = linears * model_file.bits / 8 + 2 * embeddings
    assert 0.97 < model_file.size / expected < 1.1, (where, model_file.size, expected)
    assert entry.embedding_bytes(model_file.quant) == entry.n_vocab * entry.n_embd * 2


def test_gptq_checkpoints_sit_beside_the_gguf_files_of_their_model():
    catalog = load_catalog()
    with_gptq = {key for key, e in catalog.items() if e.formats("gptq")}
    assert {"qwen2.5-0.5b", "qwen2.5-7b"} <= with_gptq
    entry = catalog["qwen2.5-0.5b"]
    four, eight = entry.file_for("gptq-int4"), entry.file_for("GPTQ-Int8")
    assert four.repo == "Qwen/Qwen2.5-0.5B-Instruct-GPTQ-Int4" and four.size < eight.size
    assert set(entry.formats("gguf")) == {"Q4_K_M", "Q5_K_M", "Q6_K", "Q8_0"}
    # The weights without the float16 embedding, per layer: the planner's per-layer bytes.
    outside = four.size - entry.embedding_bytes("gptq-int4")
    assert 0 <= outside - entry.layer_bytes("gptq-int4") * entry.n_layer < entry.n_layer


def test_a_gptq_entry_must_say_its_bits(tmp_path):
    bad = tmp_path / "models.yaml"
    bad.write_text("""
models:
  tiny:
    architecture: {arch: llama, n_layer: 2, n_head_kv: 2}
    files:
      Q8_0: {file: tiny.gguf, size: 20000000, sources: []}
      gptq-int4: {format: gptq, file: tiny-gptq, size: 20000000, sources: [{hub: {repo: org/tiny}}]}
""")
    with pytest.raises(ConfigError, match="bits"):
        load_catalog(bad)


def test_bigger_quant_levels_are_bigger_files():
    order = ["Q2_K", "Q3_K_M", "Q4_K_M", "Q5_K_M", "Q6_K", "Q8_0", "F16"]
    for key, entry in load_catalog().items():
        sizes = [entry.files[q].size for q in order if q in entry.files]
        assert sizes == sorted(sizes), key


def test_a_split_model_is_named_by_its_first_part_and_fetched_from_the_hub_only(tmp_path):
    entry = load_catalog()["gpt-oss-120b"].file_for(None)
    assert entry.file == entry.repo_file == "gpt-oss-120b-mxfp4-00001-of-00003.gguf" and entry.sha256 is None
    bad = tmp_path / "models.yaml"
    for extra in ("sha256: '" + "0" * 64 + "'", "sources: [{wheel: {package: p, version: '1', member: m, verified: false}}]"):
        bad.write_text(f"""
models:
  split:
    architecture: {{arch: llama, n_layer: 2, n_head_kv: 2}}
    files:
      Q4_K_M:
        file: m-00001-of-00002.gguf
        size: 100
        {extra}
""")
        with pytest.raises(ConfigError, match="split model"):
            load_catalog(bad)
