"""Runtime benchmark: ours vs llama-cpp-python's Llama; the same as `localchat bench`.

    python benchmarks/runtime.py [--quick] [--output docs/benchmarks-runtime.md]
"""

import argparse
import sys

from localchat.bench import run_runtime_benchmark

if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--output")
    args = parser.parse_args()
    sys.exit(run_runtime_benchmark(quick=args.quick, output=args.output))
