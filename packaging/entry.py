"""The desktop bundle's entry point: the same `localchat` command as the pip install."""

import multiprocessing
import sys

from localchat.cli import main

if __name__ == "__main__":
    # `localchat bench` starts spawned workers; a frozen app must route them back here.
    multiprocessing.freeze_support()
    if sys.argv[1:2] == ["--localchat-prove-cpu"]:  # runtime/backends/kernels.py proving CPU kernels
        from localchat.runtime.workers.cpu_proof import prove_in_child

        sys.exit(prove_in_child(sys.argv[2:]))
    if sys.argv[1:2] == ["--localchat-list-devices"]:  # runtime/backends/devices.py proving GPU backends
        from localchat.runtime.backends.devices import list_in_child

        sys.exit(list_in_child(sys.argv[2:]))
    sys.exit(main())
