"""llama-cpp-python's own OpenAI-compatible server (`python -m llama_cpp.server`), with the CPU kernels
this llama.cpp build loads at run time registered first (the server itself would load none)."""

import runpy
import sys
from pathlib import Path

from localchat.runtime.backends import kernels

kernels.activate(True, Path(sys.argv[sys.argv.index("--model") + 1]))
sys.argv[0] = "llama_cpp.server"
runpy.run_module("llama_cpp.server", run_name="__main__")
