"""Throughput benchmark, the same as ``nqm bench`` (same options): a table, then one JSON line."""

import sys

from nqm.cli import main

if __name__ == "__main__":
    sys.exit(main(["bench", *sys.argv[1:]]))
