"""The desktop bundle's entry point: the same `localchat` command as the pip install."""

import multiprocessing
import sys

from localchat.cli import main

if __name__ == "__main__":
    # `localchat bench` starts spawned workers; a frozen app must route them back here.
    multiprocessing.freeze_support()
    sys.exit(main())
