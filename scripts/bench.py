"""Throughput benchmark, the same as ``nqm bench`` (same options): a table, then one JSON line."""

import sys

from nqm.cli import main
from nqm.devices import use_every_core

if __name__ == "__main__":
    use_every_core()
    sys.exit(main(["bench", *sys.argv[1:]]))
