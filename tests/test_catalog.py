"""The catalog's schema and its internal consistency."""

from __future__ import annotations

import yaml

from localchat.models.catalog import catalog_path, load_catalog

QUANTS = {"Q2_K", "Q3_K_M", "Q4_0", "Q4_1", "Q4_K_M", "Q4_K_S", "Q5_K_M", "Q6_K", "Q8_0", "F16", "BF16",
          "IQ4_XS", "Q5_K_S", "Q3_K_L", "Q3_K_S", "IQ3_M"}
ARCH_KEYS = {"arch", "n_layer", "n_head", "n_head_kv", "head_dim", "n_embd", "n_vocab", "n_ctx_train"}


def test_every_entry_is_complete_and_consistent():
    catalog = load_catalog()
    raw = yaml.safe_load(catalog_path().read_text())["models"]
    families = {"qwen2.5", "qwen3", "llama3", "gemma3", "smollm2"}
    assert {e.family for e in catalog.values()} >= families
    for key, entry in catalog.items():
        assert ARCH_KEYS <= raw[key]["architecture"].keys(), key  # written down, not estimated
        assert entry.n_head % entry.n_head_kv == 0, key
        assert entry.default_quant in entry.files, key
        assert entry.license and raw[key]["license"], key
        cited = bool(raw[key].get("cite"))
        for quant, model_file in entry.files.items():
            assert quant in QUANTS, (key, quant)
            assert model_file.size > 10_000_000 and model_file.file.endswith(".gguf"), (key, quant)
            assert model_file.format == "gguf", (key, quant)
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


def test_bigger_quant_levels_are_bigger_files():
    order = ["Q2_K", "Q3_K_M", "Q4_K_M", "Q5_K_M", "Q6_K", "Q8_0", "F16"]
    for key, entry in load_catalog().items():
        sizes = [entry.files[q].size for q in order if q in entry.files]
        assert sizes == sorted(sizes), key
