"""Settings precedence and validation."""

from __future__ import annotations

import pytest

from localchat.config import load_settings, settings_file
from localchat.errors import ConfigError


def test_precedence_defaults_file_env_flags(tmp_path, monkeypatch):
    monkeypatch.setenv("LOCALCHAT_HOME", str(tmp_path))
    assert load_settings(environ={}).n_ctx == 8192
    settings_file().write_text("n_ctx = 4096\nn_threads = 3\n")
    assert load_settings(environ={}).n_ctx == 4096
    from_env = load_settings(environ={"LOCALCHAT_N_CTX": "2048"})
    assert (from_env.n_ctx, from_env.n_threads) == (2048, 3)
    assert load_settings({"n_ctx": 1024}, environ={"LOCALCHAT_N_CTX": "2048"}).n_ctx == 1024


def test_unknown_keys_and_bad_values_are_errors(tmp_path, monkeypatch):
    monkeypatch.setenv("LOCALCHAT_HOME", str(tmp_path))
    settings_file().write_text("n_cxt = 4096\n")
    with pytest.raises(ConfigError, match="unknown setting 'n_cxt'"):
        load_settings(environ={})
    settings_file().write_text("n_ctx = [\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_settings(environ={})
    settings_file().unlink()
    with pytest.raises(ConfigError, match="bad value"):
        load_settings(environ={"LOCALCHAT_N_CTX": "lots"})
    with pytest.raises(ConfigError, match="out of range"):
        load_settings({"n_seq_max": 0}, environ={})


# -- the tuned profile: defaults < profile < settings.toml < env < flags ------------------------------

def _machine(ram_gb: int = 16):
    from localchat.hardware import HardwareInfo

    return HardwareInfo(os="Linux", machine="x86_64", cpu_model="Test CPU", physical_cores=4, logical_cores=8,
                        cpu_flags=["avx2", "fma"], ram_total=ram_gb << 30, ram_available=(ram_gb - 4) << 30)


def _save_profile(tmp_path, machine, **changes):
    from localchat.tune.profile import Profile, fingerprint, save_profile

    model = tmp_path / "tuned.Q8_0.gguf"
    model.write_bytes(b"GGUF")  # settings only name the file; nothing loads it here
    draft = tmp_path / "draft.Q4_1.gguf"
    draft.write_bytes(b"GGUF")
    profile = Profile(fingerprint=fingerprint(machine), hardware="Test CPU, 4 cores", model="smollm2-135m",
                      quant="Q8_0", path=str(model), layout="partial", n_ctx=4096, n_threads=3, n_gpu_layers=12,
                      step_budget=64, draft="tiny", draft_path=str(draft), draft_acceptance=0.8, draft_speedup=1.4)
    for key, value in changes.items():
        setattr(profile, key, value)
    save_profile(profile)
    return profile


def test_a_current_profile_sets_the_defaults(tmp_path, monkeypatch):
    from localchat.planning.cost import MIN_DRAFT_SPEEDUP
    from localchat.tune.profile import DRAFT_PAYS

    assert DRAFT_PAYS == MIN_DRAFT_SPEEDUP
    monkeypatch.setenv("LOCALCHAT_HOME", str(tmp_path))
    machine = _machine()
    untuned = load_settings(environ={}, hardware=lambda: machine)
    profile = _save_profile(tmp_path, machine)
    tuned = load_settings(environ={}, hardware=lambda: machine)
    assert tuned != untuned
    assert (tuned.model, tuned.n_ctx, tuned.n_threads, tuned.n_gpu_layers, tuned.step_budget) == (
        profile.path, 4096, 3, 12, 64)
    assert tuned.placement == "single" and tuned.draft == profile.draft_path  # partial offload is one device
    # Planner placements map onto the runtime's; a draft that did not pay is not loaded.
    _save_profile(tmp_path, machine, layout="draft-on-second-gpu", devices="0,1", draft_speedup=1.0)
    tuned = load_settings(environ={}, hardware=lambda: machine)
    assert (tuned.placement, tuned.devices, tuned.draft) == ("draft-gpu", "0,1", "")
    _save_profile(tmp_path, machine, layout="layer-split")
    assert load_settings(environ={}, hardware=lambda: machine).placement == "layer-split"



def test_a_profile_saved_before_the_layout_field_was_named_still_loads(tmp_path, monkeypatch):
    """Profiles on disk from before: the planner's layout under the key "placement" (or a placement's own
    name there, when the wizard measured another placement to win)."""
    import json

    from localchat.tune.profile import load_profile, profile_path

    monkeypatch.setenv("LOCALCHAT_HOME", str(tmp_path))
    machine = _machine()
    for old, runs_as in (("partial", "single"), ("draft-on-second-gpu", "draft-gpu"), ("single", "single")):
        profile = _save_profile(tmp_path, machine, layout=old)
        data = json.loads(profile_path().read_text())
        data["placement"] = data.pop("layout")
        profile_path().write_text(json.dumps(data))
        assert load_profile().layout == old
        assert load_settings(environ={}, hardware=lambda: machine).placement == runs_as
    _save_profile(tmp_path, machine)
    assert "layout" in json.loads(profile_path().read_text()) and "placement" not in json.loads(profile_path().read_text())


def test_a_placement_measured_to_win_is_kept_as_the_layout_it_runs():
    from localchat.planning.placements import PLACEMENTS, RUNNABLE, layout_for, placement_of

    # One worker: where its layers are (the planner counts the output head as one more layer).
    assert [layout_for("single", n, 30) for n in (0, 12, 31, -1)] == ["cpu", "partial", "gpu", "gpu"]
    assert [layout_for(p, 31, 30) for p in ("pd-split", "layer-split", "draft-gpu")] == [
        "pd-split", "layer-split", "draft-on-second-gpu"]
    for placement in RUNNABLE:  # each names its placement again, so a profile reads back what was measured
        assert placement_of(layout_for(placement, 12, 30)).name == placement
    for not_runnable in set(PLACEMENTS) - set(RUNNABLE) | {"partial"}:
        with pytest.raises(KeyError):
            layout_for(not_runnable, 0, 30)

def test_settings_file_environment_and_flags_win_over_the_profile(tmp_path, monkeypatch):
    monkeypatch.setenv("LOCALCHAT_HOME", str(tmp_path))
    machine = _machine()
    profile = _save_profile(tmp_path, machine)
    settings_file().write_text("n_ctx = 2048\n")
    assert load_settings(environ={}, hardware=lambda: machine).n_ctx == 2048
    from_env = load_settings(environ={"LOCALCHAT_STEP_BUDGET": "16"}, hardware=lambda: machine)
    assert (from_env.n_ctx, from_env.step_budget, from_env.n_gpu_layers) == (2048, 16, 12)
    flags = load_settings({"n_gpu_layers": 0, "placement": "pd-split"}, environ={}, hardware=lambda: machine)
    assert (flags.n_gpu_layers, flags.placement, flags.model) == (0, "pd-split", profile.path)
    # Naming the tuned model another way keeps its tuning ...
    same = load_settings({"model": "smollm2-135m:Q8_0"}, environ={}, hardware=lambda: machine)
    assert (same.model, same.n_gpu_layers, same.draft) == ("smollm2-135m:Q8_0", 12, profile.draft_path)
    # ... another model keeps only what belongs to the machine: a layer count tuned for one model can break another.
    other = load_settings({"model": "qwen3-8b"}, environ={}, hardware=lambda: machine)
    assert (other.model, other.n_threads, other.n_gpu_layers, other.step_budget, other.draft) == (
        "qwen3-8b", 3, 0, 0, "")
    assert other.n_ctx == 2048  # settings.toml still applies


def test_a_profile_for_other_hardware_is_ignored_with_one_warning(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("LOCALCHAT_HOME", str(tmp_path))
    _save_profile(tmp_path, _machine(16))
    upgraded = _machine(64)
    with caplog.at_level("WARNING", logger="localchat"):
        first = load_settings(environ={}, hardware=lambda: upgraded)
        second = load_settings(environ={}, hardware=lambda: upgraded)
    assert first == second
    assert first.model == "smollm2-135m" and first.n_ctx == 8192  # the defaults
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and "other hardware" in warnings[0] and "localchat tune" in warnings[0]
    # A machine that cannot be read in time cannot confirm the profile either.
    assert load_settings(environ={}, hardware=lambda: None).n_ctx == 8192


def test_a_profile_whose_model_file_is_gone_is_ignored(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("LOCALCHAT_HOME", str(tmp_path))
    machine = _machine()
    profile = _save_profile(tmp_path, machine)
    from pathlib import Path

    Path(profile.path).unlink()
    with caplog.at_level("WARNING", logger="localchat"):
        assert load_settings(environ={}, hardware=lambda: machine).model == "smollm2-135m"
    assert any("is gone" in r.getMessage() for r in caplog.records)


def test_the_launch_check_uses_the_quick_in_process_probe(tmp_path, monkeypatch):
    import time

    from localchat.hardware.probe import collect

    monkeypatch.setenv("LOCALCHAT_HOME", str(tmp_path))
    profile = _save_profile(tmp_path, collect(measure=False))  # this machine, as the fingerprint sees it
    started = time.perf_counter()
    assert load_settings(environ={}).model == profile.path
    assert time.perf_counter() - started < 2.0  # no bandwidth measurement, no child process


def test_a_corrupt_profile_is_a_clear_config_error(tmp_path, monkeypatch):
    from localchat.tune.profile import profile_path

    monkeypatch.setenv("LOCALCHAT_HOME", str(tmp_path))
    machine = _machine()
    for text in ("{not json", "[1, 2]", '{"model": "x"}'):
        profile_path().write_text(text)
        with pytest.raises(ConfigError, match="tuned profile .* is unreadable.*localchat tune"):
            load_settings(environ={}, hardware=lambda: machine)
    _save_profile(tmp_path, machine, n_ctx="lots")
    with pytest.raises(ConfigError, match="tuned profile .* is unreadable .*'n_ctx' is 'lots', not int"):
        load_settings(environ={}, hardware=lambda: machine)
    _save_profile(tmp_path, machine, n_ctx=32)  # well-typed, but out of range for a launch
    with pytest.raises(ConfigError, match="'n_ctx' = 32 is out of range"):
        load_settings(environ={}, hardware=lambda: machine)
    _save_profile(tmp_path, machine, layout="teleport")
    with pytest.raises(ConfigError, match="unknown placement 'teleport'"):
        load_settings(environ={}, hardware=lambda: machine)


# -- one declaration per setting: flags, environment, settings.toml, validation, the README ----------

def test_the_readme_settings_table_is_the_generated_one():
    from pathlib import Path

    from localchat.config import readme_table, with_table

    readme = (Path(__file__).parents[1] / "README.md").read_text(encoding="utf-8")
    assert readme_table() in readme, "run `python -m localchat.config --readme-table README.md`"
    assert with_table(readme) == readme


def test_each_setting_is_a_key_a_variable_and_its_declared_flag(tmp_path, monkeypatch):
    from localchat.cli import build_parser
    from localchat.config import DECLARED, env_name, flag_values

    monkeypatch.setenv("LOCALCHAT_HOME", str(tmp_path))
    args = build_parser().parse_args(["serve", "--threads", "3", "--no-spec", "--placement", "pd-split",
                                      "--n-ctx", "1024", "--deterministic"])
    flags = load_settings(flag_values(args), environ={})
    assert (flags.n_threads, flags.speculation, flags.placement, flags.n_ctx, flags.deterministic) == (
        3, False, "pd-split", 1024, True)
    assert load_settings(flag_values(build_parser().parse_args(["serve"])), environ={}) == load_settings(environ={})
    settings_file().write_text("n_seq_max = 4\nspeculation = false\n")
    from_file = load_settings(environ={env_name("n_batch"): "256", env_name("lookup"): "yes"})
    assert (from_file.n_seq_max, from_file.speculation, from_file.n_batch, from_file.lookup) == (4, False, 256, True)
    assert all(env_name(name) == "LOCALCHAT_" + name.upper() for name in DECLARED)
    with pytest.raises(ConfigError, match="'placement' = teleport is out of range; use auto \\| single"):
        load_settings({"placement": "teleport"}, environ={})
    with pytest.raises(ConfigError, match="'devices' = 0;1 is out of range; use GPU indices"):
        load_settings({"devices": "0;1"}, environ={})


def test_variables_of_the_runtime_and_the_benchmark_are_not_settings(tmp_path, monkeypatch):
    monkeypatch.setenv("LOCALCHAT_HOME", str(tmp_path))
    # The README tells users to set LOCALCHAT_CPU_VARIANT; it must not stop every launch.
    assert load_settings(environ={"LOCALCHAT_CPU_VARIANT": "haswell", "LOCALCHAT_BENCH_GPU_LAYERS": "99"}).n_ctx == 8192
    # Nor the installer's LOCALCHAT_CPU_VARIANTS and LOCALCHAT_GPU, which CI exports for its whole run.
    assert load_settings(environ={"LOCALCHAT_CPU_VARIANTS": "all", "LOCALCHAT_GPU": "vulkan"}).n_ctx == 8192


def test_the_worker_takes_every_knob_it_shares_with_the_settings():
    from localchat.assemble import worker_config
    from localchat.config import Settings

    worker = worker_config(Settings(n_ctx=1024, n_batch=128, n_seq_max=3, n_threads=2, n_gpu_layers=5,
                                    deterministic=True))
    assert (worker.n_ctx, worker.n_batch, worker.n_seq_max, worker.n_threads, worker.n_gpu_layers,
            worker.deterministic) == (1024, 128, 3, 2, 5, True)


def test_a_default_system_prompt_comes_from_the_file_the_environment_or_the_window_flag(tmp_path, monkeypatch):
    from localchat.cli import build_parser
    from localchat.config import env_name, flag_values

    monkeypatch.setenv("LOCALCHAT_HOME", str(tmp_path))
    assert load_settings(environ={}).system_prompt == ""
    settings_file().write_text('system_prompt = "Answer in one sentence."\n')
    assert load_settings(environ={}).system_prompt == "Answer in one sentence."
    assert load_settings(environ={env_name("system_prompt"): "Be kind."}).system_prompt == "Be kind."
    args = build_parser().parse_args(["ui", "--system-prompt", "Be brief."])  # `localchat` alone runs ui
    assert load_settings(flag_values(args), environ={}).system_prompt == "Be brief."
