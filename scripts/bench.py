"""Throughput benchmark (same as ``nqm bench``): prints a table and, last, one JSON line."""

import argparse

from nqm import bench

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cells", type=int, default=256)
    parser.add_argument("--dim", type=int, default=10_000)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--quick", action="store_true", help="a small, fast configuration")
    args = parser.parse_args()
    bench.main(cells=args.cells, dim=args.dim, steps=args.steps, quick=args.quick)
