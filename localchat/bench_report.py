"""What every benchmark shares: a measurement in a process of its own, the machine's facts, the report."""

from __future__ import annotations

import multiprocessing
import os
import platform
from pathlib import Path

from .runtime.workers.worker import default_threads
from .units import size_text


def isolated(fn, *args):
    """Run one measurement in a fresh process: two llama.cpp thread pools in one process fight
    over the cores and halve both sides' speed."""
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(fn, args)


def machine_facts() -> str:
    import llama_cpp

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    try:
        import psutil

        ram = f"{size_text(psutil.virtual_memory().total)} RAM"
    except ImportError:
        ram = "RAM unknown"
    return (f"{cpu}, {os.cpu_count()} logical cores, {ram}, {default_threads()} threads; Python {platform.python_version()}, "
            f"llama-cpp-python {llama_cpp.__version__}")


class Report:
    """Benchmark lines: printed as they come, kept for the Markdown file, headed by the machine."""

    def __init__(self) -> None:
        self.lines = [f"Machine: {machine_facts()}", ""]

    def emit(self, line: str = "") -> None:
        print(line, flush=True)
        self.lines.append(line)

    def save(self, path: str | None) -> None:
        if path:
            Path(path).write_text("\n".join(self.lines) + "\n", encoding="utf-8")
